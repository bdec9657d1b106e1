"""The ``train`` flow: the stages of the Runner's schedule as Prefect tasks, each around one Runner method.

The Runner lives in the flow's process; tasks receive the run's key and a label, run the stage
function the schedule gave for that key, and return small values (frame counts, metric dicts,
checkpoint paths). The iteration schedule is the Runner's own
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
import time
from collections.abc import Callable
from typing import Any, Literal

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import deployment as deployment_runtime
from prefect.runtime import flow_run as flow_run_runtime
from prefect.states import Cancelled, State

from digideep.errors import UsageError
from digideep.pipeline.runner import ITERATION_STAGES, IterationGroup, Runner, StageCall
from digideep.pipeline.signals import (
    RunStoppedError,
    StoppedBeforeStartError,
    catch_stop_signals,
    exit_code,
    raise_if_stopped,
)
from digideep.pipeline.training import close_run, open_run, run_training
from digideep.storage.location import DEFAULT_ROOT, Location
from digideep.tracking.trials import TrialReporter, benchmark_tags, trial_tags
from digideep.utility.processes import autogroup_follows_nice
from flows.granularity import TaskGranularity
from flows.recovery import recover_killed_attempt, wait_for_earlier_attempt

_STAGES: dict[str, Callable[[], Any]] = {}
"""The stage function each flow run's next task runs (the schedule's, e.g. ``iterate`` of 120 iterations)."""

_BODY_SECONDS: dict[str, float] = {}
"""Seconds the last stage body of each flow run took, inside its task (for ``tasks="auto"``)."""


def _run(key: str) -> Any:
    """Run flow run ``key``'s pending stage function, timing the body."""
    start = time.perf_counter()
    try:
        return _STAGES.pop(key)()
    finally:
        _BODY_SECONDS[key] = time.perf_counter() - start


# One task per stage, named after it, so that the UI's filters, tag-based concurrency limits and
# per-task settings (a timeout, with_options) apply to each. No task is retried in place: a stage
# mutates the Runner (environments stepped, RNGs drawn, optimizers stepped), so running it again
# would not give the run that never failed. The flow is what is retried: it resumes from the
# newest checkpoint (see docs/tracking-prefect.md).
_STAGE_TASK = {"cache_policy": NO_CACHE, "persist_result": False, "task_run_name": "{label}", "retries": 0}


@task(**_STAGE_TASK)
def explore(key: str, label: str) -> int:
    """Collect one chunk with the train explorer; the frames it collected."""
    return _run(key)


@task(**_STAGE_TASK)
def store(key: str, label: str) -> int:
    """Keep the chunk in every memory."""
    return _run(key)


@task(**_STAGE_TASK)
def sample(key: str, label: str) -> int:
    """Draw each agent's minibatches for this iteration."""
    return _run(key)


@task(**_STAGE_TASK)
def update(key: str, label: str) -> dict[str, float]:
    """Update each agent from its batches; the update's metrics."""
    return _run(key)


@task(**_STAGE_TASK)
def iterate(key: str, label: str) -> dict[str, float]:
    """Whole iterations (explore, store, sample, update) as one task, for short iterations; the last
    update's metrics."""
    return _run(key)


@task(**_STAGE_TASK)
def test(key: str, label: str) -> float:
    """Run the test explorer; the mean test return."""
    return _run(key)


@task(**_STAGE_TASK)
def log(key: str, label: str) -> dict[str, float]:
    """Report the epoch: console, session log, MLflow."""
    return _run(key)


@task(**_STAGE_TASK)
def checkpoint(key: str, label: str) -> str:
    """Save a checkpoint of the whole run; its path."""
    return _run(key)


STAGE_TASKS = {t.name: t for t in (explore, store, sample, update, iterate, test, log, checkpoint)}
"""The stage tasks by stage name (each task is named after its function, i.e. its stage)."""


def stage_timeouts(runner_params: dict[str, Any]) -> dict[str, float | None]:
    """Each stage's timeout in seconds (None: none) from ``runner.stage_timeouts`` in params.

    A stage without one has no timeout; ``iterate`` defaults to the sum of its four stages' when
    all four have one. A timed-out task fails, and with it the flow run; retrying the flow run
    resumes from the newest checkpoint.

    Raises:
        UsageError: an unknown stage, or a timeout that is not a positive number.
    """
    given = runner_params.get("stage_timeouts") or {}
    if not isinstance(given, dict):
        raise UsageError(f"runner.stage_timeouts must be a dict of stage -> seconds, got {given!r}")
    for stage, seconds in given.items():
        if stage not in STAGE_TASKS:
            raise UsageError(
                f"runner.stage_timeouts names an unknown stage '{stage}'; stages: {', '.join(STAGE_TASKS)}"
            )
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0
        ):
            raise UsageError(
                f"runner.stage_timeouts['{stage}'] must be a positive number of seconds or None, got {seconds!r}"
            )
    timeouts = {stage: given.get(stage) for stage in STAGE_TASKS}
    parts = [timeouts[stage] for stage in ITERATION_STAGES]
    if timeouts["iterate"] is None and all(part is not None for part in parts):
        timeouts["iterate"] = sum(parts)
    return timeouts


