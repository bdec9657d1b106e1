"""Where a memory's rows live: the arguments pick where sampling reads and whether rows come back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from digideep.memory import DurableMemory, Memory, RolloutMemory, TrajectoryMemory

from .chunks import make_chunk, stamps

W = 2


@pytest.mark.parametrize(
    ("with_path", "mode", "ring", "durable"),
    [(False, "ram", True, False), (True, "ram", True, True), (True, "disk", False, True)],
)
def test_the_arguments_pick_the_ring_and_the_log_and_durable_rows_come_back(
    tmp_path: Path, with_path: bool, mode: str, ring: bool, durable: bool
) -> None:
    path = tmp_path / "m.zarr" if with_path else None
    with Memory(path, W, 10, mode=mode) as memory:
        assert isinstance(memory, TrajectoryMemory)
        assert (memory.ring is not None, memory.log is not None) == (ring, durable)
        memory.store(make_chunk(W, 4, 0))
        memory.flush()
        rows = memory["/observations"][:, :5]
    if not durable:
        with pytest.raises(FileNotFoundError, match="no durable copy"):
            Memory(path, W, 10, mode=mode).load()
        return
    with Memory(path, W, 10, mode="disk") as reread:  # the log itself, whichever mode wrote it
        reread.load()
        assert np.array_equal(stamps(reread["/observations"][:, :5]), stamps(np.asarray(rows)))
        assert (reread.pos, reread.size) == (4, 4)


def test_the_rollout_memory_is_a_trajectory_memory_but_not_a_durable_one(tmp_path: Path) -> None:
    rollout = RolloutMemory(num_workers=2)
    assert isinstance(rollout, TrajectoryMemory)
    assert not isinstance(rollout, DurableMemory)
    with Memory(tmp_path / "m.zarr", W, 10) as memory:
        assert isinstance(memory, DurableMemory)


def test_only_a_ram_memory_with_a_log_runs_the_guard_before_its_background_writes(tmp_path: Path) -> None:
    calls: list[str] = []
    for path, mode in ((None, "ram"), (tmp_path / "d.zarr", "disk"), (tmp_path / "r.zarr", "ram")):
        with Memory(path, W, 10, mode=mode) as memory:
            memory.guard_writes(lambda mode=mode, path=path: calls.append(f"{mode}:{path is not None}"))
            memory.store(make_chunk(W, 4, 0))
            memory.flush()
    assert calls and set(calls) == {"ram:True"}
