"""What a retried flow run does first: wait for an earlier attempt still running, then tidy up after
an attempt that was killed.

An attempt killed with SIGKILL (the OOM killer, ``kill -9``, a host that died) reports nothing to
Prefect: the flow run is marked Crashed from outside (the worker, or the stack's watcher), but the
task run it was in stays Running for ever, and the log lines its process had not yet sent (Prefect
sends them in batches, every ~2 s) never reach the UI, although the session's ``log.txt`` has them.
At the start of a retry, :func:`recover_killed_attempt`

- marks the flow run's task runs still Running (or Pending) Crashed, with a message saying why;
- sends the lines of ``log.txt`` after the last one Prefect holds (at most :data:`TAIL_LINES`) to
  the retry's flow-run log, each prefixed with :data:`KILLED_PREFIX`.

A retry after an ordinary failure (the previous attempt ended Failed, not Crashed) finds nothing to
do: its process ended its task runs and sent its log before it exited.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from pathlib import Path

from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
    TaskRunFilter,
    TaskRunFilterState,
    TaskRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import LogSort
from prefect.states import Crashed

from digideep.pipeline.signals import raise_if_stopped
from digideep.storage.location import Location
from digideep.storage.session_lock import FolderLock
from digideep.storage.upload_cache import working_folder

TAIL_LINES = 50
"""The most lines of the killed attempt's log sent to the retry's flow-run log."""
KILLED_PREFIX = "[killed attempt] "
"""Prefix of each line sent from the killed attempt's log, so the user can tell it from the retry's."""
RECENT_LOGS = 200
"""Newest flow-run log records read to find the last line Prefect holds (the API's page size)."""
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \w+\s+(\S+): (.*)$")
"""A record's first line in ``log.txt`` (:data:`digideep.pipeline.run_logging.LOG_FORMAT`)."""
RunLogger = logging.Logger | logging.LoggerAdapter
"""What :func:`prefect.get_run_logger` returns."""
RESUMES = "resumes from the newest checkpoint"
"""What a retried train flow run does instead of the task runs its killed attempt left unfinished."""
LOCK_POLL_SECONDS = 5.0
"""Seconds between looks at a session's lock held by an earlier attempt (:func:`wait_for_earlier_attempt`)."""
UNFINISHED = [StateType.RUNNING, StateType.PENDING]
FINAL = {StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED}


def wait_for_earlier_attempt(
    session: Location, attempt: int, logger: RunLogger, poll: float = LOCK_POLL_SECONDS
) -> float:
    """Wait while a live process holds the lock of the local ``session``; the seconds waited.

    A flow run can be marked Crashed while its process runs on (the crash watcher heard no heartbeat
    from a starved process), and a retry, the benchmark's or the tune flow's own included, then
    starts a second attempt beside it. Refused by the session's lock, that attempt would fail in
    seconds and use up the retries; instead it waits for the earlier one to let go (it ends its
    run, or stops with a checkpoint) and then resumes from the newest checkpoint, as after a kill.
    An attempt that died holds no lock: then nothing is waited for. A stop signal ends the wait
    (:func:`~digideep.pipeline.signals.raise_if_stopped`). A session behind a URL is left to its
    lease, which refuses a second holder as before.
    """
    if not session.is_local:
        return 0.0
    lock = FolderLock(Path(session.path))
    holder = lock.holder()
    if holder is None:
        return 0.0
    logger.warning(
        "attempt %d: session %s is still in use by %s, an earlier attempt of this flow run that was "
        "marked Crashed while it ran on; waiting for it to end before resuming",
        attempt,
        session.url,
        holder,
    )
    start = time.monotonic()
    while lock.holder() is not None:
        raise_if_stopped()
        time.sleep(poll)
    waited = time.monotonic() - start
    logger.info("attempt %d: session %s is free after %.0f s", attempt, session.url, waited)
    return waited


def recover_killed_attempt(flow_run_id: str, session: Location, attempt: int, logger: RunLogger) -> None:
    """Crash the task runs a killed attempt left running and send its unsent log tail.

    Best effort: the retry's work is to resume the training, so a server or store that fails here
    costs a warning, not the retry.

    Args:
        flow_run_id: the flow run being retried.
        session: the session's location (a folder or a URL), whose ``log.txt`` the attempt wrote.
        attempt: this attempt's number (``flow_run.run_count``), for the messages.
        logger: the flow run's logger (:func:`prefect.get_run_logger`).
    """
    try:
        _recover(flow_run_id, session, attempt, logger)
    except Exception as error:  # whatever failed, the retry goes on
        logger.warning("could not tidy up after the previous attempt (%s); resuming anyway", error)


def crash_killed_tasks(flow_run_id: str, attempt: int, retry_does: str, logger: RunLogger) -> None:
    """At the start of a retry of a flow without a session (the benchmark's): crash the task runs a
    killed attempt left running, saying ``retry_does``. Best effort, as :func:`recover_killed_attempt`."""
    try:
        with get_client(sync_client=True) as client:
            _crash_killed_tasks(client, flow_run_id, attempt, retry_does, logger)
    except Exception as error:  # whatever failed, the retry goes on
        logger.warning("could not tidy up after the previous attempt (%s); going on", error)


def _crash_killed_tasks(
    client: SyncPrefectClient, flow_run_id: str, attempt: int, retry_does: str, logger: RunLogger
) -> bool:
    """Crash the killed attempt's unfinished task runs, saying so; whether the previous attempt was killed."""
    if not previous_attempt_crashed(client, flow_run_id):
        return False
    crashed = crash_unfinished_task_runs(client, flow_run_id, attempt, retry_does)
    if crashed:
        logger.warning(
            "the previous attempt was killed: task run%s %s marked Crashed",
            "s" if len(crashed) > 1 else "",
            ", ".join(crashed),
        )
    return True


def _recover(flow_run_id: str, session: Location, attempt: int, logger: RunLogger) -> None:
    with get_client(sync_client=True) as client:
        if not _crash_killed_tasks(client, flow_run_id, attempt, RESUMES, logger):
            return
        held = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
            limit=RECENT_LOGS,
            sort=LogSort.TIMESTAMP_DESC,
        )
    tail = unsent_tail(read_log(session), ((log.name, log.message) for log in held))
    if tail:
        logger.warning(
            "the last %d line%s of the previous attempt's log (%s), which Prefect never received:",
            len(tail),
            "s" if len(tail) > 1 else "",
            (session / "log.txt").url,
        )
        for line in tail:
            logger.info("%s%s", KILLED_PREFIX, line)


