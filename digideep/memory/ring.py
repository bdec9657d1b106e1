"""The RAM ring of a memory: one ``(W, C, *row_shape)`` numpy array per key, and its pointers.

Rows are counted per worker. A memory numbers every row it ever stored: row ``g`` (its *global*
row) lives at physical row ``g % C``. A chunk of ``T + 1`` rows stored when ``total`` rows were
stored goes to global rows ``total .. total + T``; its last row, the final prestep, is overwritten
by the next chunk's first row. So the state of a ring is (see :class:`RingState`):

- ``total``: rows stored so far (``T`` per chunk); the final prestep is global row ``total``;
- ``pos``: its physical row, ``total % C``;
- ``size``: valid transition rows, global rows ``total - size .. total - 1``
  (``size <= C - 1``), oldest first;
- ``last_chunk_rows``: ``T + 1`` of the latest chunk.

:class:`DeviceMirror` is the ring on a torch device (what the device sampler gathers from), kept
equal to the RAM ring: on the CPU the ring itself (``torch.from_numpy`` views), elsewhere a copy
that every store updates and a restore refills. It holds no state of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
import torch

from digideep.memory.layout import KeySpec, fill_value
from digideep.utility.placeholders import placeholder_array

logger = logging.getLogger(__name__)

FIELDS = ("pos", "size", "total", "last_chunk_rows")  # the pointers of a memory's state_dict

Pieces = list[tuple[int, int, int]]  # (ring_start, ring_stop, offset in the chunk), see ring_slices


@dataclass(frozen=True)
class RingState:
    """Pointers of a ring (see the module docstring)."""

    pos: int = 0
    size: int = 0
    total: int = 0
    last_chunk_rows: int = 0

    def advance(self, rows: int, capacity: int) -> RingState:
        """The state after storing a chunk of ``rows = T + 1`` rows (``2 <= rows <= capacity``)."""
        steps = rows - 1
        return RingState(
            pos=(self.pos + steps) % capacity,
            size=min(capacity - 1, self.size + steps),
            total=self.total + steps,
            last_chunk_rows=rows,
        )

    @property
    def first(self) -> int:
        """Global row of the oldest valid row."""
        return self.total - self.size

    def restored(self, target: RingState, capacity: int, first: int) -> RingState:
        """``target``, an earlier state of this ring's data, holding only the rows from global row
        ``first`` on (the oldest row the data still holds).

        Raises:
            ValueError: if ``target`` is newer than this state or not one of its predecessors.
        """
        if target.total > self.total:
            raise ValueError(
                f"memory state with total={target.total} rows is newer than the stored data "
                f"(total={self.total}); the memory was not flushed before that state was saved"
            )
        if target.pos != target.total % capacity:
            raise ValueError(
                f"memory state (pos={target.pos}, total={target.total}) does not belong to a memory of "
                f"capacity {capacity}; was it saved by another memory?"
            )
        size = max(0, min(target.size, target.total - first))
        return RingState(target.pos, size, target.total, target.last_chunk_rows)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def parse_state(state: Mapping[str, int]) -> RingState:
    """The :class:`RingState` of a ``state_dict`` (extra entries ignored).

    Raises:
        ValueError: naming the missing entry.
    """
    missing = [key for key in FIELDS if key not in state]
    if missing:
        raise ValueError(f"memory state lacks {missing}; it holds {sorted(state)}")
    return RingState(*(int(state[key]) for key in FIELDS))


def ring_slices(start: int, count: int, capacity: int) -> Pieces:
    """Split ``count`` rows from physical row ``start`` into at most two contiguous pieces.

    Returns:
        ``[(ring_start, ring_stop, source_offset), ...]``, split at the wrap-around;
        ``source_offset`` is where the piece starts among the ``count`` rows.

    Raises:
        ValueError: if ``count > capacity``.
    """
    if count > capacity:
        raise ValueError(f"cannot place {count} rows in a ring of capacity {capacity}")
    if count <= 0:
        return []
    stop = start + count
    if stop <= capacity:
        return [(start, stop, 0)]
    return [(start, capacity, 0), (0, stop - capacity, capacity - start)]


class Ring:
    """Numpy rings in RAM, one ``(W, C, *row_shape)`` array per key, allocated when a key first comes
    (its earlier rows the placeholder, :func:`~digideep.memory.layout.fill_value`).

    Args:
        num_workers: ``W``.
        capacity: ``C``, rows per worker.
    """

    def __init__(self, num_workers: int, capacity: int) -> None:
        self.num_workers, self.capacity = num_workers, capacity
        self.arrays: dict[str, np.ndarray] = {}
        self._flat: dict[str, np.ndarray] = {}  # (W * C, ...) views: one np.take per key

    def store(
        self, chunk: Mapping[str, np.ndarray], pieces: Pieces, new_specs: Mapping[str, KeySpec]
    ) -> None:
        """Write a validated chunk's rows at ``pieces``; a known key the chunk lacks gets the placeholder."""
        if new_specs:
            self.adopt({**self.arrays, **self.empty(new_specs)})
        for key, ring in self.arrays.items():
            value = chunk.get(key)
            for a, b, offset in pieces:
                ring[:, a:b] = fill_value(ring.dtype) if value is None else value[:, offset : offset + b - a]

    def empty(self, specs: Mapping[str, KeySpec]) -> dict[str, np.ndarray]:
        """New rings of ``specs``, placeholders everywhere."""
        shape = (self.num_workers, self.capacity)
        return {key: placeholder_array((*shape, *spec.shape), spec.dtype) for key, spec in specs.items()}

    def adopt(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Make ``arrays`` (``(W, C, ...)`` per key) the rings."""
        self.arrays = dict(arrays)
        rows = self.num_workers * self.capacity
        self._flat = {key: ring.reshape(rows, *ring.shape[2:]) for key, ring in self.arrays.items()}

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows ``(workers[i], rows[i])`` (physical): one ``np.take``, ``(n, *row_shape)``."""
        return self._flat[key].take(workers * self.capacity + rows, axis=0)


class DeviceMirror:
    """The rings of some keys of a memory's :class:`Ring` on ``device``, kept equal to them.

    Args:
        ring: the memory's RAM ring.
        device: where the mirror lives; ``cpu`` shares the ring's memory (no copy).
        name: the memory's, shown in messages.
        copy: keep a copy that stores fill (default: on every device but the CPU). ``True`` on the
            CPU runs the CUDA path (the fill and the row copies of each store) where there is no GPU.

    Attributes:
        rings: ``{key: (W, C, *row_shape) tensor}`` in the ring's dtype, on ``device``.
    """

    def __init__(self, ring: Ring, device: torch.device | str, name: str, copy: bool | None = None) -> None:
        self.ring, self.device, self.name = ring, torch.device(device), name
        self.copy = self.device.type != "cpu" if copy is None else bool(copy)
        self.rings: dict[str, torch.Tensor] = {}
        self._flat: dict[str, torch.Tensor] = {}

    def add(self, keys: Iterable[str]) -> None:
        """Mirror ``keys`` too (those not mirrored yet are filled from the ring now)."""
        for key in keys:
            if key not in self.rings:
                self._fill(key)

    def refill(self) -> None:
        """Fill every mirrored key from the ring again (after the memory returned to a saved state,
        whose ring may hold new arrays)."""
        for key in list(self.rings):
            self._fill(key)

    def write(self, pieces: Pieces) -> None:
        """Copy the rows a store just wrote, ``ring[:, start:stop]`` per piece (a no-op on the CPU)."""
        if not self.copy:
            return
        for key, tensor in self.rings.items():
            ring = self.ring.arrays[key]
            for start, stop, _ in pieces:
                tensor[:, start:stop].copy_(torch.from_numpy(ring[:, start:stop]))

    def gather(self, key: str, index: torch.Tensor) -> torch.Tensor:
        """Rows ``index`` of the flattened ring of ``key``: ``(n, *row_shape)``, a new tensor.

        Args:
            index: ``(n,) int64`` on :attr:`device`, ``worker * capacity + physical_row``.

        On the CPU, numpy's ``take`` on the same memory (faster than ``index_select`` there, see
        ``docs/memory.md``); elsewhere ``index_select``. The same rows either way.
        """
        flat = self._flat[key]
        if self.device.type == "cpu":
            return torch.from_numpy(flat.numpy().take(index.numpy(), axis=0))
        return flat.index_select(0, index)

    def _fill(self, key: str) -> None:
        ring = self.ring.arrays[key]
        host = torch.from_numpy(ring)
        tensor = host.to(self.device, copy=True) if self.copy else host
        self.rings[key] = tensor
        self._flat[key] = tensor.view(ring.shape[0] * ring.shape[1], *ring.shape[2:])
        if self.copy:
            logger.debug(
                "memory '%s': %s mirrored on %s (%d bytes)", self.name, key, self.device, ring.nbytes
            )
