"""Start, resume and finish a training run; shared by the CLI and the Prefect flows.

:func:`open_run` does everything before the first iteration: validate the params (before anything
touches disk), create or reopen the session, build the Runner or restore it from the newest
checkpoint, and open the experiment tracker. :func:`close_run` ends it truthfully. The drivers
(``Runner.train()`` directly, or ``flows/train.py``) only walk the Runner's schedule in between.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from digideep.errors import UsageError
from digideep.pipeline.checkpointing import trained_checkpoints
from digideep.pipeline.devices import DeviceChoice, set_torch_threads
from digideep.pipeline.params import ResolvedParams, resolve_params, write_params
from digideep.pipeline.resuming import resume
from digideep.pipeline.run_logging import RunLog
from digideep.pipeline.runner import IterationGroup, Runner, StageCall, call_directly
from digideep.pipeline.signals import raise_if_stopped
from digideep.storage.location import DEFAULT_ROOT
from digideep.storage.session import Session
from digideep.tracking.journal import JOURNAL_FILE, MetricsJournal
from digideep.utility.progress import ProgressBar
from digideep.utility.user_code import IMPORT_PATHS, code_folders, use_code_folders

__all__ = ["RunHandle", "close_run", "held_session", "open_run", "run_training"]

log = logging.getLogger(__name__)

NOTE_TAG = "mlflow.note.content"
"""The tag MLflow shows as a run's description."""


@dataclass
class RunHandle:
    """A run ready to train: its session, runner and tracker, and the log file it writes."""

    session: Session
    runner: Runner
    tracker: Any
    resumed_from: Path | str | None
    log: RunLog | None = None
    """The session's ``log.txt`` while the run holds it (closed by :func:`close_run`)."""


def open_run(
    params: str | ResolvedParams | None = None,
    cpanel: str | dict[str, Any] | None = None,
    *,
    session_name: str | None = None,
    session_path: str | Path = DEFAULT_ROOT,
    resume: bool = False,
    tags: dict[str, str] | None = None,
    description: str | None = None,
    device: str | None = None,
    deterministic: bool = False,
) -> RunHandle | None:
    """Create a new run, or resume an existing session from its newest complete checkpoint.

    Args:
        params: parameter module (``params.pendulum_sac``) or a path, or params already resolved
            (then ``cpanel`` must be None); not needed when resuming.
        cpanel: cpanel overrides as a JSON string or a dict.
        session_name: the session's name (generated when None for a new run).
        session_path: the folder holding sessions: a local path or a URL (``s3://bucket/prefix``).
        resume: reopen ``session_name`` (an existing session with no checkpoint starts over from
            its ``params.json``). A finished session returns None after finishing what its MLflow
            run lacks (a kill after ``done.json`` can leave it RUNNING, see
            :func:`~digideep.tracking.tracker.sync_session`) and saying so.
        tags: extra tracking tags (e.g. Prefect flow-run id and deployment).
        description: what the run is for (``--msg``): ``description`` in ``session.json`` and the
            MLflow run's note (``mlflow.note.content``). A resumed run keeps the one it started with.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` for every agent (``--device``); wins over
            ``session.device`` of the params; None takes that, else auto (:mod:`digideep.pipeline.devices`).
        deterministic: deterministic mode (``--deterministic``), on also when ``session.deterministic``
            of the params says so. A resumed run takes both afresh: give them again when resuming.

    A stop signal recorded before the session is opened ends the run there, with nothing written;
    one that comes later stops it at its first stage boundary, with a checkpoint
    (:mod:`digideep.pipeline.signals`).

    Raises:
        UsageError: bad params or cpanel, a missing or busy session, a damaged checkpoint.
        StoppedBeforeStartError: a stop signal came before the session was opened.
    """
    root = str(session_path)  # a URL stays a URL (Path would fold s3:// into s3:/)
    if resume:
        if session_name is None:
            raise UsageError("resuming needs a session name (the folder under --session-path)")
        raise_if_stopped()
        devices = DeviceChoice(device, deterministic)  # checked before anything is written
        session = Session(root=root, name=session_name, resume=True)
        run_log = RunLog(session.log_path)
        try:
            return _reopen(session, devices, run_log, tags)
        except BaseException:
            _end_session(session, run_log)
            raise

    if params is None:
        raise UsageError("a new run needs --params (a parameter module such as params.pendulum_sac)")
    if isinstance(params, ResolvedParams):
        if cpanel is not None:
            raise ValueError("open_run: params are already resolved; apply the cpanel when resolving them")
        resolved = params
    else:
        overrides = cpanel if isinstance(cpanel, dict) else None
        resolved = resolve_params(
            params, None if isinstance(cpanel, dict) else cpanel, overrides, device=device
        )
    raise_if_stopped()
    devices = DeviceChoice(device, deterministic)  # checked before anything is written
    session = Session(root=root, name=session_name, params_name=resolved.module)
    run_log = RunLog(session.log_path)
    set_torch_threads(resolved.params.get("session", {}).get("torch_threads"))
    runner = None
    try:
        folders = code_folders(resolved.params, resolved.module, resolved.file)
        write_params(session, resolved.module, resolved.cpanel, resolved.params, import_paths=folders)
        if description is not None:
            info = session.update_info(description=description)
            tags = {**(tags or {}), NOTE_TAG: description}
        else:
            info = session.info()
        journal = MetricsJournal(session.path / JOURNAL_FILE)
        # built before the MLflow run starts: a start that fails leaves neither a run nor a session
        runner = Runner(session, resolved.params, devices=devices, journal=journal)
        runner.tracker = tracker = _open_tracker(
            session, info, resolved.params, resolved.cpanel, tags, journal
        )
    except BaseException:
        if runner is not None:
            runner.close()
        run_log.close()  # before the files go
        session.discard()
        raise
    try:  # the MLflow run exists now: a failure here keeps the session (its run names it)
        if tracker is not None:
            tracker.log_params(runner.resolved_settings())
        return RunHandle(session, runner, tracker, None, run_log)
    except BaseException:
        runner.close()
        _end_session(session, run_log)
        raise


