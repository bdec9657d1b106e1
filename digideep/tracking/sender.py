"""Sending buffered metrics to MLflow: one ``log_batch`` per flush, inline or from one thread.

A ``log_batch`` costs about 4 ms against the embedded sqlite store and 30 to 80 ms against a local
``mlflow server`` on this project's machines (``bench/bench_tracking.py``), more than the 2 % of a
training iteration that tracking may take. The asynchronous sender therefore hands each flush to a
background thread: the training loop pays for appending to a list, the thread pays for the call.

Failures never reach the training loop. A batch the store refuses for good (an HTTP 4xx answer such
as an invalid value or a deleted run) is dropped with a warning. Any other failure (server down,
timeout) puts the batch back at the front of the queue, logs a warning, and pauses sending for
``retry_after`` seconds; the next flush after that retries it. Values beyond ``max_pending`` (server
gone for a long time) are dropped, oldest first, with a count. Warnings are logged for the first
failure and every 100th after it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from mlflow.entities import Metric

from digideep.tracking.failures import is_refusal, one_line
from digideep.tracking.naming import MAX_METRICS_PER_BATCH

__all__ = ["MetricSender"]

log = logging.getLogger(__name__)


class MetricSender:
    """A FIFO of metric values sent in batches of at most 1000 by ``send_batch``.

    Args:
        send_batch: called with up to 1000 :class:`mlflow.entities.Metric`; raises on failure.
        asynchronous: send from a daemon thread (True) or inside :meth:`flush` (False).
        max_pending: most values kept while sending fails; the oldest are dropped beyond it.
        retry_after: seconds without send attempts after a failure.
        description: what is being sent to, for warnings (the tracking URI and run id).
    """

    def __init__(
        self,
        send_batch: Callable[[list[Metric]], None],
        *,
        asynchronous: bool = True,
        max_pending: int = 1_000_000,
        retry_after: float = 30.0,
        description: str = "MLflow",
    ) -> None:
        self._send_batch = send_batch
        self._max_pending = max_pending
        self._retry_after = retry_after
        self._description = description
        self._pending: deque[Metric] = deque()
        self._cond = threading.Condition()
        self._requested = False
        self._busy = False
        self._closed = False
        self._paused_until = 0.0
        self.sent = 0
        self.dropped = 0
        self.failures = 0
        self._thread: threading.Thread | None = None
        if asynchronous:
            self._thread = threading.Thread(target=self._run, name="digideep-mlflow-sender", daemon=True)
            self._thread.start()

    @property
    def pending(self) -> int:
        """Values buffered and not yet sent."""
        with self._cond:
            return len(self._pending)

    def add(self, metrics: Sequence[Metric]) -> None:
        """Buffer ``metrics`` (sent at the next :meth:`flush`)."""
        with self._cond:
            self._pending.extend(metrics)
            excess = len(self._pending) - self._max_pending
            if excess > 0:
                for _ in range(excess):
                    self._pending.popleft()
                if self.dropped == 0:
                    log.warning(
                        "%s unreachable for long: dropping the oldest unsent metric values", self._description
                    )
                self.dropped += excess

    def flush(self) -> None:
        """Send what is buffered: now (synchronous) or by the thread (asynchronous, returns at once)."""
        if self._thread is None:
            self._send_all()
            return
        with self._cond:
            self._requested = True
            self._cond.notify_all()

    def drain(self, timeout: float = 30.0) -> bool:
        """Flush and wait until the buffer is sent (or a send failed, or ``timeout`` passed).

        Returns:
            True when nothing is left to send.
        """
        if self._thread is None:
            self._send_all()
            return not self._pending
        with self._cond:
            self._requested = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._requested and not self._busy, timeout)
            return not self._pending

    def close(self, timeout: float = 30.0) -> int:
        """Send what is buffered (one last attempt, at most ``timeout`` seconds), stop the thread.

        Returns:
            The number of values that could not be sent or were dropped (0 when all arrived).
        """
        self._paused_until = 0.0  # the last attempt is made even right after a failure
        if self._thread is None:
            self._send_all()
        else:
            with self._cond:
                self._closed = True
                self._requested = True
                self._cond.notify_all()
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning(
                    "%s did not answer within %.0f s while sending the last metrics",
                    self._description,
                    timeout,
                )
        with self._cond:
            self._closed = True
            unsent = len(self._pending)
        lost = unsent + self.dropped
        if lost:
            log.warning("%d metric values were not sent to %s", lost, self._description)
        return lost

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._requested or self._closed)
                self._requested = False
                closing = self._closed
                self._busy = True
            self._send_all()
            with self._cond:
                self._busy = False
                self._cond.notify_all()
            if closing:
                return

    def _send_all(self) -> None:
        if time.monotonic() < self._paused_until:
            return
        while True:
            with self._cond:
                batch = [
                    self._pending.popleft() for _ in range(min(len(self._pending), MAX_METRICS_PER_BATCH))
                ]
            if not batch:
                return
            try:
                self._send_batch(batch)
            except Exception as error:  # any backend failure: warn; keep the values unless refused
                self.failures += 1
                if is_refusal(error):
                    self.dropped += len(batch)
                    self._warn(f"{self._description} refused {len(batch)} metric values, dropped", error)
                    continue
                with self._cond:
                    self._pending.extendleft(reversed(batch))
                self._paused_until = time.monotonic() + self._retry_after
                self._warn(
                    f"could not send {len(batch)} metric values to {self._description}; "
                    f"retrying in {self._retry_after:.0f} s",
                    error,
                )
                return
            self.sent += len(batch)

    def _warn(self, message: str, error: BaseException) -> None:
        """Log the first failure and then every 100th, so a long outage does not flood the log."""
        if self.failures == 1 or self.failures % 100 == 0:
            log.warning("%s (%s; failure %d)", message, one_line(error), self.failures)
