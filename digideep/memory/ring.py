"""Index arithmetic of the circular memory: pointers, the overrun convention, wrap-around slices.

Rows are counted per worker. A chunk of ``n = T + 1`` rows is written at physical rows
``pos .. pos + T`` (modulo the capacity ``C``); its last row, the final prestep, stays at the new
``pos`` and is overwritten by the next chunk's first row. The state of a ring is therefore three
integers (see :class:`RingState`):

- ``pos``: physical row of the latest row (a final prestep: not a valid transition);
- ``size``: number of valid transition rows, the ``size`` rows just before ``pos``
  (``0 <= size <= C - 1``), oldest first at ``(pos - size) % C``;
- ``total``: rows advanced since the memory was created (``T`` per chunk), a counter that orders
  states and tells how many rows were written between two of them.

While the ring has not wrapped, ``pos - size == 0``: the valid rows are exactly ``0 .. size - 1``.

:class:`RingCursor` holds a memory's pointers and says where its next chunk goes (TorchRL's writer);
the storage (:mod:`digideep.memory.storage`) writes the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "FIELDS",
    "RingCursor",
    "RingState",
    "logical_to_physical",
    "parse_state",
    "ring_slices",
    "rows_written_since",
    "surviving_size",
]

FIELDS = ("pos", "size", "total", "last_chunk_rows")  # the pointers of a memory's state_dict


@dataclass(frozen=True)
class RingState:
    """Pointers of a ring (see the module docstring). ``last_chunk_rows`` is ``T + 1`` of the latest chunk."""

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

    def rolled_back(self, target: RingState, capacity: int) -> RingState:
        """``target`` (an older state of the same ring), shrunk to the rows this state still holds.

        Rows stored after ``target`` overwrite its oldest rows once the ring wraps; those are dropped
        from the result, so every row the result calls valid holds exactly the bytes it held when
        ``target`` was current.

        Raises:
            ValueError: if ``target`` is newer than this state or is not one of its predecessors.
        """
        advanced = self.total - target.total
        if advanced < 0:
            raise ValueError(
                f"memory state with total={target.total} rows is newer than the stored data "
                f"(total={self.total}); the memory was not flushed before that state was saved"
            )
        if (target.pos + advanced) % capacity != self.pos:
            raise ValueError(
                f"memory state (pos={target.pos}, total={target.total}) does not belong to the stored "
                f"data (pos={self.pos}, total={self.total}); was it saved by another memory?"
            )
        size = min(target.size, surviving_size(target.size, advanced, capacity), self.size - advanced)
        return RingState(target.pos, max(0, size), target.total, target.last_chunk_rows)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def surviving_size(size: int, advanced: int, capacity: int) -> int:
    """Valid rows of a state left untouched after the ring advanced ``advanced`` rows past it.

    Advancing ``D`` rows writes the ``D + 1`` physical rows ``pos .. pos + D``; they overwrite the
    oldest valid rows once ``size + D + 1 > capacity``.
    """
    if advanced <= 0:
        return size
    return max(0, min(size, capacity - 1 - advanced))


def rows_written_since(anchor: RingState, total: int, capacity: int) -> int:
    """Physical rows written since ``anchor`` once the ring reached ``total``: ``pos ..`` on, circular.

    The first chunk after ``anchor`` overwrites its final prestep (row ``anchor.pos``), so advancing
    ``D > 0`` rows touches the ``D + 1`` rows from ``anchor.pos`` on, and every row once ``D + 1``
    reaches the capacity (the ring wrapped since ``anchor``, once or several times).
    """
    advanced = total - anchor.total
    return 0 if advanced <= 0 else min(capacity, advanced + 1)


def ring_slices(start: int, count: int, capacity: int) -> list[tuple[int, int, int]]:
    """Split ``count`` rows starting at physical row ``start`` into contiguous pieces.

    Returns:
        ``[(ring_start, ring_stop, source_offset), ...]``: at most two pieces, split at the
        wrap-around; ``source_offset`` is where the piece starts among the ``count`` rows.

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
    first = capacity - start
    return [(start, capacity, 0), (0, stop - capacity, first)]


def logical_to_physical(logical: np.ndarray, state: RingState, capacity: int) -> np.ndarray:
    """Physical rows of the valid rows ``logical`` (``0`` = oldest, ``state.size - 1`` = newest)."""
    rows = logical + (state.pos - state.size)
    if state.pos < state.size:  # the valid window wraps: fold the negative rows back
        rows %= capacity
    return rows


class RingCursor:
    """The pointers of a ring of ``capacity`` rows per worker and where its next chunk goes.

    Args:
        capacity: rows per worker.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.state = RingState()

    def place(self, rows: int) -> tuple[list[tuple[int, int, int]], RingState]:
        """Where a chunk of ``rows = T + 1`` rows goes, and the state after it.

        Returns:
            ``(pieces, new_state)``: at most two ``(ring_start, ring_stop, chunk_offset)`` pieces
            (split at the wrap-around), starting at ``pos`` (the previous final prestep).
        """
        return ring_slices(self.state.pos, rows, self.capacity), self.state.advance(rows, self.capacity)

    def state_dict(self) -> dict[str, int]:
        """``pos``, ``size``, ``total``, ``last_chunk_rows`` (ints)."""
        return self.state.as_dict()

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.state = parse_state(state)


def parse_state(state: Mapping[str, int]) -> RingState:
    """The :class:`RingState` of a ``state_dict`` (extra entries ignored).

    Raises:
        ValueError: naming the missing entry.
    """
    missing = [key for key in FIELDS if key not in state]
    if missing:
        raise ValueError(f"memory state lacks {missing}; it holds {sorted(state)}")
    return RingState(*(int(state[key]) for key in FIELDS))
