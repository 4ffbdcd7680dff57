"""The grid files (TOML) xbench ships: `xbench grid --preset NAME` runs experiments/NAME.toml."""
