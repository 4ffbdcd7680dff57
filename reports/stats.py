"""Dispersion of repeats, computed here once: mean, sample std, and a 95% confidence interval.

The interval is mean +- t * std / sqrt(n), with t the 0.975 quantile of Student's t for n - 1
degrees of freedom, read from the standard table below (scipy is not a dependency). Between table
entries the next smaller tabulated df is used, which widens the interval slightly (conservative).
"""
import math

import numpy as np

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
         17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
         25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000,
         120: 1.980}
CI_METHOD = ("95% CI = mean ± t·s/√n over the n ok repeats, t = Student's t 0.975 quantile for "
             "n−1 degrees of freedom (a table; between entries the next smaller df, slightly "
             "wider); no interval for n = 1")


def t_quantile(df):
    """Two-sided 95% Student's t critical value for `df` >= 1 degrees of freedom."""
    return T_975[max(d for d in T_975 if d <= df)]


def summarize(values):
    """{n, mean, std, ci} of the finite values; std and ci (the half-width) are NaN for n < 2."""
    values = np.asarray([v for v in values if v is not None], dtype=float)
    values = values[np.isfinite(values)]
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": math.nan, "std": math.nan, "ci": math.nan}
    if n == 1:
        return {"n": 1, "mean": float(values[0]), "std": math.nan, "ci": math.nan}
    std = float(values.std(ddof=1))
    return {"n": n, "mean": float(values.mean()), "std": std,
            "ci": t_quantile(n - 1) * std / math.sqrt(n)}
