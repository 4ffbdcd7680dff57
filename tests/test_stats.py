"""The report's statistics (reports.stats): Fieller's interval for a ratio of means covers the true
ratio 95% of the time, says when it cannot bound the ratio, and the repeats-to-settle estimate
is consistent with the interval."""
import math

import numpy as np
import pytest

from xbench.reports.stats import difference_of_means, ratio_of_means, repeats_to_settle, summarize


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


def shaped(values, n):
    """n values with exactly the mean and sample std of `values`."""
    z = np.linspace(-1, 1, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return np.mean(values) + np.std(values, ddof=1) * z


def test_repeats_to_settle_is_where_the_interval_stops_containing_one():
    a, b = [1.05, 1.15, 1.10], [1.0, 1.08, 0.95]
    assert ratio_of_means(a, b).low < 1  # inconclusive with 3 repeats each
    needed = repeats_to_settle(a, b)
    assert needed is not None and needed > 3
    assert ratio_of_means(shaped(a, needed), shaped(b, needed)).low > 1
    assert ratio_of_means(shaped(a, needed - 1), shaped(b, needed - 1)).low <= 1
    assert repeats_to_settle([1.0, 1.01], [1.0, 1.01]) is None  # no difference: never settles
    assert repeats_to_settle([1.0], [2.0]) is None  # no spread to extrapolate from


def test_mean_interval_and_difference_use_students_and_welchs_t():
    stats = summarize([100.0, 110.0, 120.0])
    assert stats["ci"] == pytest.approx(4.3026527 * 10 / math.sqrt(3))
    d, low, high = difference_of_means([0.90, 0.91, 0.92], [0.80, 0.81, 0.82])
    assert d == pytest.approx(0.10) and low > 0 and high < 0.2
    assert all(math.isnan(v) for v in difference_of_means([0.9], [0.8])[1:])  # no interval
    assert difference_of_means([0.9, 0.9], [0.8, 0.8]) == pytest.approx((0.1, 0.1, 0.1))
