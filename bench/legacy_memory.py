"""The memory before the Storage/Writer split (commit 293eafa), kept only for bench_memory.py.

``store()`` writes the RAM ring; ``flush()`` writes every row stored since the last flush to Zarr
(chunks of one worker, about 1 MiB) at the checkpoint. bench/bench_memory.py measures the
write-behind memory against it in the same run. It runs on today's ``ZarrStore`` (which takes a
path or URL), so it also runs against S3.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import zarr

from digideep.environment.data_helpers import placeholder_array
from digideep.memory.layout import KeySpec, fill_value, validate_chunk
from digideep.memory.ring import (
    RingState,
    logical_to_physical,
    ring_slices,
    rows_written_since,
    surviving_size,
)
from digideep.memory.zarr_store import ZarrStore

__all__ = ["Memory"]

logger = logging.getLogger(__name__)

_CHUNK_BYTES = {"ram": 1 << 20, "disk": 1 << 18}  # target Zarr chunk size per mode (see bench_memory)


class Memory:
    """Circular memory of trajectory chunks, ``capacity`` rows (steps) per worker.

    Args:
        path: folder of the Zarr group (the Runner passes ``session.memory_path(name)``).
        num_workers: ``W``, the explorer's worker count; every chunk must have it.
        capacity: ``C``, rows per worker (so ``W * C`` rows in all); at least 2.
        mode: ``"ram"`` (sampling reads a numpy ring; Zarr is written by :meth:`flush`) or
            ``"disk"`` (no ring: :meth:`store` writes Zarr, sampling reads Zarr; for memories larger
            than RAM, far slower, see the package docstring).
        zarr_chunk_rows: rows per Zarr chunk; ``None`` sizes each key's chunks to about 1 MiB
            (``"ram"``) or 256 KiB (``"disk"``).
        compression: ``None`` (default), ``"zstd"`` or ``"lz4"`` (level 1); replay data barely
            compresses, so compression mostly costs time.
        name: shown in messages and logs; defaults to the folder's stem.
    """

    def __init__(
        self,
        path: str | Path,
        num_workers: int,
        capacity: int,
        mode: str = "ram",
        zarr_chunk_rows: int | None = None,
        compression: str | None = None,
        name: str | None = None,
    ) -> None:
        if mode not in ("ram", "disk"):
            raise ValueError(f"Memory mode must be 'ram' or 'disk', got {mode!r}")
        for arg, value, low in (("num_workers", num_workers, 1), ("capacity", capacity, 2)):
            if not isinstance(value, int | np.integer) or value < low:
                raise ValueError(f"Memory {arg} must be an integer >= {low}, got {value!r}")
        if zarr_chunk_rows is not None and zarr_chunk_rows < 1:
            raise ValueError(f"Memory zarr_chunk_rows must be >= 1 or None, got {zarr_chunk_rows!r}")
        self.path = Path(path)
        self.name = name or self.path.stem
        self.mode = mode
        self._num_workers = int(num_workers)
        self._capacity = int(capacity)
        self._specs: dict[str, KeySpec] = {}
        self._rings: dict[str, np.ndarray] = {}  # key -> (W, C, ...) ring, "ram" mode
        self._flat: dict[str, np.ndarray] = {}  # key -> (W * C, ...) view of the ring
        self._state = RingState()
        self._pending: RingState | None = None  # a state_dict waiting for load()
        self._store = ZarrStore(
            self.path,
            self._num_workers,
            self._capacity,
            zarr_chunk_rows,
            _CHUNK_BYTES[mode],
            compression,
            self.name,
        )

    # -- reading -------------------------------------------------------------------------------
    @property
    def num_workers(self) -> int:
        return self._num_workers

    @property
    def capacity(self) -> int:
        """Rows per worker."""
        return self._capacity

    @property
    def size(self) -> int:
        """Valid transition rows per worker (the latest row, a final prestep, is not one)."""
        return self._state.size

    @property
    def pos(self) -> int:
        """Physical row of the latest row (the final prestep the next chunk overwrites)."""
        return self._state.pos

    @property
    def total(self) -> int:
        """Rows advanced since the memory was created (``T`` per chunk)."""
        return self._state.total

    @property
    def state(self) -> RingState:
        return self._state

    def keys(self) -> list[str]:
        """Flat keys stored so far, in the order they first appeared."""
        return list(self._specs)

    def spec(self, key: str) -> KeySpec:
        """dtype and per-row shape of ``key``."""
        return self._specs[self._known(key)]

    def __contains__(self, key: object) -> bool:
        return key in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._specs))

    def __getitem__(self, key: str) -> np.ndarray | zarr.Array:
        """The ``(W, C, ...)`` ring of ``key``: a numpy array in "ram" mode, the Zarr array in "disk" mode.

        Only rows :meth:`valid_rows` are transitions; the row :attr:`pos` is a final prestep.
        """
        key = self._known(key)
        return self._rings[key] if self.mode == "ram" else self._store.arrays[key]

    def __repr__(self) -> str:
        return (
            f"Memory({self.name!r}, mode={self.mode!r}, num_workers={self._num_workers}, "
            f"capacity={self._capacity}, size={self.size}, pos={self.pos}, keys={len(self._specs)})"
        )

    def physical_rows(self, logical: np.ndarray) -> np.ndarray:
        """Physical rows of valid rows ``logical`` (int array, ``0`` = oldest .. ``size - 1`` = newest)."""
        return logical_to_physical(logical, self._state, self._capacity)

    def valid_rows(self) -> np.ndarray:
        """Physical rows of every valid transition, oldest first: ``(size,)`` int64."""
        return self.physical_rows(np.arange(self._state.size, dtype=np.int64))

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows ``(workers[i], rows[i])`` of ``key``: ``(n, *row_shape)``, a new array.

        One ``np.take`` on the ring in "ram" mode; a sorted Zarr read in "disk" mode.
        """
        key = self._known(key)
        if self.mode == "disk":
            return self._store.gather(key, workers, rows)
        return self._flat[key].take(workers * self._capacity + rows, axis=0)

    def last_chunk(self) -> dict[str, np.ndarray]:
        """The latest stored chunk, ``(W, T + 1, ...)`` per key (views of the ring unless it wraps)."""
        rows = self._state.last_chunk_rows
        if rows == 0:
            raise ValueError(f"memory '{self.name}' holds no chunk yet; store one first")
        start = (self._state.pos - rows + 1) % self._capacity
        pieces = ring_slices(start, rows, self._capacity)
        out = {}
        for key in self._specs:
            parts = [self._read(key, a, b) for a, b, _ in pieces]
            out[key] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return out

    def _read(self, key: str, start: int, stop: int) -> np.ndarray:
        if self.mode == "disk":
            return self._store.read(key, start, stop)
        return self._rings[key][:, start:stop]

    def _known(self, key: str) -> str:
        if key not in self._specs:
            raise KeyError(f"memory '{self.name}' has no key {key!r}; it holds {list(self._specs)}")
        return key

    # -- storing -------------------------------------------------------------------------------
    def store(self, chunk: Mapping[str, np.ndarray]) -> None:
        """Append a chunk: ``(W, T + 1, ...)`` per key, the last row a final prestep.

        The chunk's first row overwrites the previous chunk's final prestep; when the ring is full
        the oldest rows are overwritten. Keys seen for the first time are back-filled with the nonify
        placeholder for earlier rows; keys this chunk lacks get the placeholder for its rows.

        Raises:
            TypeError, ValueError: if the chunk does not fit the memory (worker count, rows, a key's
                dtype or shape changed); nothing is changed then.
        """
        if self._pending is not None:
            raise ValueError(
                f"memory '{self.name}': load_state_dict() was given a saved state; call load() to "
                "restore its data before storing new chunks"
            )
        rows, new_specs = validate_chunk(chunk, self._num_workers, self._specs, self._capacity, self.name)
        new_state = self._state.advance(rows, self._capacity)
        if self.mode == "disk":
            self._store_disk(chunk, rows, new_specs, new_state)
            return
        for key, ring in self._allocate(new_specs).items():
            self._rings[key] = ring
            self._flat[key] = ring.reshape(self._num_workers * self._capacity, *ring.shape[2:])
        self._specs.update(new_specs)
        pieces = ring_slices(self._state.pos, rows, self._capacity)
        for key, ring in self._rings.items():
            value = chunk.get(key)
            for a, b, offset in pieces:
                ring[:, a:b] = fill_value(ring.dtype) if value is None else value[:, offset : offset + b - a]
        self._state = new_state

    def _allocate(self, specs: dict[str, KeySpec]) -> dict[str, np.ndarray]:
        shape = (self._num_workers, self._capacity)
        return {key: placeholder_array((*shape, *spec.shape), spec.dtype) for key, spec in specs.items()}

    def _store_disk(
        self, chunk: Mapping[str, np.ndarray], rows: int, new_specs: dict[str, KeySpec], new_state: RingState
    ) -> None:
        store = self._open_store()
        self._protect(new_state.total)
        for key, spec in new_specs.items():
            store.create_array(key, spec)
        self._specs.update(new_specs)
        for key, spec in self._specs.items():
            value = chunk.get(key)
            for a, b, offset in ring_slices(self._state.pos, rows, self._capacity):
                store.write(
                    key, a, b, fill_value(spec.dtype) if value is None else value[:, offset : offset + b - a]
                )
        self._state = new_state

    # -- persistence ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Write the rows stored since the last flush to Zarr, then commit the pointers.

        Order: (1) protect what the new rows overwrite (:meth:`_protect`: the anchor's rows go to
        the undo area, the committed state shrinks to its untouched rows) in one commit; (2) write
        the dirty rows as at most two contiguous slices per key (split at the wrap-around);
        (3) commit the new state. A crash at any point leaves a commit whose valid rows hold exactly
        the bytes they held when it was made, and the anchor (the newest checkpoint) restorable.
        """
        store = self._open_store()
        committed = store.committed
        advanced = self._state.total - committed.total
        new_keys = [key for key in self._specs if key not in store.committed_specs]
        if self.mode == "ram" and advanced > 0:
            self._protect(self._state.total)
            for key in new_keys:
                store.create_array(key, self._specs[key])
            count = min(advanced + 1, self._capacity)
            for key, ring in self._rings.items():
                for a, b, _ in ring_slices(committed.pos, count, self._capacity):
                    store.write(key, a, b, ring[:, a:b])
        if self._state != committed or new_keys:
            store.commit(self._state, self._specs)
            logger.debug("memory '%s' flushed: %s", self.name, self._state)

    def checkpoint_committed(self, state: Mapping[str, int] | None = None) -> None:
        """Say that a checkpoint holding ``state`` (default: the current state) is now durable.

        That state becomes the anchor: until the next call, every row a later flush (or a "disk"
        mode store) overwrites is first copied to the undo area, so loading with this state's
        pointers restores it byte for byte even after the ring wrapped, several times included.
        The previous anchor's undo area is deleted. Call it after the checkpoint is committed
        (the Runner does, right after writing the checkpoint folder), never before.

        Raises:
            ValueError: if ``state`` is not the flushed state (flush before saving the checkpoint).
        """
        target = self._state if state is None else self._ring_state(state)
        store = self._store
        if not store.is_open or target != store.committed:
            flushed = store.committed if store.is_open else "nothing"
            raise ValueError(
                f"memory '{self.name}': the checkpoint holds {target} but the flushed state is "
                f"{flushed}; call flush() before saving the checkpoint"
            )
        if store.anchor != target or store.undo_rows:
            store.set_anchor(target, store.committed_specs)

    def _protect(self, new_total: int) -> None:
        """Before writing rows up to ``new_total``, make the committed state and the anchor survive it.

        Rows the anchor held that are about to be overwritten for the first time since it are
        copied to the undo area; the committed state shrinks to the rows it keeps. Both are recorded
        in one commit, before any of those rows is written.
        """
        store = self._store
        committed = store.committed
        keep = surviving_size(committed.size, new_total - committed.total, self._capacity)
        undo = store.undo_rows
        if store.anchor is not None:
            undo = max(undo, rows_written_since(store.anchor, new_total, self._capacity))
            if undo > store.undo_rows:
                store.save_undo(undo)
        if keep < committed.size or undo > store.undo_rows:
            store.commit(replace(committed, size=keep), store.committed_specs, undo_rows=undo)

    def _open_store(self) -> ZarrStore:
        if not self._store.is_open:
            self._store.create()
        return self._store

    def load(self) -> None:
        """Restore the committed state from Zarr (and in "ram" mode the ring, byte for byte).

        Replaces what the memory held. A state given to :meth:`load_state_dict` earlier is restored
        instead (see there).

        Raises:
            FileNotFoundError: if nothing was flushed at :attr:`path`.
            ValueError: if the folder is not a memory of this ``num_workers`` and ``capacity``, or
                the given state is not one of its states.
        """
        state, specs = self._store.open()
        if self._pending is not None:
            pending, self._pending = self._pending, None
            state, specs = self._store.restore(pending)
            logger.info("memory '%s' restored to %s", self.name, state)
        rings: dict[str, np.ndarray] = {}
        if self.mode == "ram":
            rings = self._allocate(specs)
            rows = min(self._capacity, state.total + 1) if state.last_chunk_rows else 0
            for key, ring in rings.items():
                if rows:
                    self._store.read_into(key, ring[:, :rows], 0, rows)
        self._specs, self._rings, self._state = specs, rings, state
        self._flat = {
            k: r.reshape(self._num_workers * self._capacity, *r.shape[2:]) for k, r in rings.items()
        }
        logger.info("memory '%s' loaded from %s: %s", self.name, self.path, state)

    def state_dict(self) -> dict[str, int]:
        """Pointers and counters (never the data): ``pos``, ``size``, ``total``, ``last_chunk_rows``,
        ``num_workers``, ``capacity``."""
        return {**self._state.as_dict(), "num_workers": self._num_workers, "capacity": self._capacity}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Return to a saved state (a checkpoint's), in either order with :meth:`load`.

        From Zarr: the state of the newest checkpoint (the anchor, see :meth:`checkpoint_committed`)
        comes back byte for byte, with the rows later flushes overwrote restored from the undo
        area; an older state loses its oldest rows that later stores overwrote (see
        :meth:`RingState.rolled_back`). The state loaded becomes the anchor. A memory never flushed
        rolls back in RAM the same way.
        """
        target = self._ring_state(state)
        store = self._store
        if store.is_open and target.total <= store.committed.total:
            self._pending = target
            self.load()  # restore in Zarr, then reread the ring
        elif self._state.total == 0 and not store.is_open and target.total > 0:
            self._pending = target  # applied by load()
        else:
            new = self._state.rolled_back(target, self._capacity)
            if new != self._state:
                logger.info("memory '%s' rolled back from %s to %s", self.name, self._state, new)
            self._state = new

    def _ring_state(self, state: Mapping[str, int]) -> RingState:
        layout = (state.get("num_workers"), state.get("capacity"))
        if layout != (self._num_workers, self._capacity):
            raise ValueError(
                f"memory '{self.name}': saved state has num_workers={layout[0]}, capacity={layout[1]}, "
                f"this memory num_workers={self._num_workers}, capacity={self._capacity}"
            )
        return RingState(*(int(state[k]) for k in ("pos", "size", "total", "last_chunk_rows")))
