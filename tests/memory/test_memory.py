"""The circular memory in RAM: overrun convention, wrap-around, late keys, dtypes, bad input."""

from __future__ import annotations

import io
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from digideep.memory import Memory

from .chunks import make_chunk, stamps


def fill(memory: Memory, chunk_steps: list[int], num_workers: int = 2) -> int:
    """Store chunks of the given step counts as one unbroken stream; return the latest step."""
    step = 0
    for steps in chunk_steps:
        memory.store(make_chunk(num_workers, steps, step))
        step += steps
    return step


def test_final_prestep_is_overwritten_by_the_next_chunk(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=2, capacity=20)
    memory.store(make_chunk(2, 4, 0))
    assert (memory.pos, memory.size) == (4, 4)
    assert np.isnan(memory["/rewards"][:, 4]).all()  # the final prestep's transition is a placeholder
    memory.store(make_chunk(2, 3, 4))
    assert (memory.pos, memory.size) == (7, 7)
    assert stamps(memory["/observations"][:, :8]).tolist() == [list(range(8)), list(range(1000, 1008))]
    assert not np.isnan(memory["/rewards"][:, :7]).any()  # row 4 now holds a real transition
    assert memory.valid_rows().tolist() == list(range(7))


def test_wrap_around_overwrites_the_oldest_rows(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=2, capacity=10)
    latest = fill(memory, [4, 4, 4, 3])  # 15 steps into 10 rows
    assert memory.size == 9 and memory.pos == latest % 10
    obs = memory["/observations"]
    rows = memory.valid_rows()
    assert stamps(obs[0, rows]).tolist() == list(range(latest - 9, latest))
    assert stamps(obs[1, rows]).tolist() == list(range(1000 + latest - 9, 1000 + latest))
    assert stamps(obs[0, memory.pos : memory.pos + 1]).tolist() == [latest]
    last = memory.last_chunk()
    assert stamps(last["/observations"][0]).tolist() == list(range(latest - 3, latest + 1))


def test_late_keys_are_back_filled_and_missing_keys_filled_with_placeholders(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=2, capacity=12)
    memory.store(make_chunk(2, 3, 0))
    chunk = make_chunk(2, 3, 3)
    chunk["/infos/count"] = np.full((2, 4, 1), 7, np.int32)
    chunk["/infos/success"] = np.ones((2, 4), bool)
    chunk["/infos/energy"] = np.ones((2, 4, 2), np.float64)
    del chunk["/masks"]
    memory.store(chunk)
    assert memory["/infos/count"].dtype == np.int32
    assert (memory["/infos/count"][:, :3] == np.iinfo(np.int32).min).all()
    assert (memory["/infos/count"][:, 3:7] == 7).all()
    assert not memory["/infos/success"][:, :3].any() and memory["/infos/success"][:, 3:7].all()
    assert memory["/infos/energy"].dtype == np.float64 and np.isnan(memory["/infos/energy"][:, :3]).all()
    assert (memory["/masks"][:, :3] == 1).all() and np.isnan(memory["/masks"][:, 3:7]).all()


def test_dtypes_and_shapes_are_preserved(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=3, capacity=8)
    chunk = {
        "/observations/image": np.zeros((3, 5, 4, 4, 3), np.uint8),
        "/observations/state": np.zeros((3, 5, 2), np.float16),
        "/agents/a/actions": np.zeros((3, 5), np.int64),
        "/terminals": np.zeros((3, 5, 1), bool),
    }
    memory.store(chunk)
    for key, value in chunk.items():
        assert memory[key].dtype == value.dtype and memory[key].shape == (3, 8, *value.shape[2:])
    assert memory.keys() == list(chunk)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c.update({"/observations": c["/observations"].astype(np.float64)}),
            "changed from float32",
        ),
        (lambda c: c.update({"/observations": c["/observations"][..., :2]}), r"changed from float32 \(3,\)"),
        (lambda c: c.update({k: v[:1] for k, v in c.items()}), "num_workers=2"),
        (lambda c: c.update({"/rewards": c["/rewards"][:, :3]}), "rows"),
        (lambda c: c.update({"/rewards": torch.zeros(2, 5, 1)}), "numpy array"),
        (lambda c: c.update({"/infos/name": np.array([["a"] * 5] * 2)}), "dtype"),
        (lambda c: c.update({"observations2": c["/observations"]}), "unix-style path"),
        (lambda c: c.update({"/rewards/extra": c["/rewards"]}), "array and a folder"),
        (lambda c: c.update({k: np.repeat(v, 3, axis=1) for k, v in c.items()}), "capacity"),
    ],
)
def test_bad_chunks_are_refused_and_leave_the_memory_unchanged(tmp_path: Path, change, message: str) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=2, capacity=12)
    fill(memory, [4, 4])
    before = {key: memory[key].copy() for key in memory}
    state, keys = memory.state_dict(), memory.keys()
    chunk = make_chunk(2, 4, 8)
    change(chunk)
    with pytest.raises((ValueError, TypeError), match=message):
        memory.store(chunk)
    assert memory.state_dict() == state and memory.keys() == keys
    for key, value in before.items():
        assert np.array_equal(memory[key], value, equal_nan=True)


def test_state_dict_holds_only_numbers_and_loads_with_weights_only(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=2, capacity=10)
    fill(memory, [4, 4, 4])
    buffer = io.BytesIO()
    torch.save(memory.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state == {"pos": 2, "size": 9, "total": 12, "last_chunk_rows": 5, "num_workers": 2, "capacity": 10}
    assert all(type(v) is int for v in state.values())


def test_constructor_refuses_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        Memory(tmp_path / "m.zarr", 1, 10, mode="ssd")
    with pytest.raises(ValueError, match="capacity"):
        Memory(tmp_path / "m.zarr", 1, 1)
    with pytest.raises(ValueError, match="num_workers"):
        Memory(tmp_path / "m.zarr", 0, 10)


def test_a_with_block_ends_the_background_writer_with_every_chunk_written(tmp_path: Path) -> None:
    """The block's end waits for Zarr: the folder can be removed right after it (docs/examples do)."""
    before = set(threading.enumerate())
    with Memory(tmp_path / "m.zarr", num_workers=2, capacity=10) as memory:
        fill(memory, [4, 4, 4])
        writers = [t for t in set(threading.enumerate()) - before if t.name.startswith("write-behind")]
        assert writers, "the memory writes behind on a thread of its own"
    assert not any(t.is_alive() for t in writers)
    shutil.rmtree(tmp_path / "m.zarr")  # raises if a write still lands in it
