"""The ring writer: the cursor of a circular memory (TorchRL's writer), apart from where rows live.

It decides where the next chunk goes (:func:`~digideep.memory.ring.ring_slices` from ``pos``) and
holds the pointers (:class:`~digideep.memory.ring.RingState`); the storage writes the rows.
"""

from __future__ import annotations

from collections.abc import Mapping

from digideep.memory.ring import RingState, ring_slices

__all__ = ["FIELDS", "RingWriter"]

FIELDS = ("pos", "size", "total", "last_chunk_rows")


class RingWriter:
    """The pointers of a ring of ``capacity`` rows per worker (see :mod:`digideep.memory.ring`).

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
