"""The write-through storage: a RAM ring for sampling, every chunk written behind to Zarr.

``store()`` writes the RAM ring and hands copies to a background thread, so the training thread
does not wait for the disk or the network. Zarr is written in whole chunks: when the ring enters a
chunk-row window of a key, ``store()`` copies the whole window from the RAM ring (rows ahead of the
write keep the bytes of the previous pass), later stores in it copy only their rows, and the thread
writes the window, one file or object per key, all keys at once, when the ring moves past it.
Nothing is read back from Zarr, and no chunk is partly rewritten. Chunks are at most 1/16 of the
ring (:mod:`~digideep.memory.durable.zarr_group`), so ``flush()`` writes only the windows still open, one
PUT per key, then the commit record.

Crash safety is the Zarr-only protocol (:class:`~digideep.memory.durable.zarr_storage.ZarrStorage`): when the
ring enters windows, :meth:`~digideep.memory.durable.zarr_storage.ZarrStorage.protect` copies their chunks, as
they were at the anchor, to the undo area (whole objects: a server-side copy on object storage, a
hard link on disk), before the first write of the window; before a window is written the committed
state shrinks to the rows it keeps, in one commit; a window rewrites rows it does not change with
their own bytes; each file or object is written whole. So a process killed while the thread writes
leaves the last commit readable and the newest checkpoint restorable. After a checkpoint on object
storage, the old undo area is deleted by the thread (before its next write), not by the checkpoint.

Bounds and errors: at most ``max_pending`` chunks wait for the thread (``store()`` blocks when the
queue is full), and the open windows hold one chunk per key. An error in the thread is raised by the
next ``store()``, ``flush()`` or ``wait()``, the original exception first, then a ``RuntimeError``
naming it on every later call: the durable copy stopped, so the run must resume from its last
checkpoint. Nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np

from digideep.memory.durable.background import BackgroundWriter, guarded
from digideep.memory.durable.readback import RestorePlan, plan_load, read_plan
from digideep.memory.durable.zarr_storage import ZarrStorage
from digideep.memory.layout import KeySpec
from digideep.memory.ring import RingState
from digideep.memory.storage import Pieces, PreparedRestore, RamStorage, Storage
from digideep.utility.placeholders import placeholder_array

__all__ = ["WriteThroughStorage", "ZarrWindowWriter", "split_windows"]


@dataclass
class _StoredRows:
    """Rows a store wrote: ``rows[key]`` is a list of ``(start, stop, (W, stop - start, ...) copy, whole)``.

    ``whole``: the piece is the whole chunk-row window ``[start, stop)`` the ring just entered, copied
    from the RAM ring after the store (rows ahead of the store keep the bytes of the previous pass);
    otherwise rows of the window already open.
    """

    rows: dict[str, list[tuple[int, int, np.ndarray, bool]]]
    new_specs: dict[str, KeySpec]
    state: RingState


@dataclass
class _Window:
    """One chunk-row window ``[start, stop)`` of one key, all workers: ``data`` is ``(W, stop - start, ...)``."""

    start: int
    stop: int
    data: np.ndarray
    dirty: bool = True


def split_windows(
    ring: np.ndarray, pieces: Pieces, rows: int, current: int | None
) -> tuple[list[tuple[int, int, np.ndarray, bool]], int | None]:
    """Copies of what a store wrote to ``ring``, cut at chunk-row windows of ``rows`` rows.

    A window the ring enters (not ``current``) is copied whole, so the writer thread never reads
    Zarr to fill the rest of a chunk; rows of the ``current`` window are copied alone.

    Returns:
        The pieces for :class:`_StoredRows` and the window the ring is in now.
    """
    capacity = ring.shape[1]
    out = []
    for a, b, _ in pieces:
        row = a
        while row < b:
            index = row // rows
            start, stop = index * rows, min(index * rows + rows, capacity)
            end = min(b, stop)
            if index != current:
                current = index
                out.append((start, stop, ring[:, start:stop].copy(), True))
            else:
                out.append((row, end, ring[:, row:end].copy(), False))
            row = end
    return out, current


class ZarrWindowWriter:
    """Writes stored rows to Zarr one whole chunk-row window at a time (runs on the writer thread).

    Args:
        storage: the Zarr storage written to.
    """

    def __init__(self, storage: ZarrStorage) -> None:
        self.storage = storage
        self.windows: dict[str, _Window] = {}
        self.total = 0  # total of the newest stored chunk: protect() covers every row up to it
        self.pos = 0  # pos of the newest stored chunk

    def apply(self, task: _StoredRows) -> None:
        """Take the rows of one store; write the windows the ring moved past (all keys at once)."""
        self.storage.ensure_open()
        if task.new_specs:
            self.storage.add_keys(task.new_specs, task.state)
            for key in task.new_specs:
                self.windows.pop(key, None)
        self.total = task.state.total
        complete = []
        for key, pieces in task.rows.items():
            for start, stop, values, whole in pieces:
                if whole:
                    window = self.windows.get(key)
                    if window is not None and window.dirty:
                        complete.append((key, window))
                    self.windows[key] = _Window(start, stop, values)
                else:
                    window = self.windows[key]
                    window.data[:, start - window.start : stop - window.start] = values
                    window.dirty = True
        self._write(complete)
        self.pos = task.state.pos
        self.protect_open()

    def protect_open(self) -> None:
        """Protect now (as training runs) what the stored rows overwrite, so a flush has nothing to
        protect: the open windows' chunks go to the undo area (rows up to the end of every open
        window count as overwritten; a window's chunk is copied once) and the committed state
        shrinks by the rows stored (a commit when it changes, one small write per store once the
        ring is full)."""
        if not self.windows or not self.storage.group.is_open:
            return
        ahead = max((w.stop - 1 - self.pos for w in self.windows.values() if w.start <= self.pos), default=0)
        self.storage.protect(self.total, self.total + max(0, ahead))

    def _write(self, windows: list[tuple[str, _Window]]) -> None:
        """Protect what the windows overwrite (one commit), then write each as one chunk per key."""
        if not windows:
            return
        self.storage.protect(self.total)
        self.storage.group.write_many([(key, w.start, w.stop, w.data) for key, w in windows])
        for _, window in windows:
            window.dirty = False

    def flush(self, state: RingState, specs: Mapping[str, KeySpec]) -> None:
        """Write the open windows (they stay open), then commit ``state``."""
        self.storage.ensure_open()
        self._write([(key, window) for key, window in self.windows.items() if window.dirty])
        self.storage.commit(state, specs)

    def reset(self) -> None:
        """Forget the open windows (after Zarr was changed by a load or a restore)."""
        self.windows = {}
        group = self.storage.group
        self.total, self.pos = (group.committed.total, group.committed.pos) if group.is_open else (0, 0)


class WriteThroughStorage(Storage):
    """RAM ring for reading, Zarr written behind for durability (see the module docstring).

    Args:
        ram: the ring sampling reads.
        zarr: the Zarr storage every stored chunk's rows are written through to.
        write_behind: write on a background thread (default); ``False`` writes in ``store()``
            itself (same windows and order, for debugging and deterministic fault injection).
        max_pending: chunks that may wait for the background thread.
    """

    def __init__(
        self, ram: RamStorage, zarr: ZarrStorage, write_behind: bool = True, max_pending: int = 16
    ) -> None:
        super().__init__(ram.num_workers, ram.capacity, ram.name)
        self.ram, self.zarr = ram, zarr
        self.location = zarr.location
        self.windows = ZarrWindowWriter(zarr)
        self.rows_of: dict[str, int] = {}  # rows per Zarr chunk of every key
        self.current: dict[str, int] = {}  # the chunk-row window the ring is in, per key
        what = f"memory '{self.name}' at {zarr.location}"
        self.background = BackgroundWriter(self, what, max_pending) if write_behind else None
        self.guard: Callable[[], None] | None = None  # run before every Zarr write (see guard_writes)

    @property
    def durable(self) -> bool:
        return True

    @property
    def specs(self) -> dict[str, KeySpec]:  # type: ignore[override]
        return self.ram.specs

    def guard_writes(self, guard: Callable[[], None]) -> None:
        """Run ``guard()`` on the background thread before every Zarr write; a job whose guard
        raises is skipped and its error is raised by the next ``store()`` (see :class:`BackgroundWriter`)."""
        self.guard = guard

    def _run(self, job: Callable[[], None]) -> None:
        if self.guard is not None:
            job = partial(guarded, self.guard, job)
        if self.background is None:
            job()
        else:
            self.background.submit(job)

    def array(self, key: str) -> np.ndarray:
        return self.ram.array(key)

    def write(
        self, chunk: Mapping[str, np.ndarray], pieces: Pieces, new_specs: dict[str, KeySpec], state: RingState
    ) -> None:
        """Write the RAM ring, then queue a copy of the rows written for Zarr."""
        if self.background is not None:
            self.background.check()  # refuse before changing the ring
        self.ram.write(chunk, pieces, new_specs, state)
        for key, spec in new_specs.items():
            self.rows_of[key] = self.zarr.group.planned_rows(spec)
        rows = {}
        for key, ring in self.ram.rings.items():
            chunk_rows = self.rows_of.get(key) or self.zarr.group.planned_rows(self.ram.specs[key])
            rows[key], self.current[key] = split_windows(ring, pieces, chunk_rows, self.current.get(key))
        self._run(partial(self.windows.apply, _StoredRows(rows, dict(new_specs), state)))

    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        return self.ram.read(key, start, stop)

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self.ram.gather(key, workers, rows)

    def wait(self) -> None:
        """Wait for the outstanding writes (not committed: that is :meth:`flush`)."""
        if self.background is not None:
            self.background.wait()

    def flush(self, state: RingState) -> None:
        """Wait for the outstanding writes, write the open windows, commit ``state``."""
        self._run(partial(self.windows.flush, state, dict(self.ram.specs)))
        self.wait()

    def checkpoint_committed(self, state: RingState) -> None:
        """Make ``state`` the anchor and drop the old undo area: on a local disk now (a rename), on
        object storage in the background (a listing and a batched delete, before any later write).
        The chunks of the windows open now are then copied to the new undo area in the background."""
        self.wait()
        local = self.location.is_local
        if self.zarr.set_anchor(state, drop=local):
            if not local:
                self._run(self.zarr.group.drop_undo)
            self._run(self.windows.protect_open)  # the windows open at the checkpoint

    def load(self) -> tuple[RingState, dict[str, KeySpec]]:
        """Reread the committed state and the ring from Zarr."""
        self.wait()
        state, specs = self.zarr.load(verify=False)  # reading the ring checks every Zarr chunk
        plan = plan_load(self.zarr.group)
        self.ram.adopt(plan.specs, self._read(plan))
        self._reset()
        return state, specs

    def _read(self, plan: RestorePlan) -> dict[str, np.ndarray]:
        """New RAM rings holding the rows of ``plan`` (every row written so far, byte for byte), the
        others placeholders.

        Raises:
            DamagedMemoryError: a Zarr chunk read fails its checksum.
        """
        shape = (self.num_workers, self.capacity)
        rings = {
            key: placeholder_array((*shape, *spec.shape), spec.dtype) for key, spec in plan.specs.items()
        }
        read_plan(self.zarr.group, plan, rings)
        return rings

    def _reset(self) -> None:
        """Zarr was changed under the windows (a load or a restore): start afresh from the RAM ring."""
        self.windows.reset()
        self.current = {}
        group = self.zarr.group
        self.rows_of = {key: group.chunk_rows_of(key) for key in group.arrays} if group.is_open else {}

    def prepare_restore(self, target: RingState, current: RingState) -> PreparedRestore:
        """Plan the restore to ``target`` and read the next RAM ring from where its rows will be
        after it (the undo area's chunks where they are); every chunk is checked, nothing changed."""
        self.wait()
        plan = self.zarr.plan_restore(target)
        if plan is None:
            return PreparedRestore(target, target)
        return PreparedRestore(target, plan.state, (plan, self._read(plan)))

    def restore(
        self, target: RingState, current: RingState, prepared: PreparedRestore | None = None
    ) -> RingState:
        """Return Zarr to ``target`` (undo area included); the rings read by :meth:`prepare_restore`
        become the RAM ring (nothing is read twice)."""
        prepared = prepared or self.prepare_restore(target, current)
        self.wait()
        state = prepared.state
        if prepared.staged is not None:
            plan, rings = prepared.staged
            state = self.zarr.restore(target, current, PreparedRestore(target, plan.state, plan))
            self.ram.adopt(plan.specs, rings)
        self._reset()
        return state

    def close(self) -> None:
        """Wait for the outstanding writes and end the background thread."""
        if self.background is not None:
            self.background.close()
            self.background.check()
