"""The background writer: one thread that runs a memory's durable writes in order, off the training thread.

At most ``max_pending`` jobs wait (``submit`` blocks beyond). An error in a job is raised on the
training thread by the next ``submit``, ``wait`` or ``check``: the original exception once, then a
``RuntimeError`` naming it on every later call (the durable copy stopped, so the run must resume
from its last checkpoint); later jobs are skipped. Nothing is dropped silently.
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable

__all__ = ["BackgroundWriter", "guarded"]

logger = logging.getLogger(__name__)

_STOP = object()


class BackgroundWriter:
    """A background thread that runs jobs in order, at most ``max_pending`` waiting.

    The thread starts with the first job and ends when its owner is garbage-collected or
    :meth:`close` is called. After a job fails, later jobs are skipped and the error is raised by
    :meth:`check` (see :mod:`digideep.memory.durable.write_through`).

    Args:
        owner: the object whose life the thread follows.
        what: names the memory and its location in messages.
        max_pending: jobs that may wait; :meth:`submit` blocks beyond.
    """

    def __init__(self, owner: object, what: str, max_pending: int) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending!r}")
        self.what = what
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self._state = {"error": None}  # shared with the thread (not self: it must not keep self alive)
        self._reported = False
        self._thread: threading.Thread | None = None
        weakref.finalize(owner, self._queue.put, _STOP)  # the owner is gone: end the thread

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job`` (blocks while ``max_pending`` jobs wait)."""
        self.check()
        if self._thread is None:
            self._thread = threading.Thread(
                target=_work, args=(self._queue, self._state), name=f"write-behind {self.what}", daemon=True
            )
            self._thread.start()
        self._queue.put(job)

    def wait(self) -> None:
        """Wait until every queued job ran; raise the error of one that failed."""
        if self._thread is not None:
            self._queue.join()
        self.check()

    def check(self) -> None:
        """Raise the error of a failed job: the original once, then a ``RuntimeError`` naming it."""
        error = self._state["error"]
        if error is None:
            return
        if not self._reported:
            self._reported = True
            error.add_note(f"raised by the background writer of {self.what}")
            raise error
        raise RuntimeError(
            f"{self.what}: an earlier background write failed ({error!r}); the durable copy is "
            "behind the RAM ring, resume the run from its last checkpoint"
        ) from error

    def close(self) -> None:
        """Wait for the queued jobs, then end the thread."""
        if self._thread is not None:
            self._queue.join()
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None


def _work(jobs: queue.Queue, state: dict) -> None:
    while True:
        job = jobs.get()
        try:
            if job is _STOP:
                return
            if state["error"] is None:
                job()
        except BaseException as error:  # surfaced on the training thread by check()
            logger.debug("background write failed: %r", error)
            state["error"] = error
        finally:
            jobs.task_done()


def guarded(guard: Callable[[], None], job: Callable[[], None]) -> None:
    """Run ``job`` after ``guard()`` (which raises when this process may no longer write)."""
    guard()  # raises when this process may no longer write (a session lease that was lost)
    job()
