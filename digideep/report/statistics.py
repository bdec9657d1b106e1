"""The report's statistics, all computed by rliable (Agarwal et al., NeurIPS 2021): its bootstrap, and
its metrics (three of them, the score distribution at each threshold, the IQM at each evaluation point
and P(X > Y), evaluated in one vectorized call per resample where rliable makes one per threshold,
point or task).

Score matrices are ``(runs, tasks) float64`` (a task is an environment, a run a seed), curves
``(runs, tasks, points) float64``. Every interval is rliable's stratified bootstrap, percentile
method, 95 %, with ``reps`` resamples.

rliable draws its resamples from NumPy's global generator (its ``random_state`` argument reaches
``arch``, which deprecates it, but not rliable's own index sampling), so every function here runs its
bootstrap under :func:`seeded`: the global generator is seeded with ``seed`` and put back afterwards,
which makes a report repeatable and leaves the caller's random stream as it was.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import scipy.stats
from rliable import library as rly
from rliable import metrics

from digideep.errors import UsageError
from digideep.report import DEFAULT_REPS

__all__ = [
    "AGGREGATES",
    "CONFIDENCE",
    "DEFAULT_REPS",
    "Interval",
    "aggregate_intervals",
    "check_seeds",
    "difference_interval",
    "improvement_interval",
    "performance_profiles",
    "sample_efficiency",
    "score_interval",
    "seeded",
]

CONFIDENCE = 0.95
AGGREGATES = ("IQM", "Mean", "Median", "Optimality gap")


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95 % bootstrap interval."""

    point: float
    low: float
    high: float


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """NumPy's global generator seeded with ``seed`` inside the block, its former state after it."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def check_seeds(group: str, env: str, seeds: int) -> None:
    """Refuse an interval over fewer than 2 runs (a bootstrap of one value is that value).

    Raises:
        UsageError: ``seeds < 2``.
    """
    if seeds < 2:
        raise UsageError(
            f"{group} on {env} has {seeds} seed; a 95 % interval needs at least 2: run more seeds, or "
            "leave it out with --tag"
        )


def score_interval(scores: np.ndarray, reps: int = DEFAULT_REPS, seed: int = 0) -> Interval:
    """Mean over runs of one environment's ``scores: (runs,)`` and its interval."""
    matrix = np.asarray(scores, dtype=np.float64).reshape(-1, 1)
    with seeded(seed):
        points, intervals = rly.get_interval_estimates(
            {"x": matrix},
            lambda x: np.array([metrics.aggregate_mean(x)]),
            reps=reps,
            confidence_interval_size=CONFIDENCE,
        )
    return Interval(float(points["x"][0]), float(intervals["x"][0, 0]), float(intervals["x"][1, 0]))


def aggregate_intervals(
    score_dict: Mapping[str, np.ndarray], reps: int = DEFAULT_REPS, seed: int = 0
) -> dict[str, dict[str, Interval]]:
    """IQM, mean, median and optimality gap of each group's ``(runs, tasks)`` matrix, with intervals."""

    def aggregate(x: np.ndarray) -> np.ndarray:
        return np.array(
            [
                metrics.aggregate_iqm(x),
                metrics.aggregate_mean(x),
                metrics.aggregate_median(x),
                metrics.aggregate_optimality_gap(x),
            ]
        )

    with seeded(seed):
        points, intervals = rly.get_interval_estimates(
            dict(score_dict), aggregate, reps=reps, confidence_interval_size=CONFIDENCE
        )
    return {
        group: {
            name: Interval(
                float(points[group][i]), float(intervals[group][0, i]), float(intervals[group][1, i])
            )
            for i, name in enumerate(AGGREGATES)
        }
        for group in score_dict
    }


def performance_profiles(
    score_dict: Mapping[str, np.ndarray], taus: np.ndarray, reps: int = DEFAULT_REPS, seed: int = 0
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The fraction of runs scoring above each ``tau``: ``profiles[g]: (taus,)``, ``bands[g]: (2, taus)``."""
    with seeded(seed):
        return rly.create_performance_profile(
            dict(score_dict),
            taus,
            custom_profile_func=_score_distributions,
            reps=reps,
            confidence_interval_size=CONFIDENCE,
        )


def _score_distributions(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's ``score_distributions`` (the fraction of all runs' scores above each ``tau``) for every
    ``tau`` in one comparison, where rliable's ``np.vectorize`` makes one call per ``tau``: the same
    values, bit for bit (docs/measurements.md gives the time it saves)."""
    return (scores.reshape(-1, 1) > taus).mean(axis=0)


def sample_efficiency(
    curves: Mapping[str, np.ndarray], reps: int = DEFAULT_REPS, seed: int = 0
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """IQM across runs and tasks at each evaluation point: ``iqm[g]: (points,)``, ``bands[g]: (2, points)``."""

    def iqm_per_point(x: np.ndarray) -> np.ndarray:
        # rliable's aggregate_iqm is scipy's 25 % trimmed mean over all runs and tasks; taken here for
        # every point in one call (the same values but for the order of a float sum)
        return scipy.stats.trim_mean(x.reshape(-1, x.shape[-1]), proportiontocut=0.25, axis=0)

    with seeded(seed):
        return rly.get_interval_estimates(
            dict(curves), iqm_per_point, reps=reps, confidence_interval_size=CONFIDENCE
        )


def improvement_interval(x: np.ndarray, y: np.ndarray, reps: int = DEFAULT_REPS, seed: int = 0) -> Interval:
    """P(X > Y): the probability that a run of X beats one of Y on a task, averaged over tasks.

    ``x: (runs_x, tasks)`` and ``y: (runs_y, tasks)``, the same tasks in the same order. A Mann-Whitney
    statistic per task, so raw returns of different scales need no normalising.
    """
    with seeded(seed):
        points, intervals = rly.get_interval_estimates(
            {"p": [np.asarray(x, np.float64), np.asarray(y, np.float64)]},
            lambda a, b: np.array([_probability_of_improvement(a, b)]),
            reps=reps,
            confidence_interval_size=CONFIDENCE,
        )
    return Interval(float(points["p"][0]), float(intervals["p"][0, 0]), float(intervals["p"][1, 0]))


def _probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """rliable's ``metrics.probability_of_improvement``, its per-task Mann-Whitney statistics taken in
    one scipy call instead of one per task: the same values, bit for bit (checked against rliable by
    tests/report/test_statistics.py)."""
    statistics = scipy.stats.mannwhitneyu(x, y, alternative="greater", axis=0).statistic
    return float(np.mean(statistics / (x.shape[0] * y.shape[0])))


def difference_interval(x: np.ndarray, y: np.ndarray, reps: int = DEFAULT_REPS, seed: int = 0) -> Interval:
    """Mean of X minus mean of Y, each over runs and tasks, with its interval.

    ``x: (runs_x, tasks)`` and ``y: (runs_y, tasks)``, the same tasks in the same order; the two are
    resampled apart (stratified by task), as for :func:`improvement_interval`. Where returns of
    different scales are mixed, pass one task, or normalised scores.
    """
    with seeded(seed):
        points, intervals = rly.get_interval_estimates(
            {"d": [np.asarray(x, np.float64), np.asarray(y, np.float64)]},
            lambda a, b: np.array([metrics.aggregate_mean(a) - metrics.aggregate_mean(b)]),
            reps=reps,
            confidence_interval_size=CONFIDENCE,
        )
    return Interval(float(points["d"][0]), float(intervals["d"][0, 0]), float(intervals["d"][1, 0]))
