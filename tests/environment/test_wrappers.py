"""Normalisers (statistics, freezing, final observations, state dicts) and the worker state capture."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from digideep.environment.make_environment import MakeEnvironment
from digideep.environment.wrappers import EnvState, NormalizeObservation, NormalizeReward

from .conftest import weights_only_round_trip

NORMALIZED = {
    "model_name": "Pendulum-v1",
    "max_episode_steps": 5,
    "vector_wrappers": [
        {"name": "digideep.environment.wrappers.NormalizeObservation", "args": {"clip": 3.0}},
        {"name": "digideep.environment.wrappers.NormalizeReward"},
    ],
}


def _obs_rms(explorer) -> tuple[np.ndarray, np.ndarray, float]:
    rms = explorer.envs.env.env.rms[""]
    return rms.mean.copy(), rms.var.copy(), rms.count


def test_observation_statistics_update_in_train_mode_only(make_explorer) -> None:
    train = make_explorer(NORMALIZED, mode="train", n_steps=6)
    test = make_explorer(NORMALIZED, mode="test", num_workers=1, n_steps=6)
    before_train, before_test = _obs_rms(train), _obs_rms(test)
    train.update()
    test.update()
    assert _obs_rms(train)[2] == pytest.approx(before_train[2] + 2 * 6)  # 6 steps of 2 workers
    assert _obs_rms(test)[2] == before_test[2]
    np.testing.assert_array_equal(_obs_rms(test)[0], before_test[0])


def test_test_explorer_gets_the_train_statistics(make_explorer) -> None:
    train = make_explorer(NORMALIZED, mode="train", n_steps=20)
    test = make_explorer(NORMALIZED, mode="test", num_workers=1, n_steps=3)
    train.update()
    state = train.normalizer_state_dict()
    test.load_normalizer_state_dict(state)
    for a, b in zip(_obs_rms(train), _obs_rms(test), strict=True):
        np.testing.assert_array_equal(a, b)
    reward_train, reward_test = train.envs.env.return_rms, test.envs.env.return_rms
    assert (reward_test.mean, reward_test.var, reward_test.count) == (
        reward_train.mean,
        reward_train.var,
        reward_train.count,
    )
    assert test.envs.env.frozen and test.envs.env.env.frozen, "loading statistics keeps the test env frozen"
    chunk = test.update()
    assert _obs_rms(test)[2] == _obs_rms(train)[2]
    assert np.all(np.abs(chunk["/observations"]) <= 3.0)
    with pytest.raises(ValueError, match="both explorers need the same vector_wrappers"):
        make_explorer({"model_name": "Pendulum-v1"}).load_normalizer_state_dict(state)


class _Spy(gym.vector.VectorWrapper):
    """Keeps the last raw step result of the env below the normaliser."""

    def step(self, actions):
        result = self.env.step(actions)
        self.last = copy.deepcopy(result)
        return result


def test_final_observations_are_normalised_with_the_current_statistics() -> None:
    inner = SyncVectorEnv(
        [lambda: gym.make("Pendulum-v1", max_episode_steps=3)] * 2, autoreset_mode=AutoresetMode.SAME_STEP
    )
    spy = _Spy(inner)
    envs = NormalizeObservation(spy, clip=None)
    envs.reset(seed=0)
    for _ in range(3):
        obs, _, _, truncated, infos = envs.step(np.zeros((2, 1), np.float32))
    assert truncated.all()
    rms = envs.rms[""]
    raw_final = spy.last[4]["final_obs"]
    for w in range(2):
        expected = ((raw_final[w] - rms.mean) / np.sqrt(rms.var + envs.epsilon)).astype(np.float32)
        np.testing.assert_allclose(infos["final_obs"][w], expected, rtol=1e-6)
    np.testing.assert_allclose(obs, ((spy.last[0] - rms.mean) / np.sqrt(rms.var + envs.epsilon)), rtol=1e-6)
    envs.close()


def test_reward_normaliser_state_dict_round_trip() -> None:
    def make():
        inner = SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
        return NormalizeReward(inner, gamma=0.9, clip=1.0)

    a, b = make(), make()
    a.reset(seed=0)
    b.reset(seed=0)
    actions = np.ones((2, 1), np.float32)
    for _ in range(5):
        a.step(actions)
    b.load_state_dict(weights_only_round_trip(a.state_dict()))
    for _ in range(3):
        a.step(actions)  # a and b now differ in env state but share statistics and returns
    assert b.return_rms.count == pytest.approx(a.return_rms.count - 3 * 2)
    _, reward, *_ = a.step(actions)
    assert np.all(np.abs(reward) <= 1.0)
    a.close()
    b.close()


def test_env_state_capture_restores_mujoco_mid_episode() -> None:
    make = MakeEnvironment("Ant-v5")
    original, copy = make.make_env(), make.make_env()
    original.reset(seed=1)
    copy.reset(seed=2)
    rng = np.random.default_rng(0)
    for _ in range(5):
        original.step(rng.uniform(-1, 1, 8))
    assert isinstance(copy, EnvState) and copy.capturable()
    assert copy.restore_state(weights_only_round_trip(original.capture_state()))
    assert copy.get_wrapper_attr("_elapsed_steps") == 5
    for _ in range(10):  # Ant's reward reads contact forces computed before the step: exact only
        action = rng.uniform(-1, 1, 8)  # when the derived MuJoCo arrays are restored too
        a, b = original.step(action), copy.step(action)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:4] == b[1:4]
    original.close()
    copy.close()
