"""The write-through storage: a RAM ring for sampling, every chunk written behind to Zarr.

``store()`` writes the RAM ring, copies the rows it wrote and hands them to a background thread,
so the training thread does not wait for the disk or the network. The thread writes Zarr in whole
chunks: it keeps the current chunk-row window of every key (read from Zarr when it enters it, so
rows it does not write keep their bytes) and writes the window when the ring moves past it. Chunks
span all workers and about 4 MiB (:data:`~digideep.memory.storage.WRITE_THROUGH_CHUNK_BYTES`), so a
window is one file or object per key, and ``flush()`` writes only the windows still open, one PUT
per key, then the commit record. A memory's whole ring is never rewritten.

Crash safety is the Zarr-only protocol (:class:`~digideep.memory.storage.ZarrStorage`): before a
window is written, :meth:`~digideep.memory.storage.ZarrStorage.protect` copies the anchor's rows it
overwrites to the undo area and shrinks the committed state, in one commit; a window rewrites rows
it does not change with their own bytes; each file or object is written whole. So a process killed
while the thread writes leaves the last commit readable and the newest checkpoint restorable.

Bounds and errors: at most ``max_pending`` chunks wait for the thread (``store()`` blocks when the
queue is full), and the open windows hold one chunk per key. An error in the thread is raised by the
next ``store()``, ``flush()`` or ``wait()``, the original exception first, then a ``RuntimeError``
naming it on every later call: the durable copy stopped, so the run must resume from its last
checkpoint. Nothing is dropped silently.
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np

from digideep.memory.layout import KeySpec
from digideep.memory.ring import RingState
from digideep.memory.storage import Pieces, RamStorage, ZarrStorage

__all__ = ["WindowWriter", "WriteBehind", "WriteThroughStorage"]

logger = logging.getLogger(__name__)

_STOP = object()


@dataclass
class _Task:
    """Rows a store wrote: ``rows[key]`` is a list of ``(start, stop, (W, stop - start, ...) copy)``."""

    rows: dict[str, list[tuple[int, int, np.ndarray]]]
    new_specs: dict[str, KeySpec]
    state: RingState


@dataclass
class _Window:
    """One chunk-row window ``[start, stop)`` of one key, all workers: ``data`` is ``(W, stop - start, ...)``."""

    index: int
    start: int
    stop: int
    data: np.ndarray
    dirty: bool = False


class WindowWriter:
    """Writes stored rows to Zarr one whole chunk-row window at a time (runs on the writer thread).

    Args:
        durable: the Zarr storage written to.
    """

    def __init__(self, durable: ZarrStorage) -> None:
        self.durable = durable
        self.windows: dict[str, _Window] = {}
        self.total = 0  # total of the newest stored chunk: protect() covers every row up to it
        # protect (the undo copy) in the background every eighth of the ring, so that a flush
        # copies at most that many rows to the undo area
        self.protect_rows = max(1, durable.capacity // 8)
        self.protected = 0

    def apply(self, task: _Task) -> None:
        """Take the rows of one store; write the windows the ring moved past."""
        self.durable.ensure_open()
        if task.new_specs:
            self.durable.add_keys(task.new_specs)
            for key in task.new_specs:
                self.windows.pop(key, None)
        self.total = task.state.total
        if self.total - self.protected >= self.protect_rows:
            self.durable.protect(self.total)
            self.protected = self.total
        for key, pieces in task.rows.items():
            for start, stop, values in pieces:
                self._put(key, start, stop, values)

    def _put(self, key: str, start: int, stop: int, values: np.ndarray) -> None:
        array = self.durable.store.arrays[key]
        rows = array.chunks[1]
        row = start
        while row < stop:
            index = row // rows
            window = self.windows.get(key)
            if window is None or window.index != index:
                if window is not None and window.dirty:
                    self._write(key, window)
                window = self._enter(key, index, rows)
            end = min(stop, window.stop)
            window.data[:, row - window.start : end - window.start] = values[:, row - start : end - start]
            window.dirty = True
            row = end

    def _enter(self, key: str, index: int, rows: int) -> _Window:
        """Open window ``index`` of ``key`` with the bytes Zarr holds there (placeholders if never written)."""
        spec = self.durable.specs[key]
        start = index * rows
        stop = min(start + rows, self.durable.capacity)
        data = np.empty((self.durable.num_workers, stop - start, *spec.shape), spec.dtype)
        self.durable.store.read_into(key, data, start, stop)
        window = _Window(index, start, stop, data)
        self.windows[key] = window
        return window

    def _write(self, key: str, window: _Window) -> None:
        self.durable.protect(self.total)
        self.protected = self.total
        self.durable.store.write(key, window.start, window.stop, window.data)
        window.dirty = False

    def flush(self, state: RingState, specs: Mapping[str, KeySpec]) -> None:
        """Write the open windows (they stay open), then commit ``state``."""
        self.durable.ensure_open()
        for key, window in self.windows.items():
            if window.dirty:
                self._write(key, window)
        self.durable.commit(state, specs)

    def reset(self) -> None:
        """Forget the open windows (after Zarr was changed by a load or a restore)."""
        self.windows = {}
        self.protected = self.durable.store.committed.total if self.durable.store.is_open else 0


class WriteBehind:
    """A background thread that runs jobs in order, at most ``max_pending`` waiting.

    The thread starts with the first job and ends when its owner is garbage-collected or
    :meth:`close` is called. After a job fails, later jobs are skipped and the error is raised by
    :meth:`check` (see the module docstring).

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


