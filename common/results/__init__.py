"""Results and their schema: the result row (make it, check it, upgrade an older one), the
results file, the probe file beside it, and where a command may write.

May import: workload, backends, grids, measuring.
"""
