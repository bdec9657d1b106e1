"""Storages of a circular memory: where the ``(W, C, ...)`` array of each key lives.

A storage holds the data; the ring's pointers belong to the writer (:mod:`digideep.memory.writer`)
and are passed in. Three storages, built by :func:`make_storage` from a memory's arguments:

- :class:`RamStorage`: numpy rings only, nothing durable (``Memory(None, ...)``);
- :class:`ZarrStorage`: the Zarr group only (``mode="disk"``): stores write Zarr, sampling reads it;
  for memories larger than RAM, far slower (see ``docs/memory.md``);
- :class:`~digideep.memory.write_behind.WriteThroughStorage`: both (``mode="ram"``, the default):
  sampling reads the RAM ring, every stored chunk is written through to Zarr by a background thread.

Every storage has ``state_dict()`` (its layout: ``num_workers``, ``capacity``); the durable ones
restore a checkpoint's state with ``restore`` (see :class:`ZarrStorage`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import zarr

from digideep.memory.layout import KeySpec, fill_value
from digideep.memory.location import Location
from digideep.memory.ring import RingState, rows_written_since, surviving_size
from digideep.memory.zarr_store import ZarrStore
from digideep.utility.placeholders import placeholder_array

__all__ = ["Pieces", "RamStorage", "ZarrStorage", "make_storage"]

logger = logging.getLogger(__name__)

Pieces = list[tuple[int, int, int]]  # (ring_start, ring_stop, offset in the chunk), see ring_slices

DISK_CHUNK_BYTES = 1 << 18  # Zarr-only storage: chunks of one worker, about 256 KiB (sampling reads them)
WRITE_THROUGH_CHUNK_BYTES = 1 << 22  # write-through: chunks of all workers, about 4 MiB (few large PUTs)


class RamStorage:
    """Numpy rings in RAM, one ``(W, C, *row_shape)`` array per key, allocated when a key first comes.

    Args:
        num_workers: ``W``.
        capacity: ``C``, rows per worker.
        name: shown in messages.
    """

    durable = False

    def __init__(self, num_workers: int, capacity: int, name: str) -> None:
        self.num_workers, self.capacity, self.name = num_workers, capacity, name
        self.specs: dict[str, KeySpec] = {}
        self.rings: dict[str, np.ndarray] = {}
        self._flat: dict[str, np.ndarray] = {}  # (W * C, ...) views, for one np.take per key

    def array(self, key: str) -> np.ndarray:
        return self.rings[key]

    def write(
        self, chunk: Mapping[str, np.ndarray], pieces: Pieces, new_specs: dict[str, KeySpec], state: RingState
    ) -> None:
        """Allocate ``new_specs`` (placeholders everywhere), then write the chunk's rows at ``pieces``.

        A known key the chunk lacks gets the placeholder for those rows.
        """
        self._allocate(new_specs)
        for key, ring in self.rings.items():
            value = chunk.get(key)
            for a, b, offset in pieces:
                ring[:, a:b] = fill_value(ring.dtype) if value is None else value[:, offset : offset + b - a]

    def _allocate(self, specs: dict[str, KeySpec]) -> None:
        for key, spec in specs.items():
            ring = placeholder_array((self.num_workers, self.capacity, *spec.shape), spec.dtype)
            self.rings[key] = ring
            self._flat[key] = ring.reshape(self.num_workers * self.capacity, *spec.shape)
            self.specs[key] = spec

    def fill_from(self, store: ZarrStore, state: RingState, specs: dict[str, KeySpec]) -> None:
        """Replace the rings by the rows of ``store`` (every row written so far, byte for byte)."""
        self.specs, self.rings, self._flat = {}, {}, {}
        self._allocate(specs)
        rows = min(self.capacity, state.total + 1) if state.last_chunk_rows else 0
        if rows:
            store.read_many([(key, ring[:, :rows], 0, rows) for key, ring in self.rings.items()])

    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of every worker (a view of the ring)."""
        return self.rings[key][:, start:stop]

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows ``(workers[i], rows[i])``: one ``np.take``, ``(n, *row_shape)``."""
        return self._flat[key].take(workers * self.capacity + rows, axis=0)

    def flush(self, state: RingState) -> None:
        """Nothing durable to write."""

    def wait(self) -> None:
        """Nothing in flight."""

    def checkpoint_committed(self, state: RingState) -> None:
        """Nothing durable to keep."""

    def load(self) -> tuple[RingState, dict[str, KeySpec]]:
        raise FileNotFoundError(
            f"memory '{self.name}' keeps no durable copy (it was created without a path); nothing to load"
        )

    def restore(self, target: RingState, current: RingState) -> RingState:
        """Roll back in RAM: ``target`` shrunk to the rows stores after it left untouched."""
        return current.rolled_back(target, self.capacity)

    def close(self) -> None:
        """Nothing to release."""

    def state_dict(self) -> dict[str, int]:
        """The layout: ``num_workers`` and ``capacity``."""
        return {"num_workers": self.num_workers, "capacity": self.capacity}


class ZarrStorage:
    """The Zarr group of a memory and its crash-safe protocol (the anchor, the undo area, commits).

    Used alone (``mode="disk"``), :meth:`write` writes every chunk straight to Zarr and sampling reads
    Zarr. The write-through storage uses its :meth:`protect`, :meth:`commit` and the
    :class:`~digideep.memory.zarr_store.ZarrStore` to write in the background.

    Args:
        location: the group's place (local folder or fsspec URL).
        num_workers, capacity, name: the memory's.
        chunk_rows: rows per Zarr chunk, or ``None`` to size chunks to ``chunk_bytes``.
        chunk_bytes: target chunk size.
        chunk_workers: workers per chunk (1 or ``num_workers``).
        compression: ``None``, ``"zstd"`` or ``"lz4"``.
    """

    durable = True

    def __init__(
        self,
        location: Location,
        num_workers: int,
        capacity: int,
        name: str,
        chunk_rows: int | None = None,
        chunk_bytes: int = DISK_CHUNK_BYTES,
        chunk_workers: int = 1,
        compression: str | None = None,
    ) -> None:
        self.location, self.num_workers, self.capacity, self.name = location, num_workers, capacity, name
        self.store = ZarrStore(
            location, num_workers, capacity, chunk_rows, chunk_bytes, compression, name, chunk_workers
        )
        self.specs: dict[str, KeySpec] = {}  # keys stored so far, committed or not

    # -- the protocol ----------------------------------------------------------------------------
    def ensure_open(self) -> ZarrStore:
        """The store, created empty if this memory has not written it yet (refused if the place is taken)."""
        if not self.store.is_open:
            self.store.create()
        return self.store

    def add_keys(self, specs: dict[str, KeySpec]) -> None:
        """Create the arrays of keys first stored now (recreating leftovers of an interrupted write)."""
        for key, spec in specs.items():
            self.store.create_array(key, spec)
            self.specs[key] = spec

    def protect(self, new_total: int, undo_total: int | None = None) -> None:
        """Before writing rows up to ``new_total``, make the committed state and the anchor survive it.

        Rows the anchor held that are about to be overwritten for the first time since it (up to
        ``undo_total`` if given: copying ahead) are saved to the undo area, in whole chunks; the
        committed state shrinks to the rows it keeps. Both are recorded in one commit, before any
        of those rows is written.
        """
        store = self.store
        committed = store.committed
        keep = surviving_size(committed.size, new_total - committed.total, self.capacity)
        undo = store.undo_rows
        if store.anchor is not None:
            ahead = new_total if undo_total is None else max(new_total, undo_total)
            undo = max(undo, rows_written_since(store.anchor, ahead, self.capacity))
            if undo > store.undo_rows:
                store.save_undo(undo)
        if keep < committed.size or undo > store.undo_rows:
            store.commit(replace(committed, size=keep), store.committed_specs, undo_rows=undo)

    def commit(self, state: RingState, specs: Mapping[str, KeySpec]) -> None:
        """Commit ``state`` and ``specs`` (after their rows are written); nothing if unchanged."""
        store = self.ensure_open()
        if state != store.committed or any(key not in store.committed_specs for key in specs):
            store.commit(state, dict(specs))
            logger.debug("memory '%s' committed: %s", self.name, state)

    # -- the Storage interface (Zarr only) -------------------------------------------------------
    def array(self, key: str) -> zarr.Array:
        return self.store.arrays[key]

    def write(
        self, chunk: Mapping[str, np.ndarray], pieces: Pieces, new_specs: dict[str, KeySpec], state: RingState
    ) -> None:
        """Write the chunk's rows straight to Zarr (after :meth:`protect`); committed by :meth:`flush`."""
        self.ensure_open()
        self.protect(state.total)
        self.add_keys(new_specs)
        for key, spec in self.specs.items():
            value = chunk.get(key)
            for a, b, offset in pieces:
                self.store.write(
                    key, a, b, fill_value(spec.dtype) if value is None else value[:, offset : offset + b - a]
                )

    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        return self.store.read(key, start, stop)

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self.store.gather(key, workers, rows)

    def flush(self, state: RingState) -> None:
        self.commit(state, self.specs)

    def wait(self) -> None:
        """Writes are synchronous: nothing in flight."""

    def checkpoint_committed(self, state: RingState, drop: bool = True) -> bool:
        """Make ``state`` (the flushed state a checkpoint now holds) the anchor; drop the undo area.

        Args:
            state: the flushed state.
            drop: delete the old undo area now; ``False``: the caller calls
                :meth:`ZarrStore.drop_undo` before the next write.

        Returns:
            Whether the anchor changed (so there may be an old area to delete).

        Raises:
            ValueError: if ``state`` is not the flushed state.
        """
        store = self.store
        if not store.is_open or state != store.committed:
            flushed = store.committed if store.is_open else "nothing"
            raise ValueError(
                f"memory '{self.name}': the checkpoint holds {state} but the flushed state is "
                f"{flushed}; call flush() before saving the checkpoint"
            )
        if store.anchor != state or store.undo_rows:
            store.set_anchor(state, store.committed_specs, drop)
            return True
        return False

    def load(self, verify: bool = True) -> tuple[RingState, dict[str, KeySpec]]:
        """Open the group; return its committed state and keys.

        Args:
            verify: read every chunk and check its checksum (the write-through storage checks them
                as it fills its RAM ring, so it passes ``False``).

        Raises:
            DamagedMemoryError: a chunk fails its checksum.
        """
        state, specs = self.store.open()
        if verify:
            self.store.verify()
        self.specs = dict(specs)
        logger.info("memory '%s' loaded from %s: %s", self.name, self.location, state)
        return state, specs

    def restore(self, target: RingState, current: RingState, verify: bool = True) -> RingState:
        """Return the group to ``target`` (see :meth:`ZarrStore.restore`) and make it the anchor.

        ``verify``: read every chunk and check its checksum (see :meth:`load`).

        Raises:
            FileNotFoundError: if nothing was flushed at the location and ``target`` holds rows.
            ValueError: if ``target`` is not a state of this group.
            DamagedMemoryError: a chunk fails its checksum.
        """
        if not self.store.is_open:
            if target.total == 0 and not self.location.exists():
                return target  # nothing stored yet, nothing to restore
            self.store.open()
        state, specs = self.store.restore(target)
        if verify:
            self.store.verify()
        self.specs = dict(specs)
        logger.info("memory '%s' restored to %s", self.name, state)
        return state

    def close(self) -> None:
        """Nothing to release (files are closed after every write)."""

    def state_dict(self) -> dict[str, int]:
        """The layout: ``num_workers`` and ``capacity``."""
        return {"num_workers": self.num_workers, "capacity": self.capacity}


