"""The ``benchmark`` flow: algorithms x environments x seeds (x variants), each cell one run.

Every cell of a parameter file is a flow run of the train deployment ``deployment``
(``run_deployment``, the file and cell given as parameters), so cells spread over every worker of
its pool, ``concurrency`` at a time. Every cell gets the same frame budget and evaluation protocol
(:mod:`digideep.benchmark.matrix`). A cell named ``sb3:SAC``, ``sb3:TD3`` or ``sb3:PPO`` is a
Stable-Baselines3 reference (:mod:`digideep.benchmark.sb3`) trained by a task of this flow run,
in its process.

Retries: each train cell is launched with an idempotency key naming the benchmark and the cell, so
a benchmark flow run that crashed and is retried (it keeps its flow-run id, hence its name) finds
the flow runs it started: finished cells are not run again, and a cell that failed, crashed or was
cancelled is set back to Scheduled and runs again as the same flow run, resuming from its
checkpoint (``flows/cells.py``, shared with the tune flow). An SB3 cell that finished is skipped; one
that did not continues its MLflow run from its newest checkpoint, kept under ``session_path`` (it
saves one after each evaluation, :mod:`digideep.benchmark.sb3_checkpoint`), or without one is trained
again from the start (its unfinished MLflow run deleted). Every cell's run counts its resumes in the
tag ``digideep.resumes``, a column of the summary table the flow logs at the end.

MLflow: one parent run per benchmark (:mod:`digideep.benchmark.records`); every cell's run is
nested under it and tagged ``digideep.benchmark``, ``algorithm``, ``env``, ``seed``, ``variant``.
See ``docs/benchmark.md``. Example parameters::

    {"algorithms": ["params.pendulum_sac", "params.pendulum_td3"], "envs": ["Pendulum-v1"],
     "seeds": [0, 1, 2], "frames": 5000, "eval_interval": 1000, "eval_episodes": 10}
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run as flow_run_runtime
from prefect.states import Scheduled

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from digideep.benchmark import records
from digideep.benchmark.matrix import Cell, plan
from digideep.benchmark.sb3 import is_sb3, train_sb3_cell
from digideep.pipeline.evaluation import EvaluationProtocol
from digideep.tracking.naming import data_root_of, resolve_tracking_uri
from digideep.tracking.trials import benchmark_tags
from digideep.utility.processes import autogroup_follows_nice
from flows.cells import ended_runs, experiment_id, launch, state_of
from flows.recovery import crash_killed_tasks


@flow(name="benchmark", persist_result=False)
def benchmark(
    algorithms: list[str],
    envs: list[str],
    seeds: list[int] | None = None,
    variants: dict[str, dict[str, Any]] | None = None,
    frames: int = 10_000,
    eval_interval: int | None = None,
    eval_episodes: int = 10,
    base_cpanel: dict[str, Any] | None = None,
    name: str | None = None,
    deployment: str = "train/pendulum-sac",
    concurrency: int = 2,
    session_path: str = "data/sessions",
    max_cell_retries: int = 2,
    poll_seconds: float = 2.0,
) -> dict[str, Any]:
    """Run (or continue) every cell of the matrix; a summary of each cell's state and score.

    Args:
        algorithms: parameter modules (``params.pendulum_sac``) and ``sb3:SAC``/``sb3:TD3``/``sb3:PPO``.
        envs: Gymnasium ids (each cell sets its file's ``model_name``).
        seeds: seeds of every cell (default 0, 1, 2).
        variants: named cpanel overrides (ablations); default one variant, ``default``.
        frames: every cell's frame budget.
        eval_interval: frames between evaluations (default ``frames``: at the end only); a whole
            number of each file's epochs, dividing ``frames``.
        eval_episodes: deterministic episodes per evaluation (K).
        base_cpanel: overrides of every cell (e.g. ``learning_starts``); SB3 cells take those of
            :data:`~digideep.benchmark.sb3.SB3_KNOBS` and leave the rest to the parameter files.
        name: the benchmark; default ``<flow-run name>-<first 8 of its id>`` (a retry continues it).
        deployment: ``<flow>/<deployment>`` of a train deployment; its pool runs the cells.
        concurrency: cells running at once.
        session_path: where the train cells keep their sessions and the SB3 cells their checkpoints
            (a folder every worker mounts, or a URL).
        max_cell_retries: retries of a cell's failed or crashed run before it counts failed.
        poll_seconds: seconds between looks at the running cells.
    """
    autogroup_follows_nice()  # its SB3 cells train in this process, in a session of its own
    logger = get_run_logger()
    protocol = EvaluationProtocol(eval_interval or frames, eval_episodes, frames)
    cells = plan(algorithms, envs, seeds if seeds is not None else [0, 1, 2], protocol, variants, base_cpanel)
    run_id = str(flow_run_runtime.id or "local")
    name = name or f"{flow_run_runtime.name or 'benchmark'}-{run_id[:8]}"
    attempt = flow_run_runtime.run_count or 1
    if attempt > 1:  # a killed attempt left its SB3 cells' task runs Running
        crash_killed_tasks(run_id, attempt, "continues its unfinished SB3 cells", logger)
    from mlflow import MlflowClient

    uri, artifacts = resolve_tracking_uri(None, data_root_of(session_path))
    mlflow = MlflowClient(uri)
    experiment = experiment_id(mlflow, records.EXPERIMENT, artifacts)
    axes = {"algorithms": algorithms, "envs": envs, "seeds": seeds, "variants": variants or {}}
    parent = records.open_parent(mlflow, experiment, name, protocol, axes, run_id)
    logger.info("benchmark %s: %d cells, MLflow parent run %s at %s", name, len(cells), parent, uri)
    states: dict[str, str] = {}
    flows: dict[str, str] = {}  # train cells running: flow-run id by cell key
    tasks: dict[str, Any] = {}  # SB3 cells running: Prefect future by cell key
    retries: dict[str, int] = {}
    pending = list(cells)
    with get_client(sync_client=True) as client:
        while pending or flows or tasks:
            while pending and len(flows) + len(tasks) < concurrency:
                cell = pending.pop(0)
                tags = cell.tags(name, parent)
                if is_sb3(cell.algorithm):
                    runs = records.cell_runs(mlflow, name, tags)
                    if any(run.info.status == "FINISHED" for run in runs):
                        records.delete_unfinished(mlflow, runs)  # one run per cell
                        states[cell.key] = "COMPLETED"
                    else:  # continued from its checkpoint, or trained from the start
                        tasks[cell.key] = sb3_cell.submit(
                            cell, protocol, uri, experiment, benchmark_tags(tags), session_path
                        )
                    continue
                flows[cell.key] = _launch(client, deployment, cell, tags, session_path, name)
                logger.info("%s: train run %s", cell.key, flows[cell.key])
            time.sleep(poll_seconds)
            for key, kind in ended_runs(client, flows, retries, max_cell_retries, "benchmark").items():
                states[key] = kind
                del flows[key]
            for key, future in list(tasks.items()):
                if future.state.is_final():
                    states[key] = future.state.type.value
                    del tasks[key]
    summary = records.summary(mlflow, name, cells, states)
    status = records.finish_parent(mlflow, parent, states)
    logger.info("benchmark %s %s:\n%s", name, status, summary["table"])
    return {"benchmark": name, "parent_run_id": parent, "status": status, "cells": summary["cells"]}


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name="sb3 {cell.key}")
def sb3_cell(
    cell: Cell,
    protocol: EvaluationProtocol,
    uri: str,
    experiment: str,
    tags: dict[str, str],
    session_path: str,
) -> float:
    """Train (or continue) one SB3 reference cell in this process, its checkpoints under
    ``session_path`` (:func:`~digideep.benchmark.sb3.train_sb3_cell`)."""
    from mlflow import MlflowClient

    from digideep.benchmark.sb3_checkpoint import CellCheckpoints, cell_folder

    checkpoints = CellCheckpoints(cell_folder(session_path, tags[records.NAME_TAG], cell.key))
    return train_sb3_cell(
        cell.algorithm,
        cell.env,
        cell.seed,
        protocol,
        MlflowClient(uri),
        experiment,
        tags,
        cpanel=cell.cpanel,
        checkpoints=checkpoints,
    )


def _launch(
    client: Any, deployment: str, cell: Cell, tags: dict[str, Any], session_path: str, name: str
) -> str:
    """Start the cell's train run (or find it); one left cancelled by an earlier attempt runs again."""
    parameters = {
        "params": cell.algorithm,
        "cpanel": cell.cpanel,
        "session_path": session_path,
        "benchmark": tags,
    }
    flow_run_id = launch(client, deployment, parameters, f"benchmark:{name}:{cell.key}")
    if state_of(client, flow_run_id) == "CANCELLED":  # the benchmark was cancelled with its cells
        client.set_flow_run_state(flow_run_id, Scheduled(message="retried by its benchmark flow"), force=True)
    return flow_run_id


if __name__ == "__main__":
    print("deploy it (prefect deploy --all) and run 'digideep benchmark --params ... --env ...'")
