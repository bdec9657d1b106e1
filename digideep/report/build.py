"""A report's content from a selection of runs: the per-environment table, aggregates and figures.

Nothing here reads MLflow or writes files: :func:`build_report` takes a checked
:class:`~digideep.report.selection.Selection` and the reference scores, and returns a :class:`Report`
that :mod:`digideep.report.table` and :mod:`digideep.report.html` render and the CLI writes.

Aggregates across environments (IQM, mean, median, optimality gap, performance profiles,
sample-efficiency curves) are computed on normalised scores, so they need a reference score for
every environment; a report of one environment without one aggregates its raw returns, and a
report of several without them says so in one line and gives the per-environment results only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from digideep.errors import UsageError
from digideep.report import figures
from digideep.report.references import EnvReference, Published, algorithm_family
from digideep.report.selection import Selection
from digideep.report.statistics import (
    DEFAULT_REPS,
    Interval,
    aggregate_intervals,
    check_seeds,
    improvement_interval,
    performance_profiles,
    sample_efficiency,
    score_interval,
)

__all__ = ["FEW_SEEDS", "PROFILE_POINTS", "Report", "Row", "build_report"]

PROFILE_POINTS = 101
FEW_SEEDS = 5
"""Below this many seeds in a cell, the report says its intervals are the runs' spread (rliable's
bootstrap over 3 runs reaches about their minimum and maximum)."""


@dataclass(frozen=True)
class Row:
    """One group on one environment: its score's mean over seeds, interval, and published values."""

    env: str
    group: str
    seeds: int
    score: Interval
    published: tuple[Published, ...]  # same family, same frame budget
    runs: tuple[tuple[str, float], ...] = ()  # (seed, score) of each run, by seed
    resumes: tuple[
        tuple[str, int | None], ...
    ] = ()  # (seed, resumes) of each run, by seed (None: not counted)

    @property
    def below(self) -> tuple[Published, ...]:
        """The published values our whole interval lies below."""
        return tuple(p for p in self.published if self.score.high < p.value)


@dataclass
class Report:
    """Everything a report shows; ``figures`` maps a PNG's file name to its bytes."""

    selection: Selection
    last: int
    reps: int
    seed: int
    rows: list[Row]
    scale: str  # what the aggregates' numbers are: "normalised score" or "return on <env>"
    aggregates: dict[str, dict[str, Interval]] = field(default_factory=dict)
    improvements: list[tuple[str, str, Interval]] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    scale_notes: list[str] = field(default_factory=list)  # what 0 and 1 of a normalised score are, per env
    sources: list[str] = field(default_factory=list)  # of the published values shown and the references


def build_report(
    selection: Selection,
    references: Mapping[str, EnvReference],
    last: int = 1,
    reps: int = DEFAULT_REPS,
    seed: int = 0,
    compare: Sequence[str] | None = None,
) -> Report:
    """The report of ``selection``: every statistic by rliable with bootstrap seed ``seed``.

    Raises:
        UsageError: a group has fewer than 2 seeds on an environment, or ``compare`` names a group
            that is not in the selection.
    """
    if compare:
        _check_compare(selection, compare)
    rows = _rows(selection, references, last, reps, seed)
    scale, normalise = _scale(selection, references)
    report = Report(selection, last, reps, seed, rows, scale)
    report.notes.extend(selection.notes)
    fewest = min(row.seeds for row in rows)
    if fewest < FEW_SEEDS:
        report.notes.append(
            f"{fewest} seeds in the smallest cell: with fewer than {FEW_SEEDS}, a 95 % bootstrap interval "
            "reaches about the lowest and highest of the runs' scores, and P(A > B)'s can span [0, 1]; "
            "read the intervals as the spread of the runs, not as confidence, and run more seeds to "
            "tell methods apart"
        )
    if normalise is None:
        missing = [e for e in selection.envs if _reference(references, e) is None]
        report.notes.append(
            f"aggregates across environments need normalised scores, and {', '.join(missing)} "
            f"{'has' if len(missing) == 1 else 'have'} no reference score in the data file: "
            "per-environment results only"
        )
    else:
        _aggregate(report, normalise)
    # every environment has a reference when the scale is the normalised score (_scale)
    normalising = (
        [_reference(references, env) for env in selection.envs] if scale == "normalised score" else []
    )
    report.scale_notes = [
        f"{ref.env}: 0 is the random policy's {ref.random:g} (measured, see the reference file), 1 is "
        f"{ref.reference.name}'s {ref.reference.value:g} ({ref.reference.measured_on}, "
        f"{ref.reference.frames:,} frames)"
        for ref in normalising
    ]
    published = (p.source for row in rows for p in row.published)
    report.sources = sorted({*(ref.reference.source for ref in normalising), *published})
    if compare:
        _compare(report, compare)
    return report


