"""A benchmark in MLflow: one parent run, every cell's run nested under it (``docs/benchmark.md``).

The parent run lives in the experiment :data:`EXPERIMENT` and is tagged ``digideep.kind=benchmark``
and ``digideep.benchmark=<name>``; it is found again by those tags, so a retried benchmark keeps
its parent. A parameter file's cell is tracked by its train run, in its parameter file's
experiment as any train run, tagged and nested through the train flow's ``benchmark`` parameter
(or ``digideep train --benchmark``, in the Slurm jobs of :mod:`digideep.slurm.benchmark`;
:func:`~digideep.tracking.trials.benchmark_tags`); an SB3 cell's run is made in :data:`EXPERIMENT`.
``digideep report`` finds all of them by the tag ``digideep.benchmark``. Every cell's run counts how
often it continued from a checkpoint in the tag ``digideep.resumes``, which :func:`summary` shows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from digideep.pipeline.evaluation import RETURN_METRIC, EvaluationProtocol
from digideep.tracking.tags import RESUMES_TAG
from digideep.tracking.trials import BENCHMARK_CELL_KEYS

if TYPE_CHECKING:
    from digideep.benchmark.matrix import Cell

__all__ = [
    "EXPERIMENT",
    "KIND_TAG",
    "cell_runs",
    "delete_unfinished",
    "finish_parent",
    "open_parent",
    "score",
    "summary",
]

EXPERIMENT = "benchmarks"
KIND_TAG = "digideep.kind"
NAME_TAG = "digideep.benchmark"


def open_parent(
    client: Any,
    experiment_id: str,
    name: str,
    protocol: EvaluationProtocol,
    axes: Mapping[str, Any],
    flow_run_id: str | None,
) -> str:
    """The benchmark's parent run: found by its tags (a retried benchmark), else created RUNNING.

    Args:
        client: an ``MlflowClient``; experiment_id: :data:`EXPERIMENT`'s id.
        name: the benchmark's name.
        protocol: logged as the ``eval/*`` params.
        axes: the matrix (algorithms, envs, seeds, variants), logged as JSON params.
        flow_run_id: the benchmark's Prefect flow run (None: none, its cells run as Slurm jobs).
    """
    found = client.search_runs(
        [experiment_id], filter_string=f"tags.`{KIND_TAG}` = 'benchmark' and tags.`{NAME_TAG}` = '{name}'"
    )
    if found:
        client.update_run(found[0].info.run_id, status="RUNNING")
        return found[0].info.run_id
    from mlflow.entities import Param

    tags = {KIND_TAG: "benchmark", NAME_TAG: name}
    if flow_run_id is not None:
        tags["prefect.flow_run_id"] = flow_run_id
    run = client.create_run(experiment_id, run_name=f"benchmark {name}", tags=tags)
    params = {**protocol.mlflow_params(), **{f"benchmark/{k}": json.dumps(v) for k, v in axes.items()}}
    client.log_batch(run.info.run_id, params=[Param(k, v[:6000]) for k, v in params.items()])
    return run.info.run_id


def cell_runs(client: Any, name: str, cell: Mapping[str, Any]) -> list[Any]:
    """The runs of one cell (``algorithm``, ``env``, ``seed``, ``variant``) of benchmark ``name``, any experiment."""
    conditions = [f"tags.`{NAME_TAG}` = '{name}'"]
    conditions += [f"tags.`{key}` = '{cell[key]}'" for key in BENCHMARK_CELL_KEYS]
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, filter_string=" and ".join(conditions))


def delete_unfinished(client: Any, runs: list[Any]) -> list[Any]:
    """Delete the runs that did not finish (a cell trained again from the start); the finished ones."""
    finished = [run for run in runs if run.info.status == "FINISHED"]
    for run in runs:
        if run.info.status != "FINISHED":
            client.delete_run(run.info.run_id)
    return finished


def score(client: Any, run_id: str) -> float:
    """The run's score: ``eval/return`` at its last evaluation (NaN without one)."""
    history = client.get_metric_history(run_id, RETURN_METRIC)
    return max(history, key=lambda m: m.step).value if history else math.nan


def finish_parent(client: Any, parent_run_id: str, states: Mapping[str, str]) -> str:
    """End the parent run: FINISHED when every cell completed, else FAILED; counts as tags."""
    from mlflow.entities import RunTag

    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    client.log_batch(
        parent_run_id, tags=[RunTag(f"benchmark.cells.{s.lower()}", str(n)) for s, n in counts.items()]
    )
    status = "FINISHED" if set(counts) <= {"COMPLETED"} else "FAILED"
    client.set_terminated(parent_run_id, status)
    return status


def summary(client: Any, name: str, cells: Sequence[Cell], states: Mapping[str, str]) -> dict[str, Any]:
    """Each cell's state, run, score (its last ``eval/return``) and resumes (its run's
    ``digideep.resumes``: None without one run or without the tag), and a fixed-width table of them
    (``-`` where the resumes are None)."""
    rows = []
    for cell in cells:
        runs = cell_runs(client, name, cell.tags(name, None))
        run_id = runs[0].info.run_id if len(runs) == 1 else ""
        value = score(client, run_id) if run_id else float("nan")
        resumes = runs[0].data.tags.get(RESUMES_TAG) if run_id else None
        rows.append(
            {
                "cell": cell.key,
                "state": states.get(cell.key, "?"),
                "runs": len(runs),
                "run_id": run_id,
                "score": value,
                "resumes": None if resumes is None else int(resumes),
            }
        )
    lines = [["cell", "state", "runs", "score", "resumes"]]
    lines += [
        [r["cell"], r["state"], str(r["runs"]), f"{r['score']:.2f}", _shown(r["resumes"])] for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines)
    return {"cells": rows, "table": table}


def _shown(resumes: int | None) -> str:
    return "-" if resumes is None else str(resumes)