def previous_attempt_crashed(client: SyncPrefectClient, flow_run_id: str) -> bool:
    """Whether the flow run's newest final state is Crashed (its process died without reporting)."""
    states = sorted(client.read_flow_run_states(flow_run_id), key=lambda state: state.timestamp)
    final = [state for state in states if state.type in FINAL]
    return bool(final) and final[-1].type == StateType.CRASHED


def crash_unfinished_task_runs(
    client: SyncPrefectClient, flow_run_id: str, attempt: int, retry_does: str = RESUMES
) -> list[str]:
    """Set the flow run's Running and Pending task runs Crashed; their names.

    Called before the retry starts a task, so every such task run is the killed attempt's.
    ``retry_does`` ends each one's message: what attempt ``attempt`` does instead.
    """
    task_runs = client.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
        task_run_filter=TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=UNFINISHED))),
    )
    message = (
        f"the flow run's attempt {attempt - 1} was killed while this task ran "
        f"(no process was left to end it); attempt {attempt} {retry_does}"
    )
    for task_run in task_runs:
        client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
    return [task_run.name for task_run in task_runs]


def read_log(session: Location) -> list[str]:
    """The lines of the session's ``log.txt``; [] when it has none.

    A session on object storage keeps its log in a local working folder and uploads it at each
    checkpoint: when the killed attempt ran on this machine, that copy holds the lines after the
    last checkpoint and is read instead.
    """
    candidates = [] if session.is_local else [Location(working_folder(session.url, session.name) / "log.txt")]
    for log in [*candidates, session / "log.txt"]:
        try:
            return log.read_text().splitlines()
        except FileNotFoundError:
            continue
    return []


def unsent_tail(lines: list[str], held: Iterable[tuple[str, str]], limit: int = TAIL_LINES) -> list[str]:
    """The lines after the last one whose record Prefect holds, at most the last ``limit``.

    Args:
        lines: ``log.txt``'s lines, oldest first (records of every attempt, tracebacks included).
        held: (logger name, message) of the flow run's log records on the server.
        limit: the most lines returned (the newest).
    """
    known = {(name, message.splitlines()[0] if message else "") for name, message in held}
    start = 0
    for index in range(len(lines) - 1, -1, -1):
        match = LOG_LINE.match(lines[index])
        if match and (match.group(1), match.group(2)) in known:
            start = index + 1
            while start < len(lines) and not LOG_LINE.match(lines[start]):
                start += 1  # the held record's own further lines (a traceback): Prefect has them
            break
    return lines[start:][-limit:]
