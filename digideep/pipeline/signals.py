"""SIGINT/SIGTERM while training: finish the iteration, checkpoint, stop; a second SIGINT quits at once.

A run stopped by a signal ends like a shell reports a process killed by it, so that a scheduler or
a script tells it from a finished run: exit status 128 + the signal's number (:func:`exit_code`:
130 for SIGINT, 143 for SIGTERM), a KILLED MLflow run, a Cancelled Prefect flow run, and one line
saying how to resume it (:class:`RunStoppedError`).
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from digideep.pipeline.session import DEFAULT_ROOT

__all__ = ["RunStoppedError", "StopOnSignals", "exit_code", "signal_reason"]

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_REASON_SUFFIX = " received"


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
        command = f"digideep resume {shlex.quote(session_name)}"
        if str(session_path) != str(DEFAULT_ROOT):
            command += f" --session-path {shlex.quote(str(session_path))}"
        signal_name = reason.removesuffix(_REASON_SUFFIX)
        super().__init__(
            f"stopped by {signal_name} at iteration {iteration}, checkpoint written; resume with: {command}"
        )
        self.reason = reason
        self.exit_code = exit_code(reason)


class StopOnSignals:
    """While active, SIGINT/SIGTERM call ``request_stop(reason)``; a second SIGINT interrupts at once.

    Args:
        request_stop: asks the loop to finish its iteration, checkpoint and stop (e.g.
            :meth:`~digideep.pipeline.runner.Runner.request_stop`); called with ``"SIGINT received"``
            or ``"SIGTERM received"`` (:func:`signal_reason`).
    """

    def __init__(self, request_stop: Callable[[str], None]) -> None:
        self.request_stop = request_stop
        self.requested = False
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        log.warning("%s received: finishing the iteration and checkpointing (SIGINT again to quit now)", name)
        self.requested = True
        self.request_stop(signal_reason(signum))

    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
