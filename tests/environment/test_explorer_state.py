"""Explorer checkpoints: a restored explorer produces the chunk the original would have produced."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from .conftest import TEST_ENVS, assert_chunks_equal, random_agents, save_and_restore, weights_only_round_trip

NORMALIZERS = [
    {"name": "digideep.environment.wrappers.NormalizeObservation", "args": {"clip": 5.0}},
    {"name": "digideep.environment.wrappers.NormalizeReward", "args": {"gamma": 0.9}},
]

CASES = {
    # classic control, with both normalisers and a time limit inside the next chunk
    "pendulum": {"model_name": "Pendulum-v1", "max_episode_steps": 9, "vector_wrappers": NORMALIZERS},
    # MuJoCo physics mid-episode, gymnasium's own per-worker wrapper in the stack
    "halfcheetah": {
        "model_name": "HalfCheetah-v5",
        "max_episode_steps": 12,
        "wrappers": [{"name": "gymnasium.wrappers.FrameStackObservation", "args": {"stack_size": 2}}],
    },
    "dict_obs": {"model_name": "DigiDictObs-v0", "from_module": TEST_ENVS},
    "two_agents": {"model_name": "DigiTwoAgent-v0", "from_module": TEST_ENVS},
}


@pytest.mark.parametrize("case", list(CASES))
def test_restored_explorer_produces_the_same_next_chunk(make_explorer, case: str) -> None:
    original, restored, expected = save_and_restore(make_explorer, CASES[case], n_steps=7)
    assert (restored.steps, restored.timesteps, restored.n_episode) == (
        7,
        14,
        original.n_episode - _ended(expected),
    )
    assert_chunks_equal(restored.update(), expected)
    assert (restored.steps, restored.n_episode) == (original.steps, original.n_episode)


def _ended(chunk: dict[str, np.ndarray]) -> int:
    return int(np.nansum(chunk["/terminals"]) + np.nansum(chunk["/truncations"]))


def test_restored_async_explorer_produces_the_same_next_chunk(make_explorer) -> None:
    env = {"model_name": "CartPole-v1", "vectorization": "async"}
    agents = random_agents(env, seed=1)
    original = make_explorer(env, agents=agents, n_steps=15)
    original.update()
    saved = weights_only_round_trip(
        {"explorer": original.state_dict(), "agent": agents["agent"].state_dict()}
    )
    expected = original.update()

    restored_agents = random_agents(env, seed=2)
    restored_agents["agent"].load_state_dict(saved["agent"])
    restored = make_explorer(env, agents=restored_agents, seed=8, n_steps=15)
    restored.load_state_dict(saved["explorer"])
    assert_chunks_equal(restored.update(), expected)


def test_uncapturable_env_restarts_episodes_and_says_so(
    make_explorer, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"model_name": "DigiOpaque-v0", "from_module": TEST_ENVS}
    original = make_explorer(env, n_steps=5)
    original.update()
    saved = weights_only_round_trip(original.state_dict())
    assert saved["envs"] is None
    restored = make_explorer(env, n_steps=5)
    restored.update()
    with caplog.at_level(logging.WARNING, logger="digideep.environment.explorer_state"):
        restored.load_state_dict(saved)
    assert "cannot be captured or restored; the restored explorer starts new episodes" in caplog.text
    assert restored.steps == 5
    chunk = restored.update()
    np.testing.assert_array_equal(chunk["/masks"][:, 0], 0.0)


def test_state_for_another_number_of_workers_is_refused(make_explorer) -> None:
    env = {"model_name": "Pendulum-v1"}
    state = make_explorer(env, num_workers=2).state_dict()
    with pytest.raises(ValueError, match="state is for 2 workers, this 'train' explorer has 3"):
        make_explorer(env, num_workers=3).load_state_dict(state)
