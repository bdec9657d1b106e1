"""Small environments for the environment tests; importing this module registers them.

- ``DigiDictObs-v0``: nested Dict observations (``/position``, ``/sensors/velocity``,
  ``/sensors/count`` int64), Box actions, terminates when the point leaves [-1, 1]^2.
- ``DigiTwoAgent-v0``: two agents in one env: ``mover`` (Box) and ``switch`` (Discrete(3)).
- ``DigiOpaque-v0``: keeps its state where digideep cannot capture it (no ``state`` attribute).
- ``DigiImage-v0``: (H, W, C) uint8 image observations.
- ``DigiTicks-v0``: counts its steps from its first reset seed's parity; its info ``tick`` comes at
  every step, ``odd_tick`` (int64) only at odd counts (workers seeded apart alternate).

``nan_seed``: the worker whose reset seed equals it returns NaN observations from ``nan_step`` on,
so that a test can check that the Explorer names the right worker.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class _NanMixin:
    nan_seed: int | None
    nan_step: int
    _reset_seed: int | None

    def _nan_now(self, t: int) -> bool:
        return self.nan_seed is not None and self._reset_seed == self.nan_seed and t >= self.nan_step


class DictObsEnv(_NanMixin, gym.Env):
    """A point moved by its action; nested Dict observations."""

    def __init__(self, nan_seed: int | None = None, nan_step: int = 3) -> None:
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-2.0, 2.0, (2,), np.float32),
                "sensors": spaces.Dict(
                    {
                        "velocity": spaces.Box(-1.0, 1.0, (2,), np.float64),
                        "count": spaces.Box(0, 10_000, (1,), np.int64),
                    }
                ),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.nan_seed, self.nan_step, self._reset_seed = nan_seed, nan_step, None
        self.state = np.zeros(5)  # x, y, vx, vy, t

    def _obs(self) -> dict[str, Any]:
        x, y, vx, vy, t = self.state
        velocity = np.array([vx, vy]) if not self._nan_now(int(t)) else np.array([np.nan, vy])
        return {
            "position": np.array([x, y], np.float32),
            "sensors": {"velocity": velocity, "count": np.array([int(t)], np.int64)},
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._reset_seed = seed
        self.state = np.array([*self.np_random.uniform(-0.5, 0.5, 2), 0.0, 0.0, 0.0])
        return self._obs(), {"distance": float(np.hypot(*self.state[:2]))}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        velocity = np.clip(np.asarray(action, np.float64), -1.0, 1.0) + self.np_random.normal(0.0, 0.05, 2)
        self.state[:2] += 0.3 * velocity
        self.state[2:4] = np.clip(velocity, -1.0, 1.0)
        self.state[4] += 1
        distance = float(np.hypot(*self.state[:2]))
        terminated = bool(np.any(np.abs(self.state[:2]) > 1.0))
        return self._obs(), -distance, terminated, False, {"distance": distance, "steps": int(self.state[4])}


class TwoAgentEnv(_NanMixin, gym.Env):
    """``mover`` pushes a cart, ``switch`` picks a gear (0, 1, 2) that scales the push."""

    def __init__(self, nan_seed: int | None = None, nan_step: int = 3) -> None:
        self.observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
        self.action_space = spaces.Dict(
            {"mover": spaces.Box(-1.0, 1.0, (1,), np.float32), "switch": spaces.Discrete(3)}
        )
        self.nan_seed, self.nan_step, self._reset_seed = nan_seed, nan_step, None
        self.state = np.zeros(3)  # position, gear, t

    def _obs(self) -> np.ndarray:
        obs = self.state.astype(np.float32)
        if self._nan_now(int(self.state[2])):
            obs[0] = np.inf
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._reset_seed = seed
        self.state = np.array([self.np_random.uniform(-0.5, 0.5), 0.0, 0.0])
        return self._obs(), {}

    def step(self, action: dict[str, Any]) -> tuple[np.ndarray, float, bool, bool, dict]:
        gear = int(action["switch"])
        self.state[0] += 0.5 * gear * float(np.asarray(action["mover"]).reshape(-1)[0])
        self.state[1] = gear
        self.state[2] += 1
        terminated = bool(abs(self.state[0]) > 2.0)
        return self._obs(), float(-abs(self.state[0])), terminated, False, {}


class OpaqueEnv(gym.Env):
    """A random walk whose position lives in ``_hidden_position``: not capturable by digideep."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._hidden_position = 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._hidden_position = float(self.np_random.normal())
        return np.array([self._hidden_position], np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._hidden_position += float(np.asarray(action).reshape(-1)[0])
        return np.array([self._hidden_position], np.float32), 0.0, False, False, {}


class ImageEnv(gym.Env):
    """(8, 6, 3) uint8 frames whose brightness follows a counter."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (8, 6, 3), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.state = np.zeros(1)

    def _obs(self) -> np.ndarray:
        frame = np.zeros((8, 6, 3), np.uint8)
        frame[..., 0] = int(self.state[0]) % 256
        frame[0, 0, 1] = 7
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.state = np.zeros(1)
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.state[0] += 1 + int(action)
        return self._obs(), 1.0, False, False, {}


class TicksEnv(gym.Env):
    """A counter of steps from the parity of its reset seed, reported in its infos: ``tick`` always,
    ``odd_tick`` at odd counts."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.ticks = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.ticks = 0 if seed is None else seed % 2
        return np.array([self.ticks], np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.ticks += 1
        info: dict[str, Any] = {"tick": float(self.ticks)}
        if self.ticks % 2:
            info["odd_tick"] = np.int64(self.ticks)
        return np.array([self.ticks], np.float32), 0.0, False, False, info


_REGISTERED = {
    "DigiDictObs-v0": (DictObsEnv, 20),
    "DigiTwoAgent-v0": (TwoAgentEnv, 25),
    "DigiOpaque-v0": (OpaqueEnv, 50),
    "DigiImage-v0": (ImageEnv, 10),
    "DigiTicks-v0": (TicksEnv, 100),
}
for _id, (_cls, _limit) in _REGISTERED.items():
    if _id not in gym.registry:
        gym.register(_id, entry_point=_cls, max_episode_steps=_limit)
