"""Results files -> verdicts, tables, figures and one HTML page: `xbench report` (build.py), the
comparison of two files (compare.py), the lab's answers (lab.py), the profile's and the probe's
tables. Reads only results files, through common's schema and store; no ML framework."""