def dispatch(
    key: str, runner: Runner, stage_tasks: dict[str, Any], tasks: str, timeouts: dict[str, float | None]
) -> tuple[StageCall, IterationGroup | None]:
    """The driver's call for each stage (its task) and the schedule's iteration grouping.

    ``tasks="stage"``: no grouping; ``"iteration"``: one iteration per ``iterate`` task; ``"auto"``:
    :class:`~flows.granularity.TaskGranularity` chooses from the measured timing. ``auto`` keeps a
    task per stage when ``runner.stage_timeouts`` times some iteration stages but gives ``iterate`` no
    timeout (grouping them would drop those timeouts), and one iteration per task when ``iterate``
    has a timeout (it times one iteration).
    """
    groupable = timeouts["iterate"] is not None or all(timeouts[s] is None for s in ITERATION_STAGES)
    if tasks == "auto" and not groupable:
        get_run_logger().info(
            "tasks=auto: a task per stage, as runner.stage_timeouts times some iteration stages but not "
            "'iterate' (give 'iterate' a timeout to let short iterations run as one task)"
        )
    chooser = None
    if tasks == "auto" and groupable:
        chooser = TaskGranularity(most=1 if timeouts["iterate"] is not None else None)
    group: IterationGroup | None = {"stage": None, "iteration": lambda: 1}.get(tasks, chooser)

    def call(stage: str, function: Callable[[], Any]) -> Any:
        start, before = time.perf_counter(), runner.counters.iteration
        _STAGES[key] = function
        result = stage_tasks[stage](key, runner.stage_label(stage))
        if chooser is not None:
            inner = _BODY_SECONDS.pop(key, 0.0)
            chooser.observe(stage, time.perf_counter() - start, inner, runner.counters.iteration - before)
        return result

    return call, group


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
    tasks: Literal["auto", "stage", "iteration"] = "auto",
    description: str | None = None,
    trial: dict[str, Any] | None = None,
    benchmark: dict[str, Any] | None = None,
    device: str | None = None,
    deterministic: bool = False,
) -> dict[str, Any] | State:
    """Train ``params`` with ``cpanel`` overrides; resume the session when the run is retried.

    A run stopped by SIGINT or SIGTERM (Ctrl-C, a worker or a scheduler stopping it) checkpoints and
    ends Cancelled, not Completed, with the command that resumes it as its message and
    :class:`~digideep.pipeline.signals.RunStoppedError` as its data (which a call from Python
    raises). The UI's Retry (or ``prefect flow-run retry``) resumes it as it does a failed run.

    Args:
        params: parameter module, e.g. ``params.pendulum_sac``.
        cpanel: cpanel overrides, e.g. ``{"seed": 1}``.
        session_name: session to create (or, with ``resume``, to continue); default from the flow run.
        session_path: folder holding sessions, or a URL such as ``s3://bucket/sessions`` (credentials
            and endpoint from the worker's environment: ``AWS_*``, ``AWS_ENDPOINT_URL``); a retry on
            any worker then resumes from the bucket.
        resume: continue ``session_name`` from its newest checkpoint.
        tasks: ``"stage"``: a task per stage (explore, store, sample, update, ...);
            ``"iteration"``: one task per iteration, four times fewer task runs, for short
            iterations where orchestration would cost more than a few percent
            (``bench/bench_orchestration.py``); ``"auto"`` (the default): a task per stage for
            the first iterations, then a task per stage if that keeps orchestration within 3 % of
            the measured iteration time, else tasks of as many whole iterations as keep it there
            (one-frame iterations of the reference schedule: hundreds), following the iterations'
            length as it changes (:class:`~flows.granularity.TaskGranularity`; logged). The stages
            run the same code either way: the choice never changes the results.
        description: the run's description (MLflow's note and ``description`` in session.json);
            a resumed run keeps the one it started with.
        trial: set by the tune flow (``flows/tune.py``): the Optuna trial this run is, which gets
            the test returns and may prune the run (:mod:`digideep.tracking.trials`).
        benchmark: set by the benchmark flow (``flows/benchmark.py``): the cell this run is, whose
            MLflow run is tagged and nested under the benchmark's parent run
            (:func:`~digideep.tracking.trials.benchmark_tags`).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` for every agent (``--device``); wins over
            ``session.device`` of the params; None takes that, else auto.
        deterministic: deterministic mode (``--deterministic``), on also when the params ask for it.
    """
    autogroup_follows_nice()  # a worker starts the run in a session of its own: its niceness holds there too
    # digideep's handler again (Prefect's engine put its own SIGTERM handler over it): a signal is
    # recorded, never raised into the engine; before the session exists the run ends Cancelled there
    with catch_stop_signals():
        try:
            return _train(
                params,
                cpanel,
                session_name,
                session_path,
                resume,
                tasks,
                description,
                trial,
                benchmark,
                device,
                deterministic,
            )
        except StoppedBeforeStartError as stopped:
            return Cancelled(message=str(stopped), data=stopped)


