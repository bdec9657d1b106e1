"""What a memory needs from its storage: the :class:`Storage` contract, and the RAM storage.

A :class:`~digideep.memory.Memory` is a storage (where the ``(W, C, ...)`` array of each key lives)
plus a :class:`~digideep.memory.ring.RingCursor` (the pointers, passed to the storage as a
:class:`~digideep.memory.ring.RingState`). The memory validates a chunk, asks the cursor where it
goes, and hands the storage the rows and the state after them; everything else the memory does is
one call of this contract. Three storages implement it; the memory's arguments pick one:

==========================  ===========================  ===========  ==========================
storage                     ``Memory(...)``              durable      sampling reads
==========================  ===========================  ===========  ==========================
:class:`RamStorage`         ``path=None``                no           numpy rings
``WriteThroughStorage``     a path, ``mode="ram"``       yes          numpy rings (RAM)
``ZarrStorage``             a path, ``mode="disk"``      yes          Zarr
==========================  ===========================  ===========  ==========================

``mode`` names where **sampling reads**, not whether Zarr is written: a memory with a path is
always durable, and ``mode="ram"`` writes every chunk through to Zarr on a background thread while
sampling reads the RAM ring. The durable storages and their crash protocol (the Zarr group, the
undo area, the background writer) are the :mod:`digideep.memory.durable` package.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from digideep.memory.layout import KeySpec, fill_value
from digideep.memory.ring import RingState
from digideep.utility.placeholders import placeholder_array

__all__ = ["Pieces", "PreparedRestore", "RamStorage", "Storage"]

Pieces = list[tuple[int, int, int]]  # (ring_start, ring_stop, offset in the chunk), see ring_slices


@dataclass(frozen=True)
class PreparedRestore:
    """A restore read back and checked, nothing changed yet (:meth:`Storage.prepare_restore`).

    Attributes:
        target: the state asked for (a checkpoint's).
        state: the state the restore gives: ``target``, shrunk to the rows later stores left untouched.
        staged: the storage's own (what to copy back, the rows already read), for :meth:`Storage.restore`.
    """

    target: RingState
    state: RingState
    staged: Any = None

    @property
    def whole(self) -> bool:
        """Whether the restore gives ``target`` itself (no row of it was overwritten since)."""
        return self.state == self.target


class Storage(ABC):
    """Where a memory's rows live: the contract every storage of a memory implements.

    Rows are addressed by the physical ring row (``0 .. capacity - 1``) of every worker; the
    pointers are the memory's and come in as :class:`RingState`. ``specs`` holds the keys stored
    so far, in the order they first came.

    Args:
        num_workers: ``W``.
        capacity: ``C``, rows per worker.
        name: the memory's, shown in messages.
    """

    specs: dict[str, KeySpec]

    def __init__(self, num_workers: int, capacity: int, name: str) -> None:
        self.num_workers, self.capacity, self.name = num_workers, capacity, name

    @property
    @abstractmethod
    def durable(self) -> bool:
        """Whether stored rows survive the process (``flush``, ``load`` and ``restore`` read them back)."""

    # -- data ------------------------------------------------------------------------------------
    @abstractmethod
    def array(self, key: str) -> np.ndarray | zarr.Array:
        """The ``(W, C, *row_shape)`` array of ``key`` that sampling reads."""

    @abstractmethod
    def write(
        self, chunk: Mapping[str, np.ndarray], pieces: Pieces, new_specs: dict[str, KeySpec], state: RingState
    ) -> None:
        """Write a validated trajectory chunk's rows at ``pieces``; ``state`` is the state after it.

        ``new_specs`` are the keys the chunk brings for the first time (their earlier rows hold the
        placeholder); a known key the chunk lacks gets the placeholder for those rows.
        """

    @abstractmethod
    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of every worker: ``(W, stop - start, *row_shape)``."""

    @abstractmethod
    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows ``(workers[i], rows[i])``: ``(n, *row_shape)``, a new array."""

    # -- durability ------------------------------------------------------------------------------
    @abstractmethod
    def flush(self, state: RingState) -> None:
        """Make every row written so far durable, then commit ``state`` (nothing for RAM)."""

    @abstractmethod
    def wait(self) -> None:
        """Wait for writes still in flight (nothing is committed)."""

    @abstractmethod
    def checkpoint_committed(self, state: RingState) -> None:
        """``state`` (the flushed state) is now held by a durable checkpoint: make it the anchor.

        Raises:
            ValueError: if ``state`` is not the flushed state.
        """

    @abstractmethod
    def load(self) -> tuple[RingState, dict[str, KeySpec]]:
        """Return to the last commit; the committed state and keys.

        Raises:
            FileNotFoundError: if nothing was flushed (or the storage keeps nothing durable).
        """

    @abstractmethod
    def prepare_restore(self, target: RingState, current: RingState) -> PreparedRestore:
        """Read back and check what :meth:`restore` to ``target`` brings back, changing nothing.

        Raises:
            ValueError: if ``target`` is not a state of this storage's data.
            DamagedMemoryError: a durable copy lacks a chunk file or a chunk fails its checksum.
        """

    @abstractmethod
    def restore(
        self, target: RingState, current: RingState, prepared: PreparedRestore | None = None
    ) -> RingState:
        """Return to ``target`` (a checkpoint's state), data included; the state actually restored.

        ``prepared``: :meth:`prepare_restore`'s for the same ``target`` (made now if not given): every
        check was made before, and what it read is used, not read again.

        Raises:
            ValueError: if ``target`` is not a state of this storage's data.
            DamagedMemoryError: see :meth:`prepare_restore`.
        """

    @abstractmethod
    def guard_writes(self, guard: Callable[[], None]) -> None:
        """Run ``guard()`` before every write to the durable copy made in the background.

        Only a storage that writes behind the training thread runs it (see
        :meth:`digideep.memory.Memory.guard_writes`); the others write in :meth:`write`, on the
        caller's thread, and ignore it.
        """

    @abstractmethod
    def close(self) -> None:
        """Release what the storage holds (a background thread)."""

    def state_dict(self) -> dict[str, int]:
        """The layout: ``num_workers`` and ``capacity`` (ints)."""
        return {"num_workers": self.num_workers, "capacity": self.capacity}


class RamStorage(Storage):
    """Numpy rings in RAM, one ``(W, C, *row_shape)`` array per key, allocated when a key first comes.

    Args:
        num_workers: ``W``.
        capacity: ``C``, rows per worker.
        name: shown in messages.
    """

    def __init__(self, num_workers: int, capacity: int, name: str) -> None:
        super().__init__(num_workers, capacity, name)
        self.specs: dict[str, KeySpec] = {}
        self.rings: dict[str, np.ndarray] = {}
        self._flat: dict[str, np.ndarray] = {}  # (W * C, ...) views, for one np.take per key

    @property
    def durable(self) -> bool:
        return False

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

    def guard_writes(self, guard: Callable[[], None]) -> None:
        """Nothing is written in the background: the guard is not run."""

    def close(self) -> None:
        """Nothing to release."""

    def checkpoint_committed(self, state: RingState) -> None:
        """Nothing durable to keep."""

    def load(self) -> tuple[RingState, dict[str, KeySpec]]:
        raise FileNotFoundError(
            f"memory '{self.name}' keeps no durable copy (it was created without a path); nothing to load"
        )

    def prepare_restore(self, target: RingState, current: RingState) -> PreparedRestore:
        """Nothing to read: ``target`` shrunk to the rows stores after it left untouched."""
        return PreparedRestore(target, current.rolled_back(target, self.capacity))

    def restore(
        self, target: RingState, current: RingState, prepared: PreparedRestore | None = None
    ) -> RingState:
        """Roll back in RAM: ``target`` shrunk to the rows stores after it left untouched."""
        return (prepared or self.prepare_restore(target, current)).state

    def adopt(self, specs: dict[str, KeySpec], rings: dict[str, np.ndarray]) -> None:
        """Make ``rings`` (``(W, C, ...)`` per key of ``specs``, read back from a durable copy) the rings."""
        self.specs, self.rings = dict(specs), dict(rings)
        self._flat = {
            key: ring.reshape(self.num_workers * self.capacity, *ring.shape[2:])
            for key, ring in rings.items()
        }
