"""Results files -> verdicts, tables, figures and one HTML page, in wings by stage, each importing
only the wings before it (tests/test_layout.py checks it):

numbers     results files -> one frame of rows; the statistics, what a cell keeps of its repeats,
            the analysis frame (cells, scaling, step parts)
step_model  a step modelled part by part: the timeline of its collectives, calibration, predict,
            what-if, the published records, the machine's limits
judging     what the numbers say: verdicts as data, SUSPECT, the decision, goodput, the knobs,
            repeats until conclusive
rendering   numbers and verdicts as text and pictures: tables, figures, predict's tables, and the
            other commands' renderers (compare, profile, probe, trace, MLflow export)
sections    the report's sections, one module each, and what they read (ReportData)
page        `xbench report`: the walked sections as index.html, summary.md and JSON

Reads only results files, through common's schema and store; no ML framework."""
