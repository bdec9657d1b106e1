"""Observation and action transforms that Gymnasium lacks.

Use Gymnasium's own wrappers for the rest, named by import path in the params' wrapper stacks:
``gymnasium.wrappers.RescaleAction`` (``min_action=-1.0, max_action=1.0``) rescales actions to
[-1, 1], ``gymnasium.wrappers.FrameStackObservation`` (``stack_size=4``) stacks frames,
``gymnasium.wrappers.ClipAction`` clips them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorActionWrapper, VectorEnv

from digideep.environment.data_helpers import flatten_dict
from digideep.environment.spaces import flat_leaves

__all__ = ["FlattenDictObservation", "ImageTranspose", "SingleAgentAdapter", "StructuredObservation"]


class ImageTranspose(gym.ObservationWrapper):
    """Move the channel axis of image observations first: ``(H, W, C) -> (C, H, W)``, as torch wants.

    Applies to a ``Box`` observation of rank 3, or to the rank-3 ``Box`` entries of a one-level Dict
    (or those named in ``keys``).
    """

    def __init__(self, env: gym.Env, keys: list[str] | None = None) -> None:
        super().__init__(env)
        space = env.observation_space
        if isinstance(space, spaces.Dict):
            self.keys: list[str] | None = keys or [k for k, s in space.spaces.items() if _is_image(s)]
            new = dict(space.spaces)
            for key in self.keys:
                if key not in new or not _is_image(new[key]):
                    raise ValueError(
                        f"ImageTranspose: entry '{key}' is not a rank-3 Box; entries: {list(new)}"
                    )
                new[key] = _transposed(new[key])
            self.observation_space = spaces.Dict(new)
        elif _is_image(space):
            if keys is not None:
                raise ValueError("ImageTranspose: 'keys' applies to Dict observation spaces only")
            self.keys = None
            self.observation_space = _transposed(space)
        else:
            raise TypeError(f"ImageTranspose needs (H, W, C) Box observations, got {space}")

    def observation(self, observation: Any) -> Any:
        if self.keys is None:
            return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)))
        out = dict(observation)
        for key in self.keys:
            out[key] = np.ascontiguousarray(np.transpose(observation[key], (2, 0, 1)))
        return out


def _is_image(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Box) and len(space.shape) == 3


def _transposed(box: spaces.Box) -> spaces.Box:
    return spaces.Box(np.transpose(box.low, (2, 0, 1)), np.transpose(box.high, (2, 0, 1)), dtype=box.dtype)


class FlattenDictObservation(gym.ObservationWrapper):
    """Turn a nested Dict observation into a one-level Dict keyed by paths (``{"a": {"b": x}}`` -> ``{"/a/b": x}``).

    The Explorer stores Dict observations under ``/observations/a/b`` with or without this wrapper;
    use it before wrappers that need one-level Dicts (``NormalizeObservation``, ``ImageTranspose``).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not isinstance(env.observation_space, spaces.Dict):
            raise TypeError(
                f"FlattenDictObservation needs a Dict observation space, got {env.observation_space}"
            )
        self.observation_space = spaces.Dict(flat_leaves(env.observation_space))

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        return flatten_dict(observation)


class StructuredObservation(gym.ObservationWrapper):
    """Split a Gymnasium MuJoCo (v5) observation vector into a Dict of its parts: ``qpos``, ``qvel``, ...

    The parts and their sizes come from the env's ``observation_structure`` (every MuJoCo v5 env has
    one; ``skipped_qpos`` and empty parts are not in the vector and are left out), in the order the
    vector concatenates them. ``InvertedPendulum-v5`` gives ``Dict(qpos: Box(2,), qvel: Box(2,))``:
    a real Dict-observation environment for the agents' MultiInput path.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        structure = getattr(env.unwrapped, "observation_structure", None)
        space = env.observation_space
        if not isinstance(structure, dict) or not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise TypeError(
                "StructuredObservation needs a Gymnasium MuJoCo v5 env (observation_structure and a "
                f"vector observation), got {type(env.unwrapped).__name__} with {space}"
            )
        parts = [(k, int(n)) for k, n in structure.items() if k != "skipped_qpos" and int(n) > 0]
        if sum(n for _, n in parts) != space.shape[0]:
            raise ValueError(
                f"observation_structure {structure} does not add up to the observation size {space.shape[0]}"
            )
        self.parts, bounds, start = [], {}, 0
        for key, size in parts:
            self.parts.append((key, start, start + size))
            bounds[key] = spaces.Box(
                space.low[start : start + size], space.high[start : start + size], dtype=space.dtype
            )
            start += size
        self.observation_space = spaces.Dict(bounds)

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {key: observation[start:end] for key, start, end in self.parts}


class SingleAgentAdapter(VectorActionWrapper):
    """Make a single-agent vector env look multi-agent: its action space becomes ``Dict({agent_name: space})``.

    Every digideep env has a Dict action space keyed by agent name; ``MakeEnvironment`` adds this
    wrapper (outermost) when the environment's action space is not already a Dict of agents. List it
    in ``vector_wrappers`` yourself to choose ``agent_name`` or to wrap an env whose own action space
    is a Dict that belongs to one agent.

    Args:
        env: the vector env.
        agent_name: the name of the one agent.
    """

    def __init__(self, env: VectorEnv, agent_name: str = "agent") -> None:
        super().__init__(env)
        self.agent_name = agent_name
        self.single_action_space = spaces.Dict({agent_name: env.single_action_space})
        self.action_space = spaces.Dict({agent_name: env.action_space})

    def actions(self, actions: dict[str, Any]) -> Any:
        """``{agent_name: actions (W, *act_shape)}`` -> ``actions``."""
        return actions[self.agent_name]