@contextmanager
def held_session(root: str | Path, name: str) -> Iterator[Session]:
    """Hold an existing session for work other than training (``digideep runs sync``).

    As a run does: its log goes on in ``log.txt``, and on the way out a URL session's working files
    (the log, the journal, a learning curve drawn meanwhile) are uploaded before the lock is released.

    Raises:
        UsageError: the session does not exist or is in use.
    """
    session = Session(root=str(root), name=name, resume=True)
    run_log = RunLog(session.log_path)
    try:
        yield session
    finally:
        _end_session(session, run_log)


def _end_session(session: Session, run_log: RunLog | None) -> None:
    """Upload what a URL session keeps locally, detach the log file, release the lock."""
    try:
        session.uploads.close()
    finally:
        if run_log is not None:
            run_log.close()
        session.close()


def _reopen(
    session: Session, devices: DeviceChoice, run_log: RunLog, tags: dict[str, str] | None
) -> RunHandle | None:
    saved = session.saved_run()
    if saved.done:
        log.info("session %s already finished training (see done.json); nothing to resume", session.url)
        settings = saved.params.get("tracking", {})
        if settings.get("enabled", True):
            from digideep.tracking.tracker import sync_session

            options = {"record": session.update_info, "checkpoints": session.checkpoints_location}
            options |= settings.get("args", {})
            log.info(
                "%s", sync_session(session.path, saved.info, saved.params, saved.cpanel, done=True, **options)
            )
        _end_session(session, run_log)
        return None
    set_torch_threads(saved.params.get("session", {}).get("torch_threads"))
    # the newest checkpoint that resumes exactly (damaged ones passed over with a line), before
    # tracking starts; its memory is restored and checked, the journal rewound to it
    resumed = resume(session, saved, devices)  # none whole: refused in one line, not started over
    if resumed is None:  # (a first save cut short leaves a marked folder: the next save removes it)
        log.info("session %s has no checkpoint yet: starting its training from the beginning", session.url)
        use_code_folders(saved.info.get(IMPORT_PATHS), saved.params, f"session '{session.url}'")
        session.clear_memories()  # flushed by no checkpoint: stale, on disk or in a bucket
        journal = MetricsJournal(session.path / JOURNAL_FILE)
        journal.rewind(0)  # every record is regenerated; MLflow keeps what it has
        runner = Runner(session, saved.params, devices=devices, journal=journal)
        tracker = _track(runner, session, saved.info, saved.params, saved.cpanel, tags)
        return RunHandle(session, runner, tracker, None, run_log)
    log.info("resuming session %s from %s", session.url, resumed.checkpoint.path)
    tracker = _track(resumed.runner, session, resumed.info, saved.params, saved.cpanel, tags)
    return RunHandle(session, resumed.runner, tracker, resumed.checkpoint.path, run_log)