class WriteThroughStorage:
    """RAM ring for reading, Zarr written behind for durability (see the module docstring).

    Args:
        ram: the ring sampling reads.
        durable: the Zarr group every chunk is written through to.
        write_behind: write on a background thread (default); ``False`` writes in ``store()``
            itself (same windows and order, for debugging and deterministic fault injection).
        max_pending: chunks that may wait for the background thread.
    """

    durable = True

    def __init__(
        self, ram: RamStorage, durable: ZarrStorage, write_behind: bool = True, max_pending: int = 16
    ) -> None:
        self.ram, self.zarr = ram, durable
        self.num_workers, self.capacity, self.name = ram.num_workers, ram.capacity, ram.name
        self.location = durable.location
        self.windows = WindowWriter(durable)
        what = f"memory '{self.name}' at {durable.location}"
        self.behind = WriteBehind(self, what, max_pending) if write_behind else None

    @property
    def specs(self) -> dict[str, KeySpec]:
        return self.ram.specs

    def _run(self, job: Callable[[], None]) -> None:
        if self.behind is None:
            job()
        else:
            self.behind.submit(job)

    def array(self, key: str) -> np.ndarray:
        return self.ram.array(key)

    def write(
        self, chunk: Mapping[str, np.ndarray], pieces: Pieces, new_specs: dict[str, KeySpec], state: RingState
    ) -> None:
        """Write the RAM ring, then queue a copy of the rows written for Zarr."""
        if self.behind is not None:
            self.behind.check()  # refuse before changing the ring
        self.ram.write(chunk, pieces, new_specs, state)
        rows = {
            key: [(a, b, ring[:, a:b].copy()) for a, b, _ in pieces] for key, ring in self.ram.rings.items()
        }
        self._run(partial(self.windows.apply, _Task(rows, dict(new_specs), state)))

    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        return self.ram.read(key, start, stop)

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self.ram.gather(key, workers, rows)

    def wait(self) -> None:
        """Wait for the outstanding writes (not committed: that is :meth:`flush`)."""
        if self.behind is not None:
            self.behind.wait()

    def flush(self, state: RingState) -> None:
        """Wait for the outstanding writes, write the open windows, commit ``state``."""
        self._run(partial(self.windows.flush, state, dict(self.ram.specs)))
        self.wait()

    def checkpoint_committed(self, state: RingState) -> None:
        self.wait()
        self.zarr.checkpoint_committed(state)

    def load(self) -> tuple[RingState, dict[str, KeySpec]]:
        """Reread the committed state and the ring from Zarr."""
        self.wait()
        self.windows.reset()
        state, specs = self.zarr.load()
        self.ram.fill_from(self.zarr.store, state, specs)
        return state, specs

    def restore(self, target: RingState, current: RingState) -> RingState:
        """Return Zarr to ``target`` (undo area included), then reread the ring from it."""
        self.wait()
        self.windows.reset()
        state = self.zarr.restore(target, current)
        if self.zarr.store.is_open:
            self.ram.fill_from(self.zarr.store, state, self.zarr.store.committed_specs)
        return state

    def close(self) -> None:
        """Wait for the outstanding writes and end the background thread."""
        if self.behind is not None:
            self.behind.close()
            self.behind.check()

    def state_dict(self) -> dict[str, int]:
        return self.ram.state_dict()
