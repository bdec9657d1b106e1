"""Chunk buffers reused across an explorer's chunks: each chunk is the caller's, and nothing of an
earlier chunk shows through in a later one."""

from __future__ import annotations

from typing import Any

import numpy as np

from .conftest import TEST_ENVS, assert_chunks_equal

SENTINEL = np.iinfo(np.int64).min


def test_each_chunk_is_the_callers_to_keep(make_explorer) -> None:
    explorer = make_explorer({"model_name": "Pendulum-v1", "max_episode_steps": 4}, n_steps=3)
    first = explorer.update()
    kept = {key: value.copy() for key, value in first.items()}
    second = explorer.update()
    assert_chunks_equal(first, kept)  # the second chunk was written without touching the first
    for key in first:
        assert not np.shares_memory(first[key], second[key]), key
        assert first[key].flags.c_contiguous, key


def test_an_info_a_step_lacks_is_a_placeholder_in_every_chunk(make_explorer) -> None:
    env = {"model_name": "DigiTicks-v0", "from_module": TEST_ENVS}
    explorer = make_explorer(env, num_workers=2, seed=0, n_steps=3)
    first, second = explorer.update(), explorer.update()
    # worker 0 counts 1, 2, 3 then 4, 5, 6; worker 1 counts 2, 3, 4 then 5, 6, 7: odd_tick comes
    # from one worker at a time, and where it came in the first chunk, not always in the second
    np.testing.assert_array_equal(first["/infos/tick"], [[1.0, 2.0, 3.0, np.nan], [2.0, 3.0, 4.0, np.nan]])
    np.testing.assert_array_equal(
        first["/infos/odd_tick"], [[1, SENTINEL, 3, SENTINEL], [SENTINEL, 3, SENTINEL, SENTINEL]]
    )
    np.testing.assert_array_equal(second["/infos/tick"], [[4.0, 5.0, 6.0, np.nan], [5.0, 6.0, 7.0, np.nan]])
    np.testing.assert_array_equal(
        second["/infos/odd_tick"], [[SENTINEL, 5, SENTINEL, SENTINEL], [5, SENTINEL, 7, SENTINEL]]
    )


class SometimesValueAgent:
    """Acts 0.0 and outputs the artifact ``value`` (its call count) at odd calls only."""

    def __init__(self) -> None:
        self.calls = 0

    def initial_hidden_state(self, num_workers: int) -> np.ndarray:
        return np.zeros((num_workers, 1), np.float32)

    def action_generator(self, observations: Any, hidden: np.ndarray, masks: np.ndarray, deterministic: bool):
        self.calls += 1
        artifacts = {"value": np.full((len(masks), 1), self.calls, np.float32)} if self.calls % 2 else {}
        return {
            "actions": np.zeros((len(masks), 1), np.float32),
            "hidden_state": hidden,
            "artifacts": artifacts,
        }


def test_an_artifact_an_agent_does_not_output_is_a_placeholder_in_every_chunk(make_explorer) -> None:
    env = {"model_name": "DigiTicks-v0", "from_module": TEST_ENVS}
    explorer = make_explorer(env, agents={"agent": SometimesValueAgent()}, num_workers=1, n_steps=2)
    first, second = explorer.update(), explorer.update()
    # calls 1..3 then 4..6 (two steps and the final prestep each): the value at odd calls only
    np.testing.assert_array_equal(first["/agents/agent/artifacts/value"][0, :, 0], [1, np.nan, 3])
    np.testing.assert_array_equal(second["/agents/agent/artifacts/value"][0, :, 0], [np.nan, 5, np.nan])
