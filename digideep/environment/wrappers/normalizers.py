"""Vector-env normalisers with shared statistics, a freeze switch and state dicts.

Both wrappers sit on the vector env (one set of statistics for all workers, like SB3's
``VecNormalize``) and work in ``AutoresetMode.SAME_STEP``, the mode digideep runs in.

- :class:`NormalizeObservation`: running mean/std per element, clipped. Gymnasium's vector
  ``NormalizeObservation`` refuses ``SAME_STEP`` and would leave ``infos["final_obs"]`` raw; this one
  normalises the final observations too (with the current statistics, without updating them).
- :class:`NormalizeReward`: Gymnasium's vector ``NormalizeReward`` (rewards divided by the std of the
  discounted return, the return restarting at every episode end), plus clipping and state dicts.

``frozen = True`` stops the statistics from updating; :class:`MakeEnvironment` freezes every
normaliser outside ``mode="train"``. ``state_dict()`` returns ``{"statistics": ..., "workers": ...}``:
the statistics are what a test explorer copies from the train explorer
(``Explorer.load_normalizer_state_dict``); the per-worker part (the running discounted returns)
belongs to one explorer and is saved in its checkpoint only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.utils import RunningMeanStd
from gymnasium.wrappers.vector import NormalizeReward as _GymNormalizeReward

from digideep.environment.wrappers.saveable import from_saveable, to_saveable

__all__ = ["NormalizeObservation", "NormalizeReward"]


class NormalizeObservation(VectorWrapper):
    """Normalise observations to zero mean and unit variance with running statistics, then clip.

    Works on a ``Box`` observation space or on a one-level ``Dict`` of ``Box`` spaces (apply
    :class:`~digideep.environment.wrappers.FlattenDictObservation` first for nested ones); ``keys``
    picks the Dict entries to normalise (default: every floating ``Box``).

    Args:
        env: the vector env.
        epsilon: added to the variance before the square root.
        clip: normalised values are clipped to ``[-clip, clip]``; None disables clipping.
        keys: Dict entries to normalise (Dict spaces only).

    Observations come out as float32.
    """

    def __init__(
        self,
        env: VectorEnv,
        epsilon: float = 1e-8,
        clip: float | None = 10.0,
        keys: list[str] | None = None,
    ) -> None:
        super().__init__(env)
        if epsilon <= 0:
            raise ValueError(f"NormalizeObservation: epsilon must be > 0, got {epsilon}")
        self.epsilon = float(epsilon)
        self.clip = None if clip is None else float(clip)
        self.frozen = False
        space = env.single_observation_space
        if isinstance(space, spaces.Dict):
            if keys is None:
                keys = [k for k, s in space.spaces.items() if _is_float_box(s)]
            for key in keys:
                if key not in space.spaces or not isinstance(space.spaces[key], spaces.Box):
                    raise ValueError(
                        f"NormalizeObservation: key '{key}' is not a Box entry of the observation space "
                        f"(entries: {list(space.spaces)}); flatten nested Dicts with FlattenDictObservation"
                    )
            self.keys: list[str] | None = list(keys)
            new = dict(space.spaces)
            new.update({k: self._normalized_box(space.spaces[k]) for k in self.keys})
            single = spaces.Dict(new)
            self.rms = {k: RunningMeanStd(shape=space.spaces[k].shape) for k in self.keys}
        elif isinstance(space, spaces.Box):
            if keys is not None:
                raise ValueError("NormalizeObservation: 'keys' applies to Dict observation spaces only")
            self.keys = None
            single = self._normalized_box(space)
            self.rms = {"": RunningMeanStd(shape=space.shape)}
        else:
            raise TypeError(
                f"NormalizeObservation needs a Box or Dict observation space, got {type(space).__name__}"
            )
        self.single_observation_space = single
        self.observation_space = batch_space(single, self.num_envs)

    def _normalized_box(self, box: spaces.Box) -> spaces.Box:
        bound = np.inf if self.clip is None else self.clip
        return spaces.Box(-bound, bound, shape=box.shape, dtype=np.float32)

    @property
    def update_running_mean(self) -> bool:
        """Gymnasium's name for ``not frozen``."""
        return not self.frozen

    @update_running_mean.setter
    def update_running_mean(self, value: bool) -> None:
        self.frozen = not value

    def _normalize(self, obs: Any, update: bool) -> Any:
        if self.keys is None:
            return self._normalize_array(self.rms[""], obs, update)
        out = dict(obs)
        for key in self.keys:
            out[key] = self._normalize_array(self.rms[key], obs[key], update)
        return out

    def _normalize_array(self, rms: RunningMeanStd, values: np.ndarray, update: bool) -> np.ndarray:
        if update:
            rms.update(values)
        normalized = ((values - rms.mean) / np.sqrt(rms.var + self.epsilon)).astype(np.float32)
        if self.clip is not None:
            np.clip(normalized, -self.clip, self.clip, out=normalized)
        return normalized

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._normalize(obs, not self.frozen), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        obs = self._normalize(obs, not self.frozen)
        if "final_obs" in infos:
            final = infos["final_obs"].copy()
            for i in np.flatnonzero(infos["_final_obs"]):
                final[i] = self._normalize_single(final[i])
            infos["final_obs"] = final
        return obs, rewards, terminations, truncations, infos

    def _normalize_single(self, obs: Any) -> Any:
        if self.keys is None:
            return self._normalize_array(self.rms[""], obs[None], False)[0]
        out = dict(obs)
        for key in self.keys:
            out[key] = self._normalize_array(self.rms[key], np.asarray(obs[key])[None], False)[0]
        return out

    def state_dict(self) -> dict[str, Any]:
        """``{"statistics": {key: {mean, var, count}}, "workers": {}}`` (tensors and numbers)."""
        stats = {k: {"mean": r.mean, "var": r.var, "count": float(r.count)} for k, r in self.rms.items()}
        return {"statistics": to_saveable(stats), "workers": {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load statistics (and nothing else: ``frozen`` keeps its value)."""
        stats = from_saveable(state["statistics"])
        if set(stats) != set(self.rms):
            raise ValueError(
                f"NormalizeObservation: state has keys {sorted(stats)}, this wrapper normalises {sorted(self.rms)}"
            )
        for key, saved in stats.items():
            rms = self.rms[key]
            if saved["mean"].shape != rms.mean.shape:
                raise ValueError(
                    f"NormalizeObservation: statistics of '{key}' have shape {saved['mean'].shape}, "
                    f"the observation has {rms.mean.shape}"
                )
            rms.mean, rms.var, rms.count = saved["mean"], saved["var"], saved["count"]


def _is_float_box(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Box) and np.dtype(space.dtype).kind == "f"


class NormalizeReward(_GymNormalizeReward):
    """Scale rewards by the running std of the discounted return; optionally clip.

    Gymnasium's vector ``NormalizeReward`` keeps one discounted return per worker,
    ``G <- gamma * G * (1 - terminated) + r``, updates the variance of ``G`` with every step and
    restarts ``G`` at every episode end (termination or truncation) in ``SAME_STEP`` mode; rewards are
    divided by ``sqrt(var(G) + epsilon)`` and not shifted by a mean.

    Args:
        env: the vector env.
        gamma: discount of the return whose std scales the rewards.
        epsilon: added to the variance before the square root.
        clip: scaled rewards are clipped to ``[-clip, clip]``; None disables clipping.
    """

    def __init__(self, env: VectorEnv, gamma: float = 0.99, epsilon: float = 1e-8, clip: float | None = 10.0):
        super().__init__(env, gamma=gamma, epsilon=epsilon)
        self.clip = None if clip is None else float(clip)

    @property
    def frozen(self) -> bool:
        """True when the return statistics no longer update."""
        return not self.update_running_mean

    @frozen.setter
    def frozen(self, value: bool) -> None:
        self.update_running_mean = not value

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rewards, terminations, truncations, infos = super().step(actions)
        if self.clip is not None:
            rewards = np.clip(rewards, -self.clip, self.clip)
        return obs, rewards, terminations, truncations, infos

    def state_dict(self) -> dict[str, Any]:
        """``{"statistics": {mean, var, count}, "workers": {accumulated_reward, prev_dones}}``."""
        rms = self.return_rms
        return {
            "statistics": to_saveable(
                {"mean": np.asarray(rms.mean), "var": np.asarray(rms.var), "count": float(rms.count)}
            ),
            "workers": to_saveable(
                {"accumulated_reward": self.accumulated_reward, "prev_dones": self._prev_dones}
            ),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load the statistics and, when present and shaped for this many workers, the running returns."""
        stats = from_saveable(state["statistics"])
        self.return_rms.mean, self.return_rms.var, self.return_rms.count = (
            stats["mean"],
            stats["var"],
            stats["count"],
        )
        workers = from_saveable(state.get("workers") or {})
        if "accumulated_reward" in workers:
            if workers["accumulated_reward"].shape != self.accumulated_reward.shape:
                raise ValueError(
                    f"NormalizeReward: saved returns are for {workers['accumulated_reward'].shape[0]} workers, "
                    f"this env has {self.num_envs}; load only the 'statistics' part"
                )
            self.accumulated_reward[...] = workers["accumulated_reward"]
            self._prev_dones[...] = workers["prev_dones"]