def _track(
    runner: Runner,
    session: Session,
    info: dict[str, Any],
    params: dict[str, Any],
    cpanel: dict[str, Any],
    tags: dict[str, str] | None,
) -> Any:
    """Open the run's MLflow tracker (None with tracking off), hand it to ``runner`` and record what
    the params left to the machine, as it was decided (each agent's resolved update mode). A tracker
    that cannot start closes the Runner (its environments) before the error goes on."""
    try:
        runner.tracker = tracker = _open_tracker(session, info, params, cpanel, tags, runner.journal)
    except BaseException:
        runner.close()
        raise
    if tracker is not None:
        tracker.log_params(runner.resolved_settings())
    return tracker


def _open_tracker(
    session: Session,
    info: dict[str, Any],
    params: dict[str, Any],
    cpanel: dict[str, Any],
    tags: dict[str, str] | None,
    journal: MetricsJournal | None,
) -> Any:
    """The MLflow tracker of the run, sending from ``journal`` (None when tracking is off in params);
    ``info`` is what the session's ``session.json`` holds now.

    With tracking off the journal is written all the same; ``digideep runs sync`` sends it later.
    """
    settings = params.get("tracking", {})
    if not settings.get("enabled", True):
        return None
    from digideep.tracking.tracker import open_tracker

    return open_tracker(
        session.path,
        info,
        params,
        cpanel,
        tags=tags or {},
        journal=journal,
        record=session.update_info,
        **settings.get("args", {}),
    )


def close_run(handle: RunHandle, status: str) -> None:
    """End the run: tracker status (FINISHED, FAILED or KILLED), environments, uploads, log file,
    session lock."""
    try:
        if handle.tracker is not None:
            handle.tracker.log_learning_curve()
            handle.tracker.finish(status)
    finally:
        handle.runner.close()
        _end_session(handle.session, handle.log)


@contextmanager
def running(handle: RunHandle) -> Iterator[RunHandle]:
    """Close ``handle`` on exit with the status that matches how training ended."""
    try:
        yield handle
    except KeyboardInterrupt:
        close_run(handle, "KILLED")
        raise
    except BaseException:
        close_run(handle, "FAILED")
        raise
    else:
        finished = handle.session.is_done
        close_run(handle, "FINISHED" if finished else "KILLED")


def run_training(
    handle: RunHandle | None, call: StageCall = call_directly, group: IterationGroup | None = None
) -> str:
    """Train an opened run to its end and close it; return why it stopped.

    A run that finished logs its final and best checkpoints' policies through its tracker (MLflow
    models through the tracker's ``log_models``); the Runner itself knows nothing of tracking.

    On a terminal a progress bar shows the run after each epoch and between them at most every
    :data:`~digideep.utility.progress.REFRESH_SECONDS` (see :class:`~digideep.utility.progress.ProgressBar`);
    elsewhere the per-epoch log lines do. ``group`` is passed to :meth:`Runner.train`.
    """
    if handle is None:
        return "already finished"
    runner = handle.runner
    total = runner.settings.number_epochs * runner.settings.epoch_size
    with running(handle), ProgressBar(total, runner.counters.iteration) as bar:

        def call_and_show(stage: str, function: Callable[[], Any]) -> Any:
            result = call(stage, function)
            if stage in ("update", "iterate") and (bar.due() or runner.at_epoch_end):  # epochs shown whole
                bar.update(runner.counters.iteration, **runner.reporter.status_fields())
            elif stage == "test" and not math.isnan(result):
                bar.update(runner.counters.iteration, test=result)
            return result

        reason = runner.train(call_and_show if bar.enabled else call, group)
        if reason == "finished" and handle.tracker is not None:  # before the tracker finishes the run
            register_as = runner.params.get("tracking", {}).get("register_model")
            trained = trained_checkpoints(handle.session.checkpoints_location, runner.counters)
            handle.tracker.log_models(trained, register_as)
        return reason
