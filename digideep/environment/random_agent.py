"""An agent that acts uniformly at random: a baseline, a warm-start policy and a test double.

It implements the Explorer's side of the agent interface of ``docs/architecture.md`` by duck
typing (``action_generator``, ``random_action_generator``, ``initial_hidden_state``, ``state_dict``)
and learns nothing (``sample`` returns None, ``update`` returns no metrics).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from digideep.environment.wrappers.saveable import from_saveable, to_saveable

__all__ = ["RandomAgent"]


class RandomAgent:
    """Uniform random actions from ``action_space``, one per worker.

    Bounded ``Box`` dimensions are drawn uniformly in ``[low, high]``, unbounded ones as Gymnasium
    does (normal, or exponential from the one finite bound); ``Discrete``, ``MultiDiscrete`` and
    ``MultiBinary`` uniformly over their values; other spaces through Gymnasium's ``sample``.

    Args:
        name: the agent's name (its key in the env's Dict action space).
        session: unused; accepted for the ``AgentBase`` signature.
        observation_space: unused; accepted for the ``AgentBase`` signature.
        action_space: this agent's own action space.
        seed: seed of the agent's generator.
    """

    def __init__(
        self,
        name: str = "agent",
        session: Any = None,
        observation_space: spaces.Space | None = None,
        action_space: spaces.Space | None = None,
        seed: int = 0,
    ) -> None:
        if action_space is None:
            raise ValueError("RandomAgent needs its action_space (its entry of the env's Dict action space)")
        self.name = name
        self.session = session
        self.observation_space = observation_space
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)
        self._batched: dict[int, spaces.Space] = {}
        if isinstance(action_space, spaces.Box):
            self._dtype = np.dtype(action_space.dtype)
            self._low = np.where(action_space.bounded_below, action_space.low, 0.0)
            self._high = np.where(action_space.bounded_above, action_space.high, 0.0)
            self._bounded = bool(action_space.is_bounded("both"))
            # one number per bound when every dimension shares it: rng.uniform is faster with scalars
            if (
                self._bounded
                and np.all(self._low == self._low.flat[0])
                and np.all(self._high == self._high.flat[0])
            ):
                self._low, self._high = float(self._low.flat[0]), float(self._high.flat[0])

    def initial_hidden_state(self, num_workers: int) -> np.ndarray:
        """Zeros ``(W, 1)`` float32: a feed-forward agent's hidden state."""
        return np.zeros((num_workers, 1), dtype=np.float32)

    def random_action_generator(
        self, observations: Any, hidden_state: np.ndarray, masks: np.ndarray
    ) -> dict[str, Any]:
        """``{"actions": (W, *act_shape), "hidden_state": (W, 1) float32, "artifacts": {}}``.

        ``W`` is ``masks.shape[0]`` (masks: ``(W, 1)`` float32).
        """
        return {"actions": self._sample(masks.shape[0]), "hidden_state": hidden_state, "artifacts": {}}

    def action_generator(
        self, observations: Any, hidden_state: np.ndarray, masks: np.ndarray, deterministic: bool = False
    ) -> dict[str, Any]:
        """Same as :meth:`random_action_generator`; ``deterministic`` changes nothing."""
        return {"actions": self._sample(masks.shape[0]), "hidden_state": hidden_state, "artifacts": {}}

    def _sample(self, num_workers: int) -> np.ndarray:
        space, rng = self.action_space, self.rng
        if isinstance(space, spaces.Box):
            size = (num_workers, *space.shape)
            if self._bounded:
                return rng.uniform(self._low, self._high, size=size).astype(self._dtype, copy=False)
            below, above = space.bounded_below, space.bounded_above
            sample = rng.standard_normal(size)
            sample = np.where(below & above, rng.uniform(self._low, self._high, size), sample)
            sample = np.where(below & ~above, self._low + rng.exponential(size=size), sample)
            sample = np.where(~below & above, self._high - rng.exponential(size=size), sample)
            return sample.astype(self._dtype, copy=False)
        if isinstance(space, spaces.Discrete):
            return rng.integers(space.start, space.start + space.n, size=num_workers, dtype=np.int64)
        if isinstance(space, spaces.MultiDiscrete):
            return rng.integers(
                space.start, space.start + space.nvec, size=(num_workers, *space.shape), dtype=np.int64
            )
        if isinstance(space, spaces.MultiBinary):
            return rng.integers(0, 2, size=(num_workers, *space.shape), dtype=np.int64)
        batched = self._batched.get(num_workers)
        if batched is None:
            batched = self._batched[num_workers] = batch_space(space, num_workers)
            batched.seed(int(rng.integers(2**31)))
        return batched.sample()

    def sample(self, memory: Any) -> None:
        """Nothing to sample: a random agent does not learn."""
        return None

    def update(self, batches: Any) -> dict[str, float]:
        """No learning, no metrics."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The generator's state (saveable)."""
        return {"rng": to_saveable(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = from_saveable(state["rng"]).bit_generator.state
