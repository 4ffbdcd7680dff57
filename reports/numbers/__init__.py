"""The numbers: results files read into one frame of rows (each tagged with its environment and
usable or not), `--where` queries, the statistics (intervals, ratios, false discoveries), what a
cell keeps of its repeats, and the analysis frame every section's formula reads. The first wing:
imports no other wing of reports/."""
