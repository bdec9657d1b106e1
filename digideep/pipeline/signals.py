"""SIGINT/SIGTERM while training: finish the iteration, checkpoint, stop; a second SIGINT quits at once.

A run stopped by a signal ends like a shell reports a process killed by it, so that a scheduler or
a script tells it from a finished run: exit status 128 + the signal's number (:func:`exit_code`:
130 for SIGINT, 143 for SIGTERM), a KILLED MLflow run, a Cancelled Prefect flow run, and one line
saying how to resume it (:class:`RunStoppedError`).

One handler serves a whole training command (:func:`catch_stop_signals`): ``digideep train`` and
``resume`` install it before importing anything heavy, the train flow again in its body (Prefect's
engine puts a SIGTERM handler of its own in between) and ``Runner.train`` around its loop. It never
raises into the code that happens to run: a KeyboardInterrupt raised inside an import, Prefect's
engine or pydantic can be turned into another error there, or caught by a bare ``except`` and lost.
It records the signal and asks the loop, when one runs, to stop; the command acts on the record at
its own boundaries: before the session exists :func:`raise_if_stopped` ends it with nothing written
(:class:`StoppedBeforeStartError`), once it exists the loop stops at its first stage boundary with a
checkpoint. Only a second SIGINT interrupts at once (KeyboardInterrupt).
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "RunStoppedError",
    "StopOnSignals",
    "StoppedBeforeStartError",
    "catch_stop_signals",
    "exit_code",
    "raise_if_stopped",
    "signal_reason",
    "stop_requested",
]

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_REASON_SUFFIX = " received"
_received: list[int] = []
"""The stop signals received while :func:`catch_stop_signals` is active, the first first."""
_listeners: list[Callable[[str], None]] = []
"""What asks the running loop to stop (:class:`StopOnSignals`), while one runs."""
_depth = 0
"""How many :func:`catch_stop_signals` are active (the record is cleared when the outermost ends)."""


def signal_reason(signum: int) -> str:
    """The stop reason a signal gives, e.g. ``"SIGTERM received"`` (:func:`exit_code` reads it back)."""
    return f"{signal.Signals(signum).name}{_REASON_SUFFIX}"


def exit_code(reason: str | None) -> int:
    """The exit status of a run that stopped for ``reason``: 128 + the signal's number for a stop
    by SIGINT or SIGTERM (130, 143: what shells report for a process those signals ended), else 0."""
    for signum in STOP_SIGNALS:
        if reason == signal_reason(signum):
            return 128 + signum
    return 0


class RunStoppedError(Exception):
    """A run that a signal stopped after writing its checkpoint; the message says how to resume it.

    What a caller that asked for the run gets instead of its result: ``digideep`` prints the message
    and exits with :attr:`exit_code`; the Prefect flow ends Cancelled with it as the state's data, so
    calling the flow from Python raises it.

    Attributes:
        reason: the stop reason, e.g. ``"SIGTERM received"``.
        exit_code: 128 + the signal's number (:func:`exit_code`).
    """

    def __init__(self, reason: str, iteration: int, session_name: str, session_path: str | Path) -> None:
        from digideep.storage.location import DEFAULT_ROOT

        command = f"digideep resume {shlex.quote(session_name)}"
        if str(session_path) != str(DEFAULT_ROOT):
            command += f" --session-path {shlex.quote(str(session_path))}"
        signal_name = reason.removesuffix(_REASON_SUFFIX)
        super().__init__(
            f"stopped by {signal_name} at iteration {iteration}, checkpoint written; resume with: {command}"
        )
        self.reason = reason
        self.exit_code = exit_code(reason)


class StoppedBeforeStartError(Exception):
    """A stop signal that came before the run's session existed: the command ends with nothing written.

    Attributes:
        reason: the stop reason, e.g. ``"SIGINT received"``.
        exit_code: 128 + the signal's number (:func:`exit_code`).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"stopped by {reason.removesuffix(_REASON_SUFFIX)} before the run began; nothing was written"
        )
        self.reason = reason
        self.exit_code = exit_code(reason)


def _warn_aside(message: str, *args: object) -> None:
    """Log a warning from a thread of its own. A signal handler runs in the main thread between two of
    its bytecodes, which may lie inside a log handler's write: a line written from the handler
    itself would re-enter that write (``RuntimeError: reentrant call``); another thread waits for it."""
    threading.Thread(target=log.warning, args=(message, *args), name="digideep-signal-log").start()


def _record(signum: int, frame: object) -> None:
    """The handler: record the signal and pass the first on to the running loop; a second SIGINT raises."""
    name = signal.Signals(signum).name
    if _received and signum == signal.SIGINT:
        raise KeyboardInterrupt(name)
    _received.append(signum)
    if len(_received) > 1:
        return
    if _listeners:
        _warn_aside("%s received: finishing the iteration and checkpointing (SIGINT again to quit now)", name)
    else:
        _warn_aside("%s received: stopping at the first safe point (SIGINT again to quit now)", name)
    for request_stop in _listeners:
        request_stop(signal_reason(signum))


@contextmanager
def catch_stop_signals() -> Iterator[None]:
    """While active, SIGINT and SIGTERM are recorded (:func:`stop_requested`), never raised; a second
    SIGINT raises KeyboardInterrupt. Nests; the record is cleared when the outermost one ends.

    Only in the main thread (elsewhere signals cannot be handled and this does nothing).
    """
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _record) for signum in STOP_SIGNALS}
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if _depth == 0:
            _received.clear()


def stop_requested() -> str | None:
    """The stop reason of the first signal recorded (``"SIGTERM received"``), or None."""
    return signal_reason(_received[0]) if _received else None


def raise_if_stopped() -> None:
    """End the command here if a stop signal came: for the steps before the session exists.

    Raises:
        StoppedBeforeStartError: a signal was recorded.
    """
    reason = stop_requested()
    if reason is not None:
        raise StoppedBeforeStartError(reason)


class StopOnSignals:
    """While active, SIGINT/SIGTERM call ``request_stop(reason)``; a second SIGINT interrupts at once.

    A signal recorded before (while the run was being opened) calls it at once: the loop then stops
    at its first stage boundary with a checkpoint.

    Args:
        request_stop: asks the loop to finish its iteration, checkpoint and stop (e.g.
            :meth:`~digideep.pipeline.runner.Runner.request_stop`); called with ``"SIGINT received"``
            or ``"SIGTERM received"`` (:func:`signal_reason`).
    """

    def __init__(self, request_stop: Callable[[str], None]) -> None:
        self.request_stop = request_stop
        self._caught = catch_stop_signals()

    def __enter__(self) -> StopOnSignals:
        self._caught.__enter__()
        _listeners.append(self.request_stop)
        reason = stop_requested()
        if reason is not None:
            log.warning("%s before training began: checkpointing and stopping", reason)
            self.request_stop(reason)
        return self

    def __exit__(self, *exc: object) -> None:
        _listeners.remove(self.request_stop)
        self._caught.__exit__(None, None, None)
