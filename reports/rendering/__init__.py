"""Numbers and verdicts as text and pictures: the report's tables and figures, predict's tables,
and the other commands' renderers (compare, profile, probe, trace, the MLflow export). May import
the numbers, step-model and judging wings."""
