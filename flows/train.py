"""The ``train`` flow: every stage of every iteration is a Prefect task around one Runner method.

The Runner lives in the flow's process; tasks receive the run's key and a label and return small
values (frame counts, metric dicts, checkpoint paths). The iteration schedule is the Runner's own
(:meth:`digideep.pipeline.runner.Runner.schedule`), so the flow and ``Runner.train()`` cannot drift.

A flow run owns one session: ``session_name`` when given, else a name derived from the flow run.
When a failed run is retried (the UI's Retry button, or ``prefect flow-run retry ID``) it keeps its
flow-run id and parameters, finds its session, and resumes from the newest complete checkpoint.

Run locally with ``python flows/train.py --params params.pendulum_sac``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import deployment as deployment_runtime
from prefect.runtime import flow_run as flow_run_runtime

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from digideep.errors import UsageError
from digideep.pipeline.runner import Runner
from digideep.pipeline.session import DEFAULT_ROOT
from digideep.pipeline.training import open_run, run_training
from digideep.utility.location import Location

_RUNNERS: dict[str, Runner] = {}
"""Runners of the flow runs in this process, by flow-run id. Tasks look their runner up here."""


@task(name="stage", cache_policy=NO_CACHE, persist_result=False, task_run_name="{label}")
def run_stage(key: str, stage: str, label: str) -> Any:
    """Run one Runner stage (explore, store, sample, update or iterate; test, log, checkpoint)."""
    return getattr(_RUNNERS[key], stage)()


def session_name_for(
    flow_run_id: str | None, flow_run_name: str | None, session_name: str | None
) -> str | None:
    """The session of a flow run: the given name, else ``<flow-run-name>-<first 8 of its id>``."""
    if session_name or not flow_run_id:
        return session_name
    return f"{flow_run_name or 'train'}-{flow_run_id[:8]}"


@flow(name="train", log_prints=True, persist_result=False)
def train(
    params: str = "params.pendulum_sac",
    cpanel: dict[str, Any] | None = None,
    session_name: str | None = None,
    session_path: str = str(DEFAULT_ROOT),
    resume: bool = False,
    tasks: Literal["stage", "iteration"] = "stage",
    description: str | None = None,
) -> dict[str, Any]:
    """Train ``params`` with ``cpanel`` overrides; resume the session when the run is retried.

    Args:
        params: parameter module, e.g. ``params.pendulum_sac``.
        cpanel: cpanel overrides, e.g. ``{"seed": 1}``.
        session_name: session to create (or, with ``resume``, to continue); default from the flow run.
        session_path: folder holding sessions, or a URL such as ``s3://bucket/sessions`` (credentials
            and endpoint from the worker's environment: ``AWS_*``, ``AWS_ENDPOINT_URL``); a retry on
            any worker then resumes from the bucket.
        resume: continue ``session_name`` from its newest checkpoint.
        tasks: ``"stage"``: a task per stage (explore, store, sample, update, ...), the default;
            ``"iteration"``: one task per iteration, four times fewer task runs, for short
            iterations where orchestration would cost more than a few percent
            (``bench/bench_orchestration.py``).
        description: the run's description (MLflow's note and ``description`` in session.json);
            a resumed run keeps the one it started with.
    """
    logger = get_run_logger()
    # One progress line per epoch instead of a line per task state; digideep's INFO lines reach
    # the session's log.txt and (through PREFECT_LOGGING_EXTRA_LOGGERS) the Prefect UI.
    logging.getLogger("prefect.task_runs").setLevel(logging.WARNING)
    logging.getLogger("digideep").setLevel(logging.INFO)
    run_id = flow_run_runtime.id
    name = session_name_for(run_id, flow_run_runtime.name, session_name)
    retried = (flow_run_runtime.run_count or 1) > 1
    root = Location(session_path)
    root.check()  # a URL's store answers (seconds) before anything is written
    existing = name is not None and (root / name / "params.json").exists()
    if retried and not existing:
        raise UsageError(
            f"flow run {run_id} is a retry but its session '{(root / str(name)).url}' is gone; "
            "start a new run instead"
        )
    tags = {
        "prefect.flow_run_id": str(run_id or ""),
        "prefect.deployment": str(deployment_runtime.name or ""),
    }
    handle = open_run(
        params,
        cpanel or {},
        session_name=name,
        session_path=session_path,
        resume=resume or existing,
        tags=tags,
        description=description,
    )
    if handle is None:
        logger.info("session %s already finished; nothing to do", name)
        return {"session": name, "stopped": "already finished"}
    handle.session.update_info(prefect_flow_run_id=str(run_id or ""))
    key = str(run_id or handle.session.url)
    _RUNNERS[key] = runner = handle.runner
    if handle.resumed_from:
        logger.info("resuming from %s", handle.resumed_from)
    try:
        reason = run_training(
            handle,
            lambda stage, _: run_stage(key, stage, runner.stage_label(stage)),
            per_iteration=tasks == "iteration",
        )
    finally:
        _RUNNERS.pop(key, None)
    return {
        "session": handle.session.url,
        "stopped": reason,
        "iterations": runner.counters.iteration,
        "frames": runner.counters.frames,
        "best_test_return": runner.counters.best_test_return,
    }


def _main() -> None:
    parser = argparse.ArgumentParser(description="Run the train flow locally (ephemeral Prefect server).")
    parser.add_argument("--params", default="params.pendulum_sac")
    parser.add_argument("--cpanel", default="{}")
    parser.add_argument("--session-name")
    parser.add_argument("--session-path", default=str(DEFAULT_ROOT), help="a folder or a URL (s3://...)")
    args = parser.parse_args()
    from digideep.pipeline.params import parse_cpanel

    print(
        train(
            params=args.params,
            cpanel=parse_cpanel(args.cpanel),
            session_name=args.session_name,
            session_path=args.session_path,
        )
    )


if __name__ == "__main__":
    _main()
