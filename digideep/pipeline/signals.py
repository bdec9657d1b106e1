"""SIGINT/SIGTERM while training: finish the iteration, checkpoint, stop; a second SIGINT quits at once."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["StopOnSignals"]

log = logging.getLogger(__name__)


class StopOnSignals:
    """While active, SIGINT/SIGTERM call ``request_stop(reason)``; a second SIGINT interrupts at once.

    Args:
        request_stop: asks the loop to finish its iteration, checkpoint and stop (e.g.
            :meth:`~digideep.pipeline.runner.Runner.request_stop`); called with ``"SIGINT received"``
            or ``"SIGTERM received"``.
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
        self.request_stop(f"{name} received")

    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
