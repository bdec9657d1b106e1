"""LeanSyncVectorEnv gives what Gymnasium's SyncVectorEnv gives, step for step."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import RecordEpisodeStatistics

import tests.environment.envs  # noqa: F401 (registers DigiDictObs-v0 and DigiTwoAgent-v0)
from digideep.environment.vector import LeanSyncVectorEnv


class InfoZoo(gym.Env):
    """A counter whose infos hold every kind ``_add_info`` treats apart; episodes of 2 to 4 steps,
    some terminated and some truncated, and keys that only some workers or steps report."""

    observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = spaces.Discrete(3)

    def __init__(self) -> None:
        self.t, self.length = 0, 3

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(2, 5))
        return self._obs(), {"reset_flag": True, "start": np.array([1.5, -2.0])}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.length, self.np_random.random()], np.float32)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        info: dict[str, Any] = {
            "int": self.t,
            "float": 0.5 * self.t,
            "np_float32": np.float32(self.t),
            "np_bool": np.bool_(self.t % 2),
            "array": np.full((2, 2), self.t, np.int16),
            "text": f"step {self.t}",
            "nested": {"a": self.t, "deeper": {"b": np.float64(self.t)}},
        }
        if self.t % 2:
            info["odd_only"] = float(action)
        end = self.t >= self.length
        return (
            self._obs(),
            float(action) - 1.0,
            end and self.length % 2 == 0,
            end and self.length % 2 == 1,
            info,
        )


WALL_TIME = "/episode/t"
"""RecordEpisodeStatistics' episode wall time: of its own clock, equal only in type and shape."""


def assert_same(a: Any, b: Any, where: str = "") -> None:
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys (and their order) differ"
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, tuple | list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        if a.dtype == object:
            for x, y in zip(a, b, strict=True):
                assert_same(x, y, where)
        else:
            if not where.endswith(WALL_TIME):
                np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, where


def side_by_side(make: Any, workers: int, steps: int, actions: Any) -> bool:
    """Step both vector envs of ``workers`` copies of ``make``; return whether the lean step ran."""
    fns = [make] * workers
    lean = LeanSyncVectorEnv(fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
    gym_envs = SyncVectorEnv(fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        assert_same(lean.reset(seed=3), gym_envs.reset(seed=3), "reset")
        for t in range(steps):
            action = actions(lean.action_space, t)
            ours, theirs = lean.step(action), gym_envs.step(action)
            for name, x, y in zip(
                ("obs", "rewards", "terminations", "truncations", "infos"), ours, theirs, strict=True
            ):
                assert_same(x, y, f"step {t} {name}")
    finally:
        lean.close()
        gym_envs.close()
    return lean._lean


def seeded_samples(space: spaces.Space, t: int) -> Any:
    space.seed(t)
    return space.sample()


@pytest.mark.parametrize("workers", [1, 3])
def test_every_kind_of_info_and_every_episode_end_come_out_as_gymnasiums(workers: int) -> None:
    assert side_by_side(InfoZoo, workers, 25, seeded_samples)


def test_a_mujoco_env_with_episode_statistics_comes_out_as_gymnasiums() -> None:
    def make() -> gym.Env:
        return RecordEpisodeStatistics(gym.make("HalfCheetah-v5", max_episode_steps=7))

    assert side_by_side(make, 2, 30, seeded_samples)


@pytest.mark.parametrize("env_id", ["DigiDictObs-v0", "DigiTwoAgent-v0"])
def test_dict_spaces_take_gymnasiums_own_step(env_id: str) -> None:
    assert not side_by_side(lambda: gym.make(env_id), 2, 20, seeded_samples)
