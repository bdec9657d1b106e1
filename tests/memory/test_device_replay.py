"""Replay on the agent's device: the memory's device mirror and the device sampler.

The mirror runs three ways: the CPU's (the RAM ring itself), the CPU with ``copy=True`` (the CUDA
path: filled when created, rows copied by every store, refilled after a restore) and CUDA where this
machine has one.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from digideep.memory import (
    DeviceUniformTransitions,
    Memory,
    UniformTransitions,
    check_nan,
    chunk_stats,
    inspect_shapes,
    select_keys,
)
from digideep.utility.monitoring import monitor
from tests.helpers import CUDA

from .chunks import make_chunk, stamps

KEYS = ["/observations", "/agents/agent/actions", "/rewards", "/next_observations", "/terminals"]
MIRRORS = [
    pytest.param("cpu", None, id="cpu-ring-itself"),
    pytest.param("cpu", True, id="cpu-copy-as-cuda"),
    pytest.param("cuda", None, id="cuda", marks=pytest.mark.skipif(not CUDA, reason="needs a CUDA device")),
]
SAMPLER_DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="needs a CUDA device")),
]


def fill(memory: Memory, steps: list[int], num_workers: int = 3, start: int = 0) -> int:
    for count in steps:
        memory.store(make_chunk(num_workers, count, start))
        start += count
    return start


def assert_mirror_is_ring(memory: Memory, device: str, copy: bool | None) -> None:
    mirror = memory.mirror(device, KEYS, copy)
    for key in KEYS:
        tensor = mirror.rings[key]
        assert tensor.device.type == device and tuple(tensor.shape) == memory[key].shape
        np.testing.assert_array_equal(tensor.cpu().numpy(), memory[key], err_msg=key)


@pytest.mark.parametrize(("device", "copy"), MIRRORS)
def test_the_mirror_equals_the_ring_after_stores_that_wrap(
    tmp_path: Path, device: str, copy: bool | None
) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=3, capacity=16)
    fill(memory, [5, 4])
    mirror = memory.mirror(device, KEYS, copy)
    assert memory.mirror(device, KEYS, copy) is mirror  # created once, then kept by the memory
    fill(memory, [7, 6, 9, 3], start=9)  # 34 steps into 16 rows: wrapped twice, chunks split
    assert memory.total == 34 and memory.pos < 16
    assert_mirror_is_ring(memory, device, copy)
    observations = mirror.rings["/observations"]  # .numpy() only on the CPU (a CUDA run failed here)
    shares = observations.device.type == "cpu" and np.shares_memory(
        observations.numpy(), memory["/observations"]
    )
    assert shares == (device == "cpu" and not copy)


@pytest.mark.parametrize(("device", "copy"), MIRRORS)
def test_the_mirror_equals_the_ring_after_restore_and_load(
    tmp_path: Path, device: str, copy: bool | None
) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=3, capacity=16)
    fill(memory, [5, 6])
    memory.flush()
    saved = memory.state_dict()
    memory.checkpoint_committed()
    mirror = memory.mirror(device, KEYS, copy)
    fill(memory, [8, 7], start=11)  # overwrites rows of the checkpoint
    memory.restore(saved)
    assert memory.state_dict() == saved
    assert_mirror_is_ring(memory, device, copy)
    assert stamps(mirror.rings["/observations"][0].cpu().numpy()[memory.valid_rows()]).tolist() == list(
        range(11)
    )
    fill(memory, [4], start=11)
    memory.flush()
    memory.load()
    assert_mirror_is_ring(memory, device, copy)
    memory.close()


def test_a_zarr_only_memory_has_no_ring_to_mirror(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", num_workers=3, capacity=16, mode="disk")
    fill(memory, [5])
    with pytest.raises(ValueError, match="replay_device: host"):
        memory.mirror("cpu", KEYS)
    with pytest.raises(KeyError, match="no key '/nope'"):
        Memory(None, 3, 16).mirror("cpu", ["/nope"])


@pytest.fixture
def wrapped(tmp_path: Path) -> Memory:
    memory = Memory(tmp_path / "m.zarr", num_workers=3, capacity=16)
    fill(memory, [5, 5, 5, 5, 5])  # 25 steps into 16 rows: wrapped
    return memory


@pytest.mark.parametrize("device", SAMPLER_DEVICES)
def test_the_device_sampler_draws_valid_rows_on_its_device(wrapped: Memory, device: str) -> None:
    sampler = DeviceUniformTransitions(64, 50, keys=KEYS, seed=1, device=device)
    batch = sampler(wrapped)
    assert set(batch) == {*KEYS, "/indices"}
    assert all(value.device.type == device for value in batch.values())
    assert batch["/observations"].shape == (50, 64, 3) and batch["/observations"].dtype == torch.float32
    assert batch["/indices"].shape == (50, 64, 2) and batch["/indices"].dtype == torch.int64
    host = {key: value.cpu().numpy() for key, value in batch.items()}
    workers, rows = host["/indices"][..., 0], host["/indices"][..., 1]
    assert set(np.unique(rows)) == set(wrapped.valid_rows())  # every valid row drawn, the prestep never
    assert set(np.unique(workers)) == {0, 1, 2}
    for key in KEYS:
        np.testing.assert_array_equal(host[key], wrapped[key][workers, rows], err_msg=key)
    assert np.array_equal(stamps(host["/next_observations"]), stamps(host["/observations"]) + 1)


@pytest.mark.parametrize("device", SAMPLER_DEVICES)
def test_the_device_sampler_resumes_its_draws_from_a_weights_only_state(wrapped: Memory, device: str) -> None:
    first = DeviceUniformTransitions(8, 4, keys=KEYS, seed=3, device=device)
    first(wrapped)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state["generator"]["device"] == device and state["generator"]["state"].dtype == torch.uint8
    resumed = DeviceUniformTransitions(8, 4, keys=KEYS, seed=99, device=device)
    resumed.load_state_dict(state)
    expected, got = first(wrapped), resumed(wrapped)
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
    again = DeviceUniformTransitions(8, 4, keys=KEYS, seed=3, device=device)
    again(wrapped)
    assert torch.equal(again(wrapped)["/indices"], expected["/indices"])  # the seed alone repeats the run


def test_a_host_samplers_state_seeds_the_device_sampler_the_same_way_each_time(wrapped: Memory) -> None:
    """A run moved from host to device replay (or from CUDA to the CPU) continues deterministically."""
    host = UniformTransitions(8, 4, keys=KEYS, seed=3)
    host(wrapped)
    draws = []
    for _ in range(2):
        device = DeviceUniformTransitions(8, 4, keys=KEYS, seed=5, device="cpu")
        device.load_state_dict(host.state_dict())
        draws.append(device(wrapped)["/indices"])
    assert torch.equal(*draws)
    fresh = DeviceUniformTransitions(8, 4, keys=KEYS, seed=5, device="cpu")
    assert not torch.equal(fresh(wrapped)["/indices"], draws[0])
    host.load_state_dict(fresh.state_dict())  # the host sampler reads its numpy state and ignores the rest


def test_units_after_the_draw_get_tensors_and_the_debug_units_check_them(
    wrapped: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    monitor.reset()
    sampler = DeviceUniformTransitions(
        16, 2, keys=KEYS, seed=0, units=[select_keys, check_nan, inspect_shapes, chunk_stats]
    )
    sampler.info["keys"] = KEYS
    with caplog.at_level(logging.INFO, logger="digideep.memory.sampler"):
        batch = sampler(wrapped)
    assert "/observations: (2, 16, 3) torch.float32" in caplog.text
    rewards = monitor.summary()["/memory/stats/rewards/mean"]["mean"]
    assert rewards == pytest.approx(float(batch["/rewards"].double().mean()), rel=1e-5)
    monitor.reset()
    wrapped["/next_observations"][1, wrapped.valid_rows()[3], 2] = np.nan  # the CPU mirror sees it
    checked = DeviceUniformTransitions(512, 1, seed=0, units=[check_nan])
    with pytest.raises(ValueError, match=r"check_nan: key '/next_observations' \(1, 512, 3\) holds \d+ NaN"):
        checked(wrapped)
