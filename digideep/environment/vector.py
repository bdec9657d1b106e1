"""``LeanSyncVectorEnv``: Gymnasium's ``SyncVectorEnv`` with a cheaper ``step`` (the same results).

Why: with one worker, much of what the Explorer spends beside the simulator is the vector env's own
Python (docs/measurements.md gives the share): ``iterate`` and ``concatenate`` dispatch through
``functools.singledispatch`` on every call, and ``_add_info`` allocates two arrays per info key per
worker (one of them thrown away when the key's mask exists already). Its step, in
``AutoresetMode.SAME_STEP`` with a ``Box`` observation space and a ``Box``, ``Discrete``,
``MultiDiscrete`` or ``MultiBinary`` action space, here writes each worker's observation straight
into the batch and gathers the infos with one dictionary lookup per key. Any other case, and every
episode end's ``final_obs``/``final_info`` entries or a nested info, goes through Gymnasium's own
code.

The returned infos are equal, key for key, in the same order, with the same dtypes, to
``SyncVectorEnv``'s (``tests/environment/test_vector.py`` steps both side by side);
``bench/bench_agents.py`` times the Explorer with a random agent against the raw env.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

__all__ = ["LeanSyncVectorEnv"]

_ITERABLE_ACTIONS = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""Action spaces whose batch Gymnasium's ``iterate`` walks row by row (``iter(actions)``)."""

_SCALARS = (int, float, bool)


class LeanSyncVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv`` whose ``step`` skips the generic dispatch where it can (module doc).

    Takes the arguments of ``gymnasium.vector.SyncVectorEnv``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lean = (
            self.autoreset_mode == AutoresetMode.SAME_STEP
            and isinstance(self.single_observation_space, spaces.Box)
            and isinstance(self.single_action_space, _ITERABLE_ACTIONS)
        )

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every worker; reset the ones whose episode ended in the same call (``SAME_STEP``)."""
        if not self._lean:
            return super().step(actions)
        infos: dict[str, Any] = {}
        envs, batch = self.envs, self._observations
        env_obs, rewards, terminations, truncations = (
            self._env_obs,
            self._rewards,
            self._terminations,
            self._truncations,
        )
        for i, action in enumerate(actions):
            obs, rewards[i], terminations[i], truncations[i], env_info = envs[i].step(action)
            if terminations[i] or truncations[i]:
                self._add_info(infos, {"final_obs": obs, "final_info": env_info}, i)
                obs, env_info = envs[i].reset()
            env_obs[i] = obs
            batch[i] = obs
            self._gather(infos, env_info, i)
        self._autoreset_envs = np.logical_or(terminations, truncations)
        return (
            batch.copy() if self.copy else batch,
            rewards.copy(),
            terminations.copy(),
            truncations.copy(),
            infos,
        )

    def _gather(self, infos: dict[str, Any], env_info: dict[str, Any], i: int) -> None:
        """``self._add_info(infos, env_info, i)`` for flat infos of scalars and arrays, in place."""
        n = self.num_envs
        for key, value in env_info.items():
            array = infos.get(key)
            kind = type(value)
            if array is None and key != "final_obs":
                if kind in _SCALARS or issubclass(kind, np.number):
                    array = np.zeros(n, dtype=kind)
                elif kind is np.ndarray:
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
            if type(array) is not np.ndarray or array.dtype == object or isinstance(value, dict):
                # nested dicts, final_obs, objects: Gymnasium's own rules
                self._add_info(infos, {key: value}, i)
                continue
            mask = infos.get("_" + key)
            if mask is None:
                infos[key] = array
                infos["_" + key] = mask = np.zeros(n, dtype=np.bool_)
            array[i] = value
            mask[i] = True
