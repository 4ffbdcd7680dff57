"""Framework-free core of xbench: grid, data, model specs, results, runner and CLI."""
