"""What a number is made of, measured inside a rank: the step attribution, epoch timing,
contention on a rank's cores, the evidence of what was trained, time to a target, and this
machine's limits (its matmul and all-reduce peaks, the GPUs' data sheets).

May import: workload, backends.
"""
