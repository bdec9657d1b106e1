"""Pointer arithmetic of the ring against a brute-force simulation of physical rows."""

from __future__ import annotations

import numpy as np
import pytest

from digideep.memory.ring import RingState, ring_slices


def logical_to_physical(logical: np.ndarray, state: RingState, capacity: int) -> np.ndarray:
    """Physical rows of valid rows ``logical``: global rows from ``state.first`` on, modulo the capacity."""
    return (state.first + logical) % capacity


def simulate(capacity: int, chunk_rows: list[int]) -> tuple[list[int | None], RingState]:
    """Write chunks into a list of stream positions (one worker); return it and the ring state."""
    physical: list[int | None] = [None] * capacity
    state, stream = RingState(), 0  # stream: index of the row being written in the unbroken stream
    for rows in chunk_rows:
        for t in range(rows):
            physical[(state.pos + t) % capacity] = stream + t
        stream += rows - 1  # the final prestep is rewritten by the next chunk's first row
        state = state.advance(rows, capacity)
    return physical, state


@pytest.mark.parametrize("seed", range(20))
def test_valid_rows_are_the_newest_transitions_before_the_final_prestep(seed: int) -> None:
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(2, 30))
    chunks = [int(r) for r in rng.integers(2, capacity + 1, size=int(rng.integers(1, 12)))]
    physical, state = simulate(capacity, chunks)
    latest = sum(r - 1 for r in chunks)
    assert physical[state.pos] == latest  # the final prestep sits at pos
    rows = logical_to_physical(np.arange(state.size), state, capacity)
    assert [physical[r] for r in rows] == list(range(latest - state.size, latest))
    assert state.size == min(capacity - 1, latest)


def test_ring_slices_split_at_the_wrap_around() -> None:
    assert ring_slices(3, 4, 10) == [(3, 7, 0)]
    assert ring_slices(8, 5, 10) == [(8, 10, 0), (0, 3, 2)]
    assert ring_slices(4, 10, 10) == [(4, 10, 0), (0, 4, 6)]
    assert ring_slices(0, 0, 10) == []
    with pytest.raises(ValueError, match="capacity"):
        ring_slices(0, 11, 10)


@pytest.mark.parametrize("seed", range(20))
def test_a_state_restored_in_ram_keeps_exactly_the_rows_later_stores_left_untouched(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    capacity = int(rng.integers(3, 25))
    before = [int(r) for r in rng.integers(2, capacity + 1, size=int(rng.integers(1, 6)))]
    after = [int(r) for r in rng.integers(2, capacity + 1, size=int(rng.integers(1, 6)))]
    old_physical, old = simulate(capacity, before)
    new_physical, new = simulate(capacity, before + after)
    rolled = new.restored(old, capacity, new.first)
    assert (rolled.pos, rolled.total) == (old.pos, old.total)
    old_rows = logical_to_physical(np.arange(old.size), old, capacity)
    untouched = [new_physical[r] == old_physical[r] for r in old_rows]
    # the untouched rows are exactly the newest `rolled.size` rows of the old window
    assert untouched == [False] * (old.size - rolled.size) + [True] * rolled.size


def test_restored_refuses_newer_or_foreign_states() -> None:
    state = RingState(pos=5, size=5, total=5, last_chunk_rows=6)
    with pytest.raises(ValueError, match="newer"):
        state.restored(RingState(pos=7, size=7, total=7, last_chunk_rows=3), 10, 0)
    with pytest.raises(ValueError, match="does not belong"):
        state.restored(RingState(pos=2, size=1, total=4, last_chunk_rows=2), 10, 0)
