import math

import pytest

from gpulint.runtime.stats import MIN_RUNS, TooFewRuns, check_runs, fmt, overlap, summarize


def test_summary_is_median_min_max_over_runs():
    s = summarize([3.0, 1.0, 2.0, 10.0, 4.0])
    assert s["median"] == 3.0
    assert (s["min"], s["max"], s["runs"]) == (1.0, 10.0, 5)
    assert s["spread"] == pytest.approx(9.0 / 3.0)
    assert s["mean"] == pytest.approx(4.0)


def test_even_count_median_is_the_middle_mean():
    assert summarize([1, 2, 3, 4])["median"] == 2.5


@pytest.mark.parametrize("n", [0, 1, 2])
def test_fewer_than_three_runs_is_no_evidence(n):
    with pytest.raises(TooFewRuns):
        summarize([1.0] * n)
    with pytest.raises(TooFewRuns):
        check_runs(n)
    assert MIN_RUNS == 3
    assert check_runs(3) == 3


def test_nan_is_refused():
    with pytest.raises(ValueError):
        summarize([1.0, math.nan, 2.0])


def test_overlap():
    a = summarize([1, 2, 3])
    assert overlap(a, summarize([3, 4, 5]))
    assert not overlap(a, summarize([4, 5, 6]))


@pytest.mark.parametrize(
    "value, text",
    [(1535.2, "1,535"), (54.94, "54.9"), (4.171, "4.17"), (0.5104, "0.51"), (26.1, "26.1")],
)
def test_figures_print_with_meaningful_digits(value, text):
    assert fmt(value) == text
