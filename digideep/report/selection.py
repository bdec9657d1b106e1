"""Which runs a report reads, checked against the evaluation protocol before any number is computed.

A run contributes its ``eval/return`` history (step = training frames, one point per evaluation) and
the tags that place it in the matrix: ``algorithm``, ``env``, ``seed`` and ``variant`` (the benchmark
flow sets them; a plain ``digideep train`` run falls back to ``digideep.params_module``,
``cpanel/model_name`` and ``cpanel/seed``), the count of times it continued from a checkpoint, its
tag ``digideep.resumes``, and the machine of each attempt (``digideep.machine.<n>``). Only runs that
ended FINISHED are read; scored at an earlier frame (``at``), a run still training counts too once its
evaluations have reached that frame. The runs come as
:class:`~digideep.report.records.RunRecord` from an MLflow store, from export folders, or both
(:func:`select_records`), so a report computes the same numbers wherever its runs were read. Every
refusal is a :class:`~digideep.errors.UsageError` of one line that says what to change.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from digideep.errors import UsageError
from digideep.report.records import BENCHMARK_TAG, KIND_TAG, RESUMES_TAG, RunRecord
from digideep.tracking.tags import attempt_machines

__all__ = [
    "BENCHMARK_TAG",
    "KIND_TAG",
    "PROTOCOL_PARAMS",
    "RETURN_METRIC",
    "Protocol",
    "RunScores",
    "Selection",
    "check_criteria",
    "select_records",
]

RETURN_METRIC = "eval/return"
PROTOCOL_PARAMS = ("eval/frame_interval", "eval/episodes", "eval/frame_budget")
DEFAULT_VARIANT = "default"


@dataclass(frozen=True)
class Protocol:
    """The evaluation protocol every selected run shares (its ``eval/*`` params)."""

    frame_interval: int
    episodes: int
    frame_budget: int


@dataclass(frozen=True)
class RunScores:
    """One run's evaluations: ``frames: (evals,) int64`` ascending, ``returns: (evals,) float64``."""

    run_id: str
    algorithm: str
    variant: str
    env: str
    seed: str
    frames: np.ndarray
    returns: np.ndarray
    resumes: int | None = None  # its digideep.resumes tag: None for a run tracked before resumes were counted
    # each attempt's digideep.machine.<n> (None: no tag); () for a run tracked before machines were recorded
    machines: tuple[str | None, ...] = ()

    @property
    def group(self) -> str:
        """What the report compares: the algorithm, with ``@variant`` unless it is the default."""
        return self.algorithm if self.variant == DEFAULT_VARIANT else f"{self.algorithm}@{self.variant}"

    def score(self, last: int = 1) -> float:
        """The run's score: the mean ``eval/return`` of its last ``last`` evaluations (1: the final one)."""
        return float(np.mean(self.returns[-last:]))


@dataclass
class Selection:
    """The runs of a report, grouped; ``parent_run_id`` is the benchmark's parent run, if any."""

    description: str
    runs: list[RunScores]
    protocol: Protocol
    parent_run_id: str | None = None
    left_out: int = 0  # runs matched but not FINISHED (with ``at``: nor evaluated at ``at`` yet)
    trained_budget: int | None = None  # scored at an earlier frame: the budget the runs train to
    groups: list[str] = field(default_factory=list)
    envs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # about how the runs were read (runs read twice)

    def runs_of(self, group: str, env: str) -> list[RunScores]:
        """The runs of ``group`` on ``env``, by seed."""
        runs = [r for r in self.runs if r.group == group and r.env == env]
        return sorted(runs, key=lambda r: _seed_key(r.seed))

    def score_matrix(self, group: str, envs: Sequence[str], last: int = 1) -> np.ndarray:
        """``(seeds, envs) float64`` scores of ``group``: the seeds it ran on every one of ``envs``."""
        seeds = self.common_seeds(group, envs)
        return np.array(
            [[self._run(group, env, seed).score(last) for env in envs] for seed in seeds], dtype=np.float64
        ).reshape(len(seeds), len(envs))

    def curve_tensor(self, group: str, envs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``frames: (points,)`` and ``returns: (seeds, envs, points)``, at the frames every run evaluated."""
        seeds = self.common_seeds(group, envs)
        runs = [[self._run(group, env, seed) for env in envs] for seed in seeds]
        frames = self.common_frames()
        tensor = np.array(
            [[r.returns[np.searchsorted(r.frames, frames)] for r in row] for row in runs], dtype=np.float64
        )
        return frames, tensor.reshape(len(seeds), len(envs), len(frames))

    def common_seeds(self, group: str, envs: Sequence[str]) -> list[str]:
        """The seeds ``group`` has a run for on every one of ``envs``."""
        sets = [{r.seed for r in self.runs_of(group, env)} for env in envs]
        return sorted(set.intersection(*sets), key=_seed_key) if sets else []

    def common_frames(self) -> np.ndarray:
        """The frame points at which every selected run evaluated, ascending."""
        frames = set(self.runs[0].frames.tolist())
        for run in self.runs[1:]:
            frames &= set(run.frames.tolist())
        return np.array(sorted(frames), dtype=np.int64)

    def _run(self, group: str, env: str, seed: str) -> RunScores:
        return next(r for r in self.runs_of(group, env) if r.seed == seed)


def select_records(
    records: Sequence[RunRecord],
    description: str,
    sources: Sequence[str],
    last: int = 1,
    parent_run_id: str | None = None,
    at: int | None = None,
) -> Selection:
    """The selection of ``records`` (read from ``sources``, described as ``description``), checked.

    With ``at`` (an evaluation frame within the budget) every run is scored as if its budget were
    ``at``: its evaluations up to ``at`` only, so a report reads a 300k table at 100k, or a table
    still training; the selection's protocol then has ``frame_budget`` ``at``.

    A run read twice (the same run id from two sources) counts once, with a note, when both records
    agree; two different runs of one cell are refused.

    Raises:
        UsageError: no finished run, a run outside the protocol, protocols or budgets mixed, a cell
            with two runs, one run read twice with different contents, or a run with fewer than
            ``last`` evaluations, or an ``at`` that is no evaluation frame of the protocol.
    """
    records, notes = _once_each(records)
    cells = [r for r in records if r.is_cell]  # not a benchmark's or study's parent
    read = [r for r in cells if r.status == "FINISHED" or (at is not None and _reached(r, at))]
    if not read:
        extra = f" ({len(cells)} not FINISHED)" if cells else ""
        raise UsageError(
            f"no finished runs match {description} at {', '.join(sources)}{extra}; "
            "list runs with 'digideep runs'"
        )
    protocol = trained = _one_protocol(read)
    if at is not None:
        protocol = _scored_at(trained, at)
    runs = [_scores(record, protocol, last) for record in read]
    _check_cells(runs, {r.run_id: r.source for r in read})
    return Selection(
        description=description,
        runs=runs,
        protocol=protocol,
        parent_run_id=parent_run_id,
        left_out=len(cells) - len(read),
        trained_budget=trained.frame_budget if at is not None else None,
        groups=sorted({r.group for r in runs}),
        envs=sorted({r.env for r in runs}),
        notes=notes,
    )


def check_criteria(benchmark: str | None, experiment: str | None, tags: Sequence[str]) -> None:
    """Refuse a selection without any criterion (every run of the store is never what was meant).

    Raises:
        UsageError: none of ``benchmark``, ``experiment`` and ``tags`` is given.
    """
    if not (benchmark or experiment or tags):
        raise UsageError(
            "choose the runs to report with --benchmark NAME, --experiment NAME or --tag KEY=VALUE"
        )


def _once_each(records: Sequence[RunRecord]) -> tuple[list[RunRecord], list[str]]:
    """``records`` with each run id once, and a note per pair of sources that both held some runs."""
    kept: dict[str, RunRecord] = {}
    twice: dict[tuple[str, str], list[str]] = defaultdict(list)
    for record in records:
        first = kept.setdefault(record.run_id, record)
        if first is record:
            continue
        if first != record:
            raise UsageError(
                f"run {record.run_id} differs between {first.source} and {record.source}; export it "
                "again from the store that ran it, or leave one of them out"
            )
        twice[(first.source, record.source)].append(record.run_id)
    notes = [
        f"{len(ids)} run{'s' * (len(ids) != 1)} read from both {a} and {b}, each counted once: {', '.join(ids)}"
        for (a, b), ids in twice.items()
    ]
    return list(kept.values()), notes


def _one_protocol(records: Sequence[RunRecord]) -> Protocol:
    values: dict[str, Counter] = {name: Counter() for name in PROTOCOL_PARAMS}
    for record in records:
        for name in PROTOCOL_PARAMS:
            value = record.params.get(name)
            if value is None:
                raise UsageError(
                    f"run {record.run_id} has no '{name}' param: it was not trained with the evaluation "
                    "protocol (docs/report.md); retrain it, or narrow the selection with --tag"
                )
            values[name][value] += 1
    for name, counts in values.items():
        if len(counts) > 1:
            spread = ", ".join(f"{value} in {n} run{'s' * (n != 1)}" for value, n in sorted(counts.items()))
            raise UsageError(
                f"the runs mix {name} ({spread}); one report compares one protocol: narrow the "
                "selection with --tag or --experiment"
            )
    interval, episodes, budget = (int(next(iter(values[name]))) for name in PROTOCOL_PARAMS)
    return Protocol(frame_interval=interval, episodes=episodes, frame_budget=budget)


def _reached(record: RunRecord, at: int) -> bool:
    """Whether a run still training has the protocol's params and an evaluation at frame ``at`` or later."""
    has_params = all(name in record.params for name in PROTOCOL_PARAMS)
    return has_params and any(point.step >= at for point in record.history(RETURN_METRIC))


def _scored_at(protocol: Protocol, at: int) -> Protocol:
    """``protocol`` with budget ``at``, an evaluation frame of it."""
    if not 0 < at <= protocol.frame_budget or at % protocol.frame_interval:
        raise UsageError(
            f"--at {at} is no evaluation frame of the runs (every {protocol.frame_interval} frames up to "
            f"{protocol.frame_budget}); name one of those"
        )
    return Protocol(protocol.frame_interval, protocol.episodes, at)


def _scores(record: RunRecord, protocol: Protocol, last: int) -> RunScores:
    tags, params, run_id = record.tags, record.params, record.run_id
    by_step: dict[int, tuple[int, float]] = {}
    for point in record.history(RETURN_METRIC):
        if point.step > protocol.frame_budget:  # scored at an earlier frame (``at``)
            continue
        if point.step not in by_step or point.timestamp >= by_step[point.step][0]:
            by_step[point.step] = (point.timestamp, point.value)  # a resumed run's last word per step
    frames = np.array(sorted(by_step), dtype=np.int64)
    returns = np.array([by_step[int(step)][1] for step in frames], dtype=np.float64)
    if len(frames) < last or (len(frames) and frames[-1] != protocol.frame_budget):
        ends = f"at frame {frames[-1]}" if len(frames) else "without any"
        raise UsageError(
            f"run {run_id} ends its '{RETURN_METRIC}' evaluations {ends} ({len(frames)} of them), not at "
            f"its eval/frame_budget {protocol.frame_budget} with at least {last}: finish or leave it out"
        )
    algorithm = tags.get("algorithm") or tags.get("digideep.params_module")
    env = tags.get("env") or params.get("cpanel/model_name")
    seed = tags.get("seed") or params.get("cpanel/seed")
    if not (algorithm and env and seed is not None):
        raise UsageError(
            f"run {run_id} lacks the tags algorithm, env and seed (the benchmark flow sets them); "
            "tag it or narrow the selection"
        )
    variant = tags.get("variant") or DEFAULT_VARIANT
    resumes = int(tags[RESUMES_TAG]) if RESUMES_TAG in tags else None
    return RunScores(
        run_id, algorithm, variant, env, str(seed), frames, returns, resumes, _machines(tags, resumes)
    )


def _machines(tags: Mapping[str, str], resumes: int | None) -> tuple[str | None, ...]:
    """The machine of each of a run's ``resumes + 1`` attempts (None where its tag is missing)."""
    found = dict(attempt_machines(tags))
    if not found:
        return ()
    attempts = max(max(found), resumes or 0) + 1
    return tuple(found.get(attempt) for attempt in range(attempts))


def _check_cells(runs: Sequence[RunScores], sources: dict[str, str]) -> None:
    cells: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for run in runs:
        cells[(run.group, run.env, run.seed)].append(run.run_id)
    for (group, env, seed), ids in cells.items():
        if len(ids) > 1:
            where = ", ".join(f"{i} in {sources[i]}" for i in ids)
            raise UsageError(
                f"{group} on {env} seed {seed} has {len(ids)} finished runs ({where}); "
                "delete the extra ones or narrow the selection with --tag"
            )


def _seed_key(seed: str) -> tuple[int, int | str]:
    return (0, int(seed)) if seed.lstrip("-").isdigit() else (1, seed)
