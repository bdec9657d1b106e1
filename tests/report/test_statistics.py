"""The report's numbers are rliable's: known answers on constructed matrices, and equal intervals."""

from __future__ import annotations

import numpy as np
import pytest
from rliable import library as rly
from rliable import metrics

from digideep.errors import UsageError
from digideep.report.statistics import (
    aggregate_intervals,
    check_seeds,
    difference_interval,
    improvement_interval,
    performance_profiles,
    sample_efficiency,
    score_interval,
)

REPS = 500
# 8 runs x 2 tasks of normalised scores; task 0 holds 0.1 .. 0.8, task 1 holds 0.5 .. 1.9 (step 0.2)
MATRIX = np.stack([np.arange(1, 9) / 10, 0.5 + 0.2 * np.arange(8)], axis=1)


def test_aggregates_have_the_known_values() -> None:
    # IQM: the mean of the middle 8 of the 16 sorted scores, 0.5 0.5 0.6 0.7 0.7 0.8 0.9 1.1
    middle = np.sort(MATRIX.ravel())[4:12]
    result = aggregate_intervals({"a": MATRIX}, reps=REPS)["a"]
    assert result["IQM"].point == pytest.approx(middle.mean())
    assert result["IQM"].point == pytest.approx(0.725)
    assert result["Mean"].point == pytest.approx(MATRIX.mean())  # mean of the per-task means
    assert result["Median"].point == pytest.approx(np.median(MATRIX.mean(axis=0)))  # median over tasks
    gap = np.mean(np.maximum(1.0 - MATRIX, 0.0))  # optimality gap, gamma 1
    assert result["Optimality gap"].point == pytest.approx(gap)
    for interval in result.values():
        assert interval.low <= interval.point <= interval.high


def test_intervals_equal_rliable_called_directly_with_the_same_seed() -> None:
    def aggregate(x: np.ndarray) -> np.ndarray:
        return np.array(
            [
                metrics.aggregate_iqm(x),
                metrics.aggregate_mean(x),
                metrics.aggregate_median(x),
                metrics.aggregate_optimality_gap(x),
            ]
        )

    np.random.seed(7)
    points, intervals = rly.get_interval_estimates(
        {"a": MATRIX, "b": MATRIX[::-1] * 0.5}, aggregate, reps=REPS
    )
    ours = aggregate_intervals({"a": MATRIX, "b": MATRIX[::-1] * 0.5}, reps=REPS, seed=7)
    for group in ("a", "b"):
        got = np.array([[v.low for v in ours[group].values()], [v.high for v in ours[group].values()]])
        np.testing.assert_array_equal(got, intervals[group])
        np.testing.assert_array_equal([v.point for v in ours[group].values()], points[group])

    np.random.seed(3)
    _, direct = rly.get_interval_estimates(
        {"x": MATRIX[:, :1]}, lambda x: np.array([metrics.aggregate_mean(x)]), reps=REPS
    )
    single = score_interval(MATRIX[:, 0], reps=REPS, seed=3)
    assert (single.low, single.high) == (direct["x"][0, 0], direct["x"][1, 0])
    assert single.point == pytest.approx(0.45)


def test_the_seed_makes_a_report_repeatable_and_leaves_numpy_as_it_was() -> None:
    np.random.seed(123)
    expected_next = np.random.random()
    np.random.seed(123)
    first = score_interval(MATRIX[:, 1], reps=REPS, seed=0)
    assert np.random.random() == expected_next  # the caller's stream went on untouched
    assert score_interval(MATRIX[:, 1], reps=REPS, seed=0) == first
    assert score_interval(MATRIX[:, 1], reps=REPS, seed=1) != first


def test_profiles_and_curves_equal_rliable() -> None:
    taus = np.linspace(0, 2, 11)
    np.random.seed(0)
    direct, direct_bands = rly.create_performance_profile({"a": MATRIX}, taus, reps=REPS)
    profiles, bands = performance_profiles({"a": MATRIX}, taus, reps=REPS, seed=0)
    np.testing.assert_array_equal(profiles["a"], direct["a"])
    np.testing.assert_array_equal(bands["a"], direct_bands["a"])
    assert profiles["a"][0] == 1.0 and profiles["a"][-1] == 0.0  # every score > 0, none > 2

    curves = np.stack([MATRIX * f for f in (0.25, 0.5, 1.0)], axis=-1)  # (runs, tasks, points)
    iqm, iqm_bands = sample_efficiency({"a": curves}, reps=REPS, seed=0)
    expected = [metrics.aggregate_iqm(curves[..., i]) for i in range(3)]
    np.testing.assert_allclose(iqm["a"], expected)
    np.testing.assert_allclose(iqm["a"], np.array([0.25, 0.5, 1.0]) * 0.725)
    assert iqm_bands["a"].shape == (2, 3)
    np.random.seed(0)  # the bands of rliable's own per-point loop (the report evaluates all points at once)
    _, direct_iqm_bands = rly.get_interval_estimates(
        {"a": curves},
        lambda x: np.array([metrics.aggregate_iqm(x[..., i]) for i in range(x.shape[-1])]),
        reps=REPS,
    )
    np.testing.assert_allclose(iqm_bands["a"], direct_iqm_bands["a"], rtol=1e-12)


def test_probability_of_improvement_known_answers_and_rliable() -> None:
    better = MATRIX + 5.0
    assert improvement_interval(better, MATRIX, reps=REPS).point == 1.0
    assert improvement_interval(MATRIX, better, reps=REPS).point == 0.0
    assert improvement_interval(MATRIX, MATRIX, reps=REPS).point == 0.5
    y = MATRIX[:5] + 0.05  # fewer runs than x: P(X > Y) still defined
    ours = improvement_interval(MATRIX, y, reps=REPS, seed=2)
    assert ours.point == metrics.probability_of_improvement(MATRIX, y)
    np.random.seed(2)
    _, direct = rly.get_interval_estimates(
        {"p": [MATRIX, y]}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]), reps=REPS
    )
    assert (ours.low, ours.high) == (direct["p"][0, 0], direct["p"][1, 0])


def test_difference_of_means_known_answer_and_rliable() -> None:
    y = MATRIX[:5] - 0.3  # fewer runs than x, lower on both tasks
    ours = difference_interval(MATRIX, y, reps=REPS, seed=3)
    assert ours.point == pytest.approx(MATRIX.mean() - y.mean())
    assert ours.low <= ours.point <= ours.high
    np.random.seed(3)
    _, direct = rly.get_interval_estimates(
        {"d": [MATRIX, y]},
        lambda a, b: np.array([metrics.aggregate_mean(a) - metrics.aggregate_mean(b)]),
        reps=REPS,
    )
    assert (ours.low, ours.high) == (direct["d"][0, 0], direct["d"][1, 0])
    assert difference_interval(MATRIX, MATRIX, reps=REPS).point == 0.0


def test_one_seed_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match=r"params.x on Hopper-v5 has 1 seed; .* at least 2"):
        check_seeds("params.x", "Hopper-v5", 1)
    check_seeds("params.x", "Hopper-v5", 2)
