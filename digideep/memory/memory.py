"""The circular memory: a storage (where rows live) and a ring cursor (where the next chunk goes).

See the package docstring (:mod:`digideep.memory`) for the contract; :mod:`digideep.memory.storage`
for what a memory needs from its storage (and which storage its arguments pick);
:mod:`digideep.memory.durable` for the durable storages and the Zarr layout;
:class:`~digideep.memory.ring.RingCursor` for the pointers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zarr

from digideep.memory.durable.write_through import WriteThroughStorage
from digideep.memory.durable.zarr_storage import DISK_CHUNK_BYTES, WRITE_THROUGH_CHUNK_BYTES, ZarrStorage
from digideep.memory.layout import KeySpec, validate_chunk
from digideep.memory.mirror import DeviceMirror
from digideep.memory.ring import RingCursor, RingState, logical_to_physical, parse_state, ring_slices
from digideep.memory.storage import PreparedRestore, RamStorage, Storage
from digideep.storage.location import Location

__all__ = ["Memory"]

logger = logging.getLogger(__name__)


class Memory:
    """Circular memory of trajectory chunks, ``capacity`` rows (steps) per worker.

    Args:
        path: the Zarr group's place, a local folder or an fsspec URL (``s3://bucket/.../train.zarr``;
            the Runner passes ``session.memory_location(name).url``); ``None`` keeps the memory in RAM only.
        num_workers: ``W``, the explorer's worker count; every chunk must have it.
        capacity: ``C``, rows per worker (so ``W * C`` rows in all); at least 2.
        mode: where sampling reads. ``"ram"`` (default): a numpy ring; with a ``path`` every chunk
            is also written through to Zarr by a background thread (the memory is durable either
            way when it has a path). ``"disk"``: no ring, :meth:`store` writes Zarr and sampling
            reads Zarr (for memories larger than RAM, far slower, see ``docs/memory.md``).
        zarr_chunk_rows: rows per Zarr chunk; ``None``: at most 1/16 of the ring and about 4 MiB
            spanning all workers (``"ram"``) or 256 KiB of one worker (``"disk"``).
        compression: ``None`` (default), ``"zstd"`` or ``"lz4"`` (level 1); replay data barely
            compresses, so compression mostly costs time. ``"images"``: zstd for uint8 image keys
            only (Atari frame stacks: about 7x smaller on disk; the RAM ring still holds them whole).
        name: shown in messages and logs; defaults to the group's stem.
        write_behind: ``"ram"`` mode: write Zarr on a background thread (default) or in :meth:`store`.
        max_pending: ``"ram"`` mode: stored chunks that may wait for the background writer.
    """

    def __init__(
        self,
        path: str | Path | None,
        num_workers: int,
        capacity: int,
        mode: str = "ram",
        zarr_chunk_rows: int | None = None,
        compression: str | None = None,
        name: str | None = None,
        write_behind: bool = True,
        max_pending: int = 16,
    ) -> None:
        for arg, value, low in (("num_workers", num_workers, 1), ("capacity", capacity, 2)):
            if not isinstance(value, int | np.integer) or value < low:
                raise ValueError(f"Memory {arg} must be an integer >= {low}, got {value!r}")
        if zarr_chunk_rows is not None and zarr_chunk_rows < 1:
            raise ValueError(f"Memory zarr_chunk_rows must be >= 1 or None, got {zarr_chunk_rows!r}")
        location = None if path is None else Location(path)
        self.location = location
        self.name = name or (location.stem if location is not None else "memory")
        self.mode = mode
        self.storage = make_storage(
            location,
            int(num_workers),
            int(capacity),
            self.name,
            mode,
            zarr_chunk_rows,
            compression,
            write_behind,
            max_pending,
        )
        self.cursor = RingCursor(int(capacity))
        self.mirrors: dict[tuple[torch.device, bool | None], DeviceMirror] = {}

    @classmethod
    def from_params(cls, *, location: str, num_workers: int, name: str, **args: Any) -> Memory:
        """Build from a params ``memory`` entry: ``args`` plus what the Runner knows (see ``components``)."""
        return cls(location, num_workers=num_workers, name=name, **args)

    # -- reading -------------------------------------------------------------------------------
    @property
    def num_workers(self) -> int:
        return self.storage.num_workers

    @property
    def capacity(self) -> int:
        """Rows per worker."""
        return self.storage.capacity

    @property
    def size(self) -> int:
        """Valid transition rows per worker (the latest row, a final prestep, is not one)."""
        return self.cursor.state.size

    @property
    def pos(self) -> int:
        """Physical row of the latest row (the final prestep the next chunk overwrites)."""
        return self.cursor.state.pos

    @property
    def total(self) -> int:
        """Rows advanced since the memory was created (``T`` per chunk)."""
        return self.cursor.state.total

    @property
    def state(self) -> RingState:
        return self.cursor.state

    @property
    def path(self) -> str | None:
        """The Zarr group's place as given (a path or URL), ``None`` for a RAM-only memory."""
        return None if self.location is None else str(self.location)

    def keys(self) -> list[str]:
        """Flat keys stored so far, in the order they first appeared."""
        return list(self.storage.specs)

    def spec(self, key: str) -> KeySpec:
        """dtype and per-row shape of ``key``."""
        return self.storage.specs[self._known(key)]

    def __contains__(self, key: object) -> bool:
        return key in self.storage.specs

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.storage.specs))

    def __getitem__(self, key: str) -> np.ndarray | zarr.Array:
        """The ``(W, C, ...)`` ring of ``key``: a numpy array in "ram" mode, the Zarr array in "disk" mode.

        Only rows :meth:`valid_rows` are transitions; the row :attr:`pos` is a final prestep.
        """
        return self.storage.array(self._known(key))

    def __repr__(self) -> str:
        return (
            f"Memory({self.name!r}, mode={self.mode!r}, num_workers={self.num_workers}, "
            f"capacity={self.capacity}, size={self.size}, pos={self.pos}, keys={len(self.storage.specs)})"
        )

    def physical_rows(self, logical: np.ndarray) -> np.ndarray:
        """Physical rows of valid rows ``logical`` (int array, ``0`` = oldest .. ``size - 1`` = newest)."""
        return logical_to_physical(logical, self.cursor.state, self.capacity)

    def valid_rows(self) -> np.ndarray:
        """Physical rows of every valid transition, oldest first: ``(size,)`` int64."""
        return self.physical_rows(np.arange(self.size, dtype=np.int64))

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows ``(workers[i], rows[i])`` of ``key``: ``(n, *row_shape)``, a new array.

        One ``np.take`` on the ring in "ram" mode; a sorted Zarr read in "disk" mode.
        """
        return self.storage.gather(self._known(key), workers, rows)

    def last_chunk(self) -> dict[str, np.ndarray]:
        """The latest stored chunk, ``(W, T + 1, ...)`` per key (views of the ring unless it wraps)."""
        state = self.cursor.state
        if state.last_chunk_rows == 0:
            raise ValueError(f"memory '{self.name}' holds no chunk yet; store one first")
        start = (state.pos - state.last_chunk_rows + 1) % self.capacity
        pieces = ring_slices(start, state.last_chunk_rows, self.capacity)
        out = {}
        for key in self.storage.specs:
            parts = [self.storage.read(key, a, b) for a, b, _ in pieces]
            out[key] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return out

    def mirror(
        self, device: torch.device | str, keys: Sequence[str], copy: bool | None = None
    ) -> DeviceMirror:
        """The rings of ``keys`` on ``device`` (:class:`~digideep.memory.mirror.DeviceMirror`), which
        every later :meth:`store` keeps equal to the RAM ring; created (and filled) on the first call
        for a device, the same object later. On the CPU it is the RAM ring itself (no copy) unless
        ``copy`` (``DeviceMirror``'s: ``True`` runs the CUDA path on the CPU).

        Raises:
            KeyError: a key the memory has not stored yet.
            ValueError: a ``mode="disk"`` memory (no RAM ring).
        """
        device = torch.device(device)
        mirror = self.mirrors.get((device, copy)) or DeviceMirror(self.storage, device, self.name, copy)
        mirror.add([self._known(key) for key in keys])
        self.mirrors[device, copy] = mirror  # kept once filled: a refused mirror is never written
        return mirror

    def _known(self, key: str) -> str:
        if key not in self.storage.specs:
            raise KeyError(f"memory '{self.name}' has no key {key!r}; it holds {list(self.storage.specs)}")
        return key

    # -- storing -------------------------------------------------------------------------------
    def store(self, chunk: Mapping[str, np.ndarray]) -> None:
        """Append a chunk: ``(W, T + 1, ...)`` per key, the last row a final prestep.

        The chunk's first row overwrites the previous chunk's final prestep; when the ring is full
        the oldest rows are overwritten. Keys seen for the first time are back-filled with the nonify
        placeholder for earlier rows; keys this chunk lacks get the placeholder for its rows. In
        "ram" mode the rows are then written to Zarr in the background (see :meth:`flush`).

        Raises:
            TypeError, ValueError: if the chunk does not fit the memory (worker count, rows, a key's
                dtype or shape changed); nothing is changed then.
            Exception: the error of a background write that failed (see ``write_behind``).
        """
        rows, new_specs = validate_chunk(
            chunk, self.num_workers, self.storage.specs, self.capacity, self.name
        )
        pieces, new_state = self.cursor.place(rows)
        self.storage.write(chunk, pieces, new_specs, new_state)
        self.cursor.state = new_state
        for mirror in self.mirrors.values():
            mirror.write(pieces)

    # -- persistence ---------------------------------------------------------------------------
    def guard_writes(self, guard: Callable[[], None]) -> None:
        """Call ``guard()`` before every write to the durable copy; a write is skipped when it raises.

        The Runner passes the session's lease check, so that a host cut off from a session on
        object storage, whose session another host took over, never writes a chunk beside the new
        holder's: its background writer fails instead, and the next store raises that error. Only
        the write-through storage (``mode="ram"`` with a path) writes in the background and runs
        the guard (see :meth:`~digideep.memory.storage.Storage.guard_writes`).
        """
        self.storage.guard_writes(guard)

    def flush(self) -> None:
        """Make the stored rows durable: wait for the outstanding writes, then commit the pointers.

        Before Zarr rows are overwritten, the anchor's rows go to the undo area and the committed
        state shrinks to its untouched rows, in one commit; rows are written in whole chunks; the
        new state is committed last. A crash at any point leaves a commit whose valid rows hold
        exactly the bytes they held when it was made, and the anchor (the newest checkpoint)
        restorable. A memory without a path has nothing to flush.
        """
        self.storage.flush(self.cursor.state)

    def wait(self) -> None:
        """Wait until the background writer wrote every stored chunk (nothing is committed)."""
        self.storage.wait()

    def checkpoint_committed(self, state: Mapping[str, int] | None = None) -> None:
        """Say that a checkpoint holding ``state`` (default: the current state) is now durable.

        That state becomes the anchor: until the next call, every row a later write overwrites is
        first copied to the undo area, so :meth:`restore` with this state returns it byte for byte
        even after the ring wrapped, several times included. The previous anchor's undo area is
        deleted. Call it after the checkpoint is committed (the Runner does), never before.

        Raises:
            ValueError: if ``state`` is not the flushed state (flush before saving the checkpoint).
        """
        self.storage.checkpoint_committed(self.cursor.state if state is None else self._ring_state(state))

    def load(self) -> None:
        """Return to the last commit in Zarr (the ring too, byte for byte); replaces what the memory held.

        Raises:
            FileNotFoundError: if nothing was flushed at :attr:`path` (or the memory has no path).
            ValueError: if the group is not a memory of this ``num_workers`` and ``capacity``.
        """
        state, _ = self.storage.load()
        self.cursor.state = state
        self._refill_mirrors()

    def prepare_restore(self, state: Mapping[str, int]) -> PreparedRestore:
        """Read back and check what :meth:`restore` to ``state`` brings back, changing nothing (no
        file, no pointer): the chunk files it needs are listed, every chunk is read once and checked
        against its checksum (into the next RAM ring, which :meth:`restore` then takes as it is).

        A resume checks every memory this way before it restores any, so a refusal leaves the
        session as it was. ``prepared.state`` is the state the restore gives (``state`` with fewer
        rows when later stores overwrote some).

        Raises:
            ValueError: if ``state`` is of another layout or not a state of this memory's data.
            FileNotFoundError: if ``state`` holds rows but nothing was flushed at :attr:`path`.
            DamagedMemoryError: a chunk file is missing or a chunk fails its checksum; names them.
        """
        return self.storage.prepare_restore(self._ring_state(state), self.cursor.state)

    def restore(self, state: Mapping[str, int], prepared: PreparedRestore | None = None) -> None:
        """Return to a saved state (a checkpoint's), data included: the one call a resume needs.

        From Zarr: the state of the newest checkpoint (the anchor, see :meth:`checkpoint_committed`)
        comes back byte for byte, with the rows later writes overwrote restored from the undo area;
        an older state loses its oldest rows that later stores overwrote (see
        :meth:`RingState.rolled_back`). The state restored becomes the anchor. A memory without a
        path rolls back in RAM the same way. ``prepared``: :meth:`prepare_restore`'s for this
        ``state`` (made now when not given); nothing is changed before every check passed.

        Raises:
            ValueError: if ``state`` is of another layout or not a state of this memory's data.
            FileNotFoundError: if ``state`` holds rows but nothing was flushed at :attr:`path`.
            DamagedMemoryError: see :meth:`prepare_restore`.
        """
        target = self._ring_state(state)
        self.cursor.state = self.storage.restore(target, self.cursor.state, prepared)
        self._refill_mirrors()

    def _refill_mirrors(self) -> None:
        """The device mirrors from the ring again, after the memory returned to a saved state."""
        for mirror in self.mirrors.values():
            mirror.refill()

    def state_dict(self) -> dict[str, int]:
        """Pointers and counters (never the data): the cursor's ``pos``, ``size``, ``total``,
        ``last_chunk_rows`` and the storage's ``num_workers``, ``capacity``."""
        return {**self.cursor.state_dict(), **self.storage.state_dict()}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """The same as :meth:`restore` (a later :meth:`load` rereads the restored commit)."""
        self.restore(state)

    def close(self) -> None:
        """Wait for outstanding writes and end the background writer (it also ends with the memory)."""
        self.storage.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close on leaving a ``with`` block, so no background write outlives the block's folder."""
        self.close()

    def _ring_state(self, state: Mapping[str, int]) -> RingState:
        layout = (state.get("num_workers"), state.get("capacity"))
        if layout != (self.num_workers, self.capacity):
            raise ValueError(
                f"memory '{self.name}': saved state has num_workers={layout[0]}, capacity={layout[1]}, "
                f"this memory num_workers={self.num_workers}, capacity={self.capacity}"
            )
        return parse_state(state)


def make_storage(
    location: Location | None,
    num_workers: int,
    capacity: int,
    name: str,
    mode: str = "ram",
    chunk_rows: int | None = None,
    compression: str | None = None,
    write_behind: bool = True,
    max_pending: int = 16,
) -> Storage:
    """The storage a memory's arguments ask for (the table in :mod:`digideep.memory.storage`).

    Raises:
        ValueError: for an unknown ``mode``, or ``mode="disk"`` without a location.
    """
    if mode not in ("ram", "disk"):
        raise ValueError(f"Memory mode must be 'ram' or 'disk', got {mode!r}")
    if location is None:
        if mode == "disk":
            raise ValueError("Memory mode 'disk' needs a path or URL for its Zarr group")
        return RamStorage(num_workers, capacity, name)
    if mode == "disk":
        return ZarrStorage(
            location, num_workers, capacity, name, chunk_rows, DISK_CHUNK_BYTES, 1, compression
        )
    zarr_storage = ZarrStorage(
        location, num_workers, capacity, name, chunk_rows, WRITE_THROUGH_CHUNK_BYTES, num_workers, compression
    )
    return WriteThroughStorage(
        RamStorage(num_workers, capacity, name), zarr_storage, write_behind, max_pending
    )
