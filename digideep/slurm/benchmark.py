"""A benchmark's cells as Slurm jobs: one training job per cell, tracked as the benchmark flow's cells.

Each parameter file's cell of the matrix (:func:`digideep.benchmark.matrix.plan`) is one session,
named after the benchmark and the cell (:func:`session_names`), trained by one job of
:mod:`digideep.slurm.job`: the warning before the time limit, the checkpoint, the requeue and the
exact resume of any training job. The job's ``digideep train`` gets the cell as ``--benchmark``
(:func:`cell_option`), so its MLflow run carries the tags of
:func:`~digideep.tracking.trials.benchmark_tags` and is nested under the benchmark's parent run
(:mod:`digideep.benchmark.records`), as the cells of the Prefect benchmark flow are:
``digideep report --benchmark NAME`` reads either alike. A Stable-Baselines3 cell trains in the
benchmark flow's own process and has no session to resume, so it is refused here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from digideep.benchmark import records
from digideep.benchmark.matrix import DEFAULT_VARIANT, Cell
from digideep.benchmark.sb3 import is_sb3
from digideep.errors import UsageError
from digideep.pipeline.evaluation import EvaluationProtocol

__all__ = ["cell_option", "close_benchmark", "open_benchmark", "session_names"]


def session_names(benchmark: str, cells: Sequence[Cell]) -> dict[str, str]:
    """Each cell's session name by its key, e.g. ``bench1-pendulum_sac-Pendulum-v1-s0``.

    The name is the benchmark's, the parameter file's last part, the environment, the seed and the
    variant when it is not ``default``, with anything but letters, digits, ``.``, ``-`` and ``_``
    replaced by ``_``.

    Raises:
        UsageError: an SB3 cell, or two cells whose names would be the same (one line).
    """
    names: dict[str, str] = {}
    for cell in cells:
        if is_sb3(cell.algorithm):
            raise UsageError(
                f"{cell.algorithm} cells do not run as Slurm jobs (an SB3 reference trains in the benchmark "
                "flow's process, with no session to resume); run them with 'digideep benchmark'"
            )
        algorithm = cell.algorithm
        short = Path(algorithm).stem if algorithm.endswith(".py") else algorithm.rsplit(".", 1)[-1]
        parts = [benchmark, short, cell.env, f"s{cell.seed}"]
        if cell.variant != DEFAULT_VARIANT:
            parts.append(cell.variant)
        name = re.sub(r"[^\w.-]+", "_", "-".join(parts))
        twin = next((key for key, given in names.items() if given == name), None)
        if twin is not None:
            raise UsageError(
                f"cells {twin} and {cell.key} would share the session {name}; give their parameter files "
                "different names"
            )
        names[cell.key] = name
    return names


def cell_option(cell: Cell, benchmark: str, parent_run_id: str | None) -> str:
    """The ``--benchmark`` option of the cell's ``digideep train``: the train flow's ``benchmark``
    parameter (:meth:`~digideep.benchmark.matrix.Cell.tags`) as JSON."""
    return f"--benchmark={json.dumps(cell.tags(benchmark, parent_run_id), sort_keys=True)}"


def open_benchmark(
    tracking_uri: str | None,
    data_root: Path,
    name: str,
    protocol: EvaluationProtocol,
    axes: Mapping[str, Any],
) -> tuple[Any, str]:
    """The MLflow client of the cells' store and the benchmark's parent run, found or created RUNNING.

    Args:
        tracking_uri: the store the jobs track to (the job config's ``MLFLOW_TRACKING_URI``); None:
            ``MLFLOW_TRACKING_URI`` here, else the embedded store under ``data_root``.
        data_root: the folder of the embedded store of the cells' sessions.
        name: the benchmark.
        protocol: every cell's frame budget and evaluation protocol.
        axes: the matrix (algorithms, envs, seeds, variants), logged as the parent's params.

    Raises:
        UsageError: the store does not answer (one line).
    """
    from mlflow import MlflowClient

    from digideep.tracking.failures import http_limits, one_line
    from digideep.tracking.naming import open_experiment, resolve_tracking_uri

    uri, artifacts = resolve_tracking_uri(tracking_uri, data_root)
    client = MlflowClient(uri)
    try:
        with http_limits(retries=0, timeout=10):
            experiment = open_experiment(client, records.EXPERIMENT, artifacts)
            parent = records.open_parent(client, experiment, name, protocol, axes, None)
    except Exception as error:
        raise UsageError(
            f"MLflow tracking at {uri} does not answer ({one_line(error)}); point MLFLOW_TRACKING_URI at a "
            "store that every node reaches"
        ) from None
    return client, parent


def close_benchmark(
    client: Any, name: str, parent_run_id: str, cells: Sequence[Cell], job_states: Mapping[str, str]
) -> tuple[str, str]:
    """End the parent run once the cells' jobs ended; its status and the cells' table.

    A cell whose MLflow run finished is ``COMPLETED``; any other is its job's final Slurm state
    (``FAILED``, ``CANCELLED``, ``TIMEOUT``...). The parent ends FINISHED when every cell completed.

    Args:
        job_states: each cell's job's final state, by cell key.
    """
    states = {}
    for cell in cells:
        runs = records.cell_runs(client, name, cell.tags(name, None))
        finished = len(runs) == 1 and runs[0].info.status == "FINISHED"
        states[cell.key] = "COMPLETED" if finished else job_states.get(cell.key, "UNKNOWN")
    table = records.summary(client, name, cells, states)["table"]
    return records.finish_parent(client, parent_run_id, states), table