def make_storage(
    location: str | Any | None,
    num_workers: int,
    capacity: int,
    name: str,
    mode: str = "ram",
    chunk_rows: int | None = None,
    compression: str | None = None,
    write_behind: bool = True,
    max_pending: int = 16,
) -> Any:
    """The storage a memory's arguments ask for (see the module docstring).

    Raises:
        ValueError: for an unknown ``mode``, or ``mode="disk"`` without a location.
    """
    from digideep.memory.write_behind import WriteThroughStorage

    if mode not in ("ram", "disk"):
        raise ValueError(f"Memory mode must be 'ram' or 'disk', got {mode!r}")
    if location is None:
        if mode == "disk":
            raise ValueError("Memory mode 'disk' needs a path or URL for its Zarr group")
        return RamStorage(num_workers, capacity, name)
    place = location if isinstance(location, Location) else Location(location)
    if mode == "disk":
        return ZarrStorage(place, num_workers, capacity, name, chunk_rows, DISK_CHUNK_BYTES, 1, compression)
    durable = ZarrStorage(
        place, num_workers, capacity, name, chunk_rows, WRITE_THROUGH_CHUNK_BYTES, num_workers, compression
    )
    return WriteThroughStorage(RamStorage(num_workers, capacity, name), durable, write_behind, max_pending)
