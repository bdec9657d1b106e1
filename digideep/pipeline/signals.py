"""SIGINT/SIGTERM while training: finish the iteration, checkpoint, stop; a second SIGINT quits at once."""

from __future__ import annotations

import logging
import signal
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from digideep.pipeline.runner import Runner

__all__ = ["StopOnSignals"]

log = logging.getLogger(__name__)


class StopOnSignals:
    """While active, SIGINT/SIGTERM ask the runner to stop after the iteration; a second SIGINT interrupts."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.runner._stop_reason is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        log.warning("%s received: finishing the iteration and checkpointing (SIGINT again to quit now)", name)
        self.runner.request_stop(f"{name} received")

    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