def _check_compare(selection: Selection, compare: Sequence[str]) -> None:
    for name in compare:
        if name not in selection.groups:
            raise UsageError(
                f"--compare names '{name}', which is not in the selection; choose from "
                f"{', '.join(selection.groups)}"
            )


def _rows(
    selection: Selection, references: Mapping[str, EnvReference], last: int, reps: int, seed: int
) -> list[Row]:
    rows = []
    budget = selection.protocol.frame_budget
    for env in selection.envs:
        reference = references.get(env)
        for group in selection.groups:
            runs = selection.runs_of(group, env)
            if not runs:
                continue
            check_seeds(group, env, len(runs))
            family = algorithm_family(runs[0].algorithm)
            published = tuple(reference.at_budget(budget, family)) if reference and family else ()
            scores = [(r.seed, r.score(last)) for r in runs]
            score = score_interval(np.array([s for _, s in scores]), reps, seed)
            resumes = tuple((r.seed, r.resumes) for r in runs)
            rows.append(Row(env, group, len(runs), score, published, tuple(scores), resumes))
    return rows


def _reference(references: Mapping[str, EnvReference], env: str) -> EnvReference | None:
    found = references.get(env)
    return found if found is not None and found.reference is not None else None


def _scale(
    selection: Selection, references: Mapping[str, EnvReference]
) -> tuple[str, Callable[[np.ndarray], np.ndarray] | None]:
    """What the aggregates are computed on, and the function that turns raw scores into it (or None)."""
    found = [_reference(references, env) for env in selection.envs]
    if all(found):

        def normalise(scores: np.ndarray) -> np.ndarray:  # (runs, envs, ...) raw -> normalised
            out = np.array(scores, dtype=np.float64, copy=True)
            for j, reference in enumerate(found):
                out[:, j] = reference.normalise(out[:, j])
            return out

        return "normalised score", normalise
    if len(selection.envs) == 1:
        return f"return on {selection.envs[0]}", lambda scores: np.asarray(scores, dtype=np.float64)
    return "", None


def _aggregate(report: Report, normalise: Callable[[np.ndarray], np.ndarray]) -> None:
    selection, envs = report.selection, report.selection.envs
    matrices, curves = {}, {}
    frames = selection.common_frames()
    for group in selection.groups:
        if len(selection.common_seeds(group, envs)) < 2:
            report.notes.append(
                f"{group} has fewer than 2 seeds that ran on every environment: not aggregated"
            )
            continue
        matrices[group] = normalise(selection.score_matrix(group, envs, report.last))
        curves[group] = normalise(selection.curve_tensor(group, envs)[1])
    if not matrices:
        return
    reps, seed = report.reps, report.seed
    report.aggregates = aggregate_intervals(matrices, reps, seed)
    report.figures["aggregates.png"] = figures.aggregates_png(report.aggregates, report.scale)
    values = np.concatenate([m.ravel() for m in matrices.values()])
    taus = np.linspace(min(0.0, values.min()), max(1.0, values.max()), PROFILE_POINTS)
    profiles, bands = performance_profiles(matrices, taus, reps, seed)
    report.figures["performance_profile.png"] = figures.profile_png(profiles, bands, taus, report.scale)
    iqm, iqm_bands = sample_efficiency(curves, reps, seed)
    report.figures["sample_efficiency.png"] = figures.sample_efficiency_png(
        frames, iqm, iqm_bands, f"IQM {report.scale}"
    )


def _compare(report: Report, compare: Sequence[str]) -> None:
    """P(A > B) on the environments both ran, on raw returns (a per-environment rank statistic)."""
    selection = report.selection
    a, b = compare
    envs = [e for e in selection.envs if selection.runs_of(a, e) and selection.runs_of(b, e)]
    if not envs:
        raise UsageError(f"{a} and {b} share no environment in the selection; nothing to compare")
    x = selection.score_matrix(a, envs, report.last)
    y = selection.score_matrix(b, envs, report.last)
    check_seeds(a, ", ".join(envs), len(x))
    check_seeds(b, ", ".join(envs), len(y))
    report.improvements.append((a, b, improvement_interval(x, y, report.reps, report.seed)))
    report.figures["improvement.png"] = figures.improvement_png(report.improvements)
