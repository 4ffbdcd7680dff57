"""The report's statistics (reports.numbers.stats): Fieller's interval for a ratio of means covers
the true ratio 95% of the time, says when it cannot bound the ratio, and the repeats-to-settle
estimate is consistent with the interval."""
import math

import numpy as np
import pytest

from xbench.reports.numbers.stats import (
    difference_of_means,
    false_discoveries_controlled,
    ratio_of_means,
    ratio_p_value,
    repeats_to_settle,
    summarize,
)
from xbench.reports.rendering.compare import verdict as compare_verdict


def test_fieller_interval_covers_the_true_ratio_95_percent_of_the_time():
    """3 repeats a side, a 2:1 ratio of epoch times, 8% noise (this machine's kind of spread)."""
    rng = np.random.default_rng(0)
    trials, covered = 4000, 0
    for _ in range(trials):
        a, b = rng.normal(2.0, 0.16, 3), rng.normal(1.0, 0.08, 3)
        ratio = ratio_of_means(a, b)
        covered += ratio.low <= 2.0 <= ratio.high
    assert covered / trials == pytest.approx(0.95, abs=0.015)


def test_ratio_by_hand_and_its_edges():
    a, b = [10.0, 11.0, 12.0], [5.0, 5.5, 6.0]
    ratio = ratio_of_means(a, b)
    assert ratio.value == pytest.approx(2.0) and ratio.low < 2.0 < ratio.high
    assert ratio.above(1) and not ratio.below(1)
    assert ratio.scaled(0.5).value == pytest.approx(1.0)
    single = ratio_of_means([10.0], b)
    assert single.value == pytest.approx(10 / 5.5) and not single.has_interval
    assert not single.above(0)  # no interval: nothing can be stated
    exact = ratio_of_means([2.0, 2.0], [1.0, 1.0])
    assert (exact.low, exact.value, exact.high) == (2.0, 2.0, 2.0)
    # a denominator whose mean is not surely away from zero: the ratio is unbounded
    unbounded = ratio_of_means([1.0, 1.1, 0.9], [0.1, -0.1, 0.05])
    assert math.isinf(unbounded.low) and math.isinf(unbounded.high)
    # times are positive, and so is a ratio of them: never an interval below 0
    wide = ratio_of_means([0.2, 1.0, 2.0], [1.0, 1.05, 0.95])
    assert wide.low == 0.0 and 1.0 < wide.high < math.inf
    times = ratio_of_means([1.0, 1.1, 0.9], [1.0, 0.1, 3.0])
    assert times.low == 0.0 and times.high == math.inf
    assert compare_verdict(wide) == compare_verdict(times) == "inconclusive"  # never "no change"


def shaped(values, n):
    """n values with exactly the mean and sample std of `values`."""
    z = np.linspace(-1, 1, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return np.mean(values) + np.std(values, ddof=1) * z


def settled_share(a, b, n, trials=3000):
    """How often a grid of n repeats a side, drawn with the means and spreads of a and b, gets
    an interval that excludes 1."""
    rng = np.random.default_rng(1)
    draw = [(np.mean(v), np.std(v, ddof=1)) for v in (a, b)]
    return np.mean([ratio_of_means(rng.normal(*draw[0], n), rng.normal(*draw[1], n)).low > 1
                    for _ in range(trials)])


def test_repeats_to_settle_settle_it_four_times_in_five():
    a, b = [1.05, 1.15, 1.10], [1.0, 1.08, 0.95]
    assert ratio_of_means(a, b).low < 1  # inconclusive with 3 repeats each
    needed = repeats_to_settle(a, b)
    assert needed is not None and needed > 3
    assert 0.8 <= settled_share(a, b, needed) <= 0.92
    # where the interval of the observed means would just stop containing 1: a coin toss
    just = next(n for n in range(4, 50) if ratio_of_means(shaped(a, n), shaped(b, n)).low > 1)
    assert just < needed and settled_share(a, b, just) < 0.65
    assert repeats_to_settle([1.0, 1.01], [1.0, 1.01]) is None  # no difference: never settles
    assert repeats_to_settle([1.0], [2.0]) is None  # no spread to extrapolate from


def test_p_value_agrees_with_the_interval_and_false_discoveries_are_controlled():
    a, b = [10.0, 11.0, 12.0], [5.0, 5.5, 6.0]
    assert ratio_p_value(a, b) < 0.05 and ratio_of_means(a, b).low > 1
    assert ratio_p_value(a, b, threshold=2.0) > 0.9  # the observed ratio itself
    assert math.isnan(ratio_p_value([1.0], b))
    # Benjamini-Hochberg at 5%: ranks 1..4 of 4 need p <= 0.0125, 0.025, 0.0375, 0.05
    stated = false_discoveries_controlled([0.01, 0.04, 0.03, math.nan, 0.5])
    assert list(stated) == [True, False, False, False, False]
    assert list(false_discoveries_controlled([0.01, 0.02, 0.03, 0.04])) == [True] * 4
    # the p-value is the interval's own test: below 5% exactly where the interval excludes 1
    rng = np.random.default_rng(3)
    for _ in range(2000):
        a, b = rng.normal(1.3, 0.3, 2), rng.normal(1.0, 0.2, 2)
        ratio = ratio_of_means(a, b)
        if math.isfinite(ratio.low) and math.isfinite(ratio.high):
            assert (ratio_p_value(a, b) < 0.05) == (ratio.low > 1 or ratio.high < 1), (a, b)
    # 200 comparisons where nothing differs: about 5% pass alone, none after the control
    rng = np.random.default_rng(2)
    p = [ratio_p_value(rng.normal(1, 0.05, 3), rng.normal(1, 0.05, 3)) for _ in range(200)]
    assert 3 <= sum(v < 0.05 for v in p) and not false_discoveries_controlled(p).any()


def test_mean_interval_and_difference_use_students_and_welchs_t():
    stats = summarize([100.0, 110.0, 120.0])
    assert stats["ci"] == pytest.approx(4.3026527 * 10 / math.sqrt(3))
    d, low, high = difference_of_means([0.90, 0.91, 0.92], [0.80, 0.81, 0.82])
    assert d == pytest.approx(0.10) and low > 0 and high < 0.2
    assert all(math.isnan(v) for v in difference_of_means([0.9], [0.8])[1:])  # no interval
    assert difference_of_means([0.9, 0.9], [0.8, 0.8]) == pytest.approx((0.1, 0.1, 0.1))
