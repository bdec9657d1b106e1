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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from digideep.memory.layout import KeySpec, fill_value
from digideep.utility.placeholders import placeholder_array

__all__ = ["FIELDS", "Pieces", "Ring", "RingState", "parse_state", "ring_slices"]

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