def _train(
    params: str,
    cpanel: dict[str, Any] | None,
    session_name: str | None,
    session_path: str,
    resume: bool,
    tasks: Literal["auto", "stage", "iteration"],
    description: str | None,
    trial: dict[str, Any] | None,
    benchmark: dict[str, Any] | None,
    device: str | None,
    deterministic: bool,
) -> dict[str, Any] | State:
    """The body of :func:`train` (its arguments)."""
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
    if retried:  # an attempt marked Crashed may still run; a killed one left task runs Running
        wait_for_earlier_attempt(root / name, flow_run_runtime.run_count, logger)
        recover_killed_attempt(str(run_id), root / name, flow_run_runtime.run_count, logger)
    tags = {
        "prefect.flow_run_id": str(run_id or ""),
        "prefect.deployment": str(deployment_runtime.name or ""),
        **trial_tags(trial),
        **benchmark_tags(benchmark),
    }
    reporter = TrialReporter.from_parameters(trial)
    raise_if_stopped()  # (open_run checks again, right before it opens the session)
    handle = open_run(
        params,
        cpanel or {},
        session_name=name,
        session_path=session_path,
        resume=resume or existing,
        tags=tags,
        description=description,
        device=device,
        deterministic=deterministic,
    )
    if handle is None:
        logger.info("session %s already finished; nothing to do", name)
        return {"session": name, "stopped": "already finished"}
    handle.session.update_info(prefect_flow_run_id=str(run_id or ""))
    key = str(run_id or handle.session.url)
    runner = handle.runner
    runner.trial = reporter
    if handle.resumed_from:
        logger.info("resuming from %s", handle.resumed_from)
    try:
        try:
            timeouts = stage_timeouts(runner.params["runner"])
        except UsageError:
            close_run(handle, "FAILED")
            raise
        stage_tasks = {
            stage: stage_task.with_options(timeout_seconds=timeouts[stage])
            for stage, stage_task in STAGE_TASKS.items()
        }
        call, group = dispatch(key, runner, stage_tasks, tasks, timeouts)
        reason = run_training(handle, call, group)
    finally:
        _STAGES.pop(key, None)
        _BODY_SECONDS.pop(key, None)
    if exit_code(reason):  # a signal: Cancelled, so that neither a scheduler nor the UI takes it for done
        stopped = RunStoppedError(reason, runner.counters.iteration, handle.session.name, session_path)
        retry = ", or Retry this flow run" if deployment_runtime.id else ""  # (a deployment's run)
        return Cancelled(message=f"{stopped}{retry}", data=stopped)
    return {
        "session": handle.session.url,
        "stopped": reason,
        "iterations": runner.counters.iteration,
        "frames": runner.counters.frames,
        "best_test_return": runner.counters.best_test_return,
    }


def _main() -> int:
    parser = argparse.ArgumentParser(
        description="Run the train flow locally (against PREFECT_API_URL, else a temporary Prefect server)."
    )
    parser.add_argument("--params", default="params.pendulum_sac")
    parser.add_argument("--cpanel", default="{}")
    parser.add_argument("--session-name")
    parser.add_argument("--session-path", default=str(DEFAULT_ROOT), help="a folder or a URL (s3://...)")
    args = parser.parse_args()
    from digideep.pipeline.params import parse_cpanel
    from flows.server import prefect_api

    try:
        with prefect_api():
            result = train(
                params=args.params,
                cpanel=parse_cpanel(args.cpanel),
                session_name=args.session_name,
                session_path=args.session_path,
            )
    except (RunStoppedError, StoppedBeforeStartError) as stopped:
        print(stopped, file=sys.stderr)
        return stopped.exit_code
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
