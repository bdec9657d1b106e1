"""The writer of a memory's log: rows gathered into each key's open chunk, written once it is full
(behind the training thread) and at a flush as far as it goes."""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable, Mapping
from functools import partial

import numpy as np

from digideep.memory.log import Write, ZarrLog
from digideep.memory.ring import KeySpec, RingState, fill_value
from digideep.utility.placeholders import placeholder_array

logger = logging.getLogger(__name__)

_STOP = object()


class LogWriter:
    """Appends a memory's rows to ``log``: :meth:`append` copies rows into each key's open chunk and
    hands a full one to a background thread (``write_behind``; else the caller's thread), at most
    ``max_pending`` writes waiting; :meth:`flush` writes the open ones and commits; ``through``: the
    open ones on every append too (a memory that samples the log). The thread runs the writes in
    order and ends with the writer or :meth:`close`; a write's error is raised by the next call (the
    original once, then a ``RuntimeError`` naming it), later writes skipped. An open chunk is
    ``(first, low, (W, rows, ...) buffer)``: global rows ``first ..``, of which the buffer holds
    those from ``low`` on and its writes write only those (a chunk continued after a restore).
    """

    def __init__(
        self, log: ZarrLog, write_behind: bool = True, max_pending: int = 16, through: bool = False
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending!r}")
        self.log, self.write_behind, self.through = log, write_behind, through
        self.guard: Callable[[], None] | None = None  # run before every write (see Memory.guard_writes)
        self.open: dict[str, tuple[int, int, np.ndarray]] = {}  # key -> (first, low, buffer)
        self.dirty: set[str] = set()  # keys whose open chunk has rows its file lacks
        self.rows: dict[str, int] = {}  # chunk rows of each key
        self.floor = 0  # the first row after a restore: the log holds those before
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self._state: dict = {"error": None}  # shared with the thread (not self: it must not keep self alive)
        self._reported = False
        self._thread: threading.Thread | None = None
        weakref.finalize(self, self._queue.put, _STOP)

    def check(self) -> None:
        """Raise a background write's error (before the caller changes anything)."""
        error = self._state["error"]
        if error is None:
            return
        if not self._reported:
            self._reported = True
            error.add_note(f"raised by the background writer of {self.log.what}")
            raise error
        raise RuntimeError(
            f"{self.log.what}: an earlier background write failed ({error!r}); the durable copy is "
            "behind the RAM ring, resume the run from its last checkpoint"
        ) from error

    def append(
        self,
        chunk: Mapping[str, np.ndarray],
        start: int,
        steps: int,
        specs: Mapping[str, KeySpec],
        new_specs: Mapping[str, KeySpec],
    ) -> None:
        """Append rows ``0 .. steps - 1`` of ``chunk`` as global rows ``start ..`` of every key of
        ``specs`` (a key the chunk lacks: placeholders); ``new_specs`` are the keys it brings first."""
        for key, spec in new_specs.items():
            self.rows[key] = self.log.planned_rows(spec)
        writes: list[Write] = []
        for key, spec in specs.items():
            rows, value, row = self.rows[key], chunk.get(key), start
            while row < start + steps:
                first = row // rows * rows
                if key not in self.open or self.open[key][0] != first:
                    buffer = placeholder_array((self.log.num_workers, rows, *spec.shape), spec.dtype)
                    self.open[key] = (first, max(first, self.floor), buffer)
                _, low, buffer = self.open[key]
                end = min(start + steps, first + rows)
                buffer[:, row - first : end - first] = (
                    fill_value(spec.dtype) if value is None else value[:, row - start : end - start]
                )
                self.dirty.add(key)
                if end == first + rows:
                    writes.append((key, low, end, self.open.pop(key)[2][:, low - first :]))
                    self.dirty.discard(key)
                row = end
        if self.through:
            writes += self._open_writes()
        if writes or new_specs:
            new = {key: (spec, self.rows[key]) for key, spec in new_specs.items()}
            self._run(partial(self.log.append, new, start, writes))

    def flush(
        self, state: RingState, specs: Mapping[str, KeySpec], prestep: Mapping[str, np.ndarray]
    ) -> None:
        """Write the open chunks as far as they go, then commit ``state`` with its final ``prestep``
        rows; waits for it."""
        self._run(partial(self.log.commit, state, dict(specs), dict(prestep), self._open_writes()))
        self.wait()

    def checkpoint(self, state: RingState, keep: int) -> None:
        """:meth:`ZarrLog.checkpoint`, now; the chunks it lets go are deleted in the background."""
        self.wait()
        self._run(partial(self.log.delete, self.log.checkpoint(state, keep)))

    def reset(self, total: int) -> None:
        """Start again from a restored state at ``total``, no chunk open: the log holds the rows before."""
        self.rows, self.open, self.dirty, self.floor = dict(self.log.record.rows), {}, set(), total

    def _open_writes(self) -> list[Write]:
        """The writes of the open chunks with rows their files lack, each to the chunk's end (copies
        when they are written behind: the chunks fill on)."""
        writes = []
        for key, (first, low, buffer) in self.open.items():
            if key in self.dirty:
                values = buffer[:, low - first :]
                writes.append(
                    (key, low, first + buffer.shape[1], values.copy() if self.write_behind else values)
                )
        self.dirty = set()
        return writes

    def _run(self, job: Callable[[], None]) -> None:
        if self.guard is not None:
            job = partial(_guarded, self.guard, job)
        if not self.write_behind:
            job()
            return
        self.check()
        if self._thread is None:
            self._thread = threading.Thread(
                target=_work,
                args=(self._queue, self._state),
                name=f"write-behind {self.log.what}",
                daemon=True,
            )
            self._thread.start()
        self._queue.put(job)

    def wait(self) -> None:
        """Wait for the writes in flight (nothing is committed); raise the error of one that failed."""
        if self._thread is not None:
            self._queue.join()
        self.check()

    def close(self) -> None:
        """Wait for the writes in flight and end the background thread."""
        if self._thread is not None:
            self._queue.join()
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None
        self.check()


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


def _guarded(guard: Callable[[], None], job: Callable[[], None]) -> None:
    guard()  # raises when this process may no longer write (a session lease that was lost)
    job()
