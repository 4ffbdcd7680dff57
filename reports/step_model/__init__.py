"""A step modelled part by part: one step's collectives on a timeline, the calibration from
measured cells, predict (and its check against measured cells and published records, kept here
as published.toml, with the links it knows in links.toml), what-if, and each cell against the
machine's limits. May import the numbers wing."""
