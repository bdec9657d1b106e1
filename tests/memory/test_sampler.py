"""Samplers composed of units, the rollout memory and the debug units."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from digideep.memory import (
    Memory,
    RolloutMemory,
    Sampler,
    check_nan,
    chunk_stats,
    drop_final_prestep,
    flatten_first_two,
    get_last_chunk,
    inspect_shapes,
    minibatch_iterator,
    select_keys,
    uniform_transitions,
)
from digideep.utility.monitoring import monitor

from .chunks import make_chunk, stamps

OFF_POLICY_KEYS = [
    "/observations",
    "/agents/agent/actions",
    "/rewards",
    "/next_observations",
    "/terminals",
    "/truncations",
]


@pytest.fixture
def memory(tmp_path: Path) -> Memory:
    memory = Memory(tmp_path / "m.zarr", num_workers=3, capacity=16)
    for start in range(0, 25, 5):  # 25 steps into 16 rows: wrapped
        memory.store(make_chunk(3, 5, start))
    return memory


def test_uniform_transitions_draws_only_valid_rows_with_their_indices(memory: Memory) -> None:
    sampler = Sampler(
        [uniform_transitions], {"batch_size": 64, "num_batches": 50, "keys": OFF_POLICY_KEYS, "seed": 1}
    )
    batch = sampler(memory)
    assert set(batch) == {*OFF_POLICY_KEYS, "/indices"}
    assert batch["/observations"].shape == (50, 64, 3) and batch["/observations"].dtype == np.float32
    assert batch["/agents/agent/actions"].shape == (50, 64, 2) and batch["/rewards"].shape == (50, 64, 1)
    assert batch["/indices"].shape == (50, 64, 2) and batch["/indices"].dtype == np.int64
    workers, rows = batch["/indices"][..., 0], batch["/indices"][..., 1]
    assert set(np.unique(rows)) == set(memory.valid_rows())  # every valid row drawn, the prestep never
    assert set(np.unique(workers)) == {0, 1, 2}
    assert np.array_equal(batch["/observations"], memory["/observations"][workers, rows])
    assert not any(np.isnan(batch[k]).any() for k in OFF_POLICY_KEYS)
    # the next observation is that of the same worker's next step
    assert np.array_equal(stamps(batch["/next_observations"]), stamps(batch["/observations"]) + 1)


def test_uniform_transitions_is_reproducible_and_resumable(memory: Memory) -> None:
    info = {"batch_size": 8, "seed": 3}
    first = Sampler([uniform_transitions], info)
    first(memory)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = Sampler([uniform_transitions], info)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert np.array_equal(first(memory)["/indices"], resumed(memory)["/indices"])


def test_uniform_transitions_refuses_an_empty_memory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no transition"):
        Sampler([uniform_transitions], {"batch_size": 4})(Memory(tmp_path / "m.zarr", 1, 8))


def test_rollout_memory_keeps_the_latest_chunk_without_copying() -> None:
    rollout = RolloutMemory(num_workers=2)
    first, second = make_chunk(2, 6, 0), make_chunk(2, 6, 6)
    rollout.store(first)
    rollout.store(second)
    chunk = Sampler([get_last_chunk])(rollout)
    assert all(chunk[key] is second[key] for key in second)
    assert rollout.size == 6 and rollout["/rewards"].shape == (2, 7, 1)
    with pytest.raises(ValueError, match="num_workers=2"):
        rollout.store(make_chunk(3, 6, 12))
    assert rollout.last_chunk()["/observations"] is second["/observations"]
    keeper = RolloutMemory(num_workers=2, keep=2)
    for chunk in (first, second, make_chunk(2, 6, 12)):
        keeper.store(chunk)
    assert [stamps(c["/observations"])[0, 0] for c in keeper.chunks] == [6, 12]


def test_on_policy_pipeline_yields_shuffled_minibatches_of_the_rollout() -> None:
    rollout = RolloutMemory(num_workers=4)
    rollout.store(make_chunk(4, 8, 0))
    sampler = Sampler(
        [get_last_chunk, drop_final_prestep, flatten_first_two, check_nan, minibatch_iterator],
        {"num_minibatches": 4, "epochs": 2, "seed": 0},
    )
    minibatches = list(sampler(rollout))
    assert len(minibatches) == 8 and all(len(mb["/observations"]) == 8 for mb in minibatches)
    for epoch in (minibatches[:4], minibatches[4:]):
        seen = np.concatenate([stamps(mb["/observations"]) for mb in epoch])
        expected = (1000 * np.arange(4)[:, None] + np.arange(8)).ravel()
        assert sorted(seen) == sorted(expected)  # each epoch covers every transition once
    first = minibatches[0]
    assert np.array_equal(stamps(first["/observations"]), expected[first["/indices"]])
    by_size = list(
        Sampler([flatten_first_two, minibatch_iterator], {"minibatch_size": 5})(rollout.last_chunk())
    )
    assert [len(mb["/rewards"]) for mb in by_size] == [5] * 7 + [1]


def test_select_keys_keeps_indices(memory: Memory) -> None:
    batch = Sampler([uniform_transitions, select_keys], {"batch_size": 4, "keys": ["/rewards"]})(memory)
    assert set(batch) == {"/rewards", "/indices"}


def test_check_nan_catches_a_planted_nan_and_names_the_key(memory: Memory) -> None:
    memory["/next_observations"][1, memory.valid_rows()[3], 2] = np.nan
    sampler = Sampler([uniform_transitions, check_nan], {"batch_size": 512, "seed": 0})
    with pytest.raises(ValueError, match="'/next_observations'"):
        sampler(memory)
    rollout = RolloutMemory(num_workers=3)
    rollout.store(make_chunk(3, 5, 0))
    with pytest.raises(ValueError, match="'/next_observations'"):  # the final prestep's placeholders
        Sampler([get_last_chunk, check_nan])(rollout)
    skip = {"nan_skip_keys": ["/next_observations", "/rewards", "/terminals", "/truncations"]}
    chunk = Sampler([get_last_chunk, check_nan], skip)(rollout)
    bad = {"/x": np.ones((12, 2), np.float32)}
    bad["/x"][9, 1] = np.inf
    iterator = Sampler([minibatch_iterator, check_nan], {"minibatch_size": 12})(bad)
    with pytest.raises(ValueError, match=r"'/x'.*inf"):
        next(iterator)
    assert Sampler([get_last_chunk, drop_final_prestep, check_nan])(rollout).keys() == chunk.keys()


def test_debug_units_report_shapes_and_stats(memory: Memory, caplog: pytest.LogCaptureFixture) -> None:
    monitor.reset()
    sampler = Sampler(
        [uniform_transitions, inspect_shapes, chunk_stats], {"batch_size": 16, "keys": OFF_POLICY_KEYS}
    )
    with caplog.at_level(logging.INFO, logger="digideep.memory.sampler"):
        batch = sampler(memory)
    assert "/observations: (1, 16, 3) float32" in caplog.text
    summary = monitor.summary()
    mean = summary["/memory/stats/rewards/mean"]["mean"]
    assert mean == pytest.approx(float(batch["/rewards"].mean()), rel=1e-5)
    assert "/memory/stats/agents/agent/actions/std" in summary
    ints = {"/ids": np.array([[1, 3, np.iinfo(np.int64).min]], np.int64)}
    chunk_stats(ints, {"stats_prefix": "/t"})  # the integer placeholder is left out
    assert monitor.summary()["/t/ids/mean"]["mean"] == 2.0
    monitor.reset()


def test_sampler_refuses_non_callables_and_can_inject_units() -> None:
    with pytest.raises(TypeError, match="callables"):
        Sampler(["uniform_transitions"], {})
    sampler = Sampler([get_last_chunk])
    sampler.insert(1, check_nan)
    assert [u.__name__ for u in sampler.units] == ["get_last_chunk", "check_nan"]
