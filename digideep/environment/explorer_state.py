"""The Explorer's checkpointable state: counters, current step, normalisers and the workers' envs.

Kept apart from :mod:`digideep.environment.explorer` so that the stepping loop stays short. Every
state dict here is encoded with :mod:`digideep.storage.codec` (tensors, numbers, strings, lists,
tuples and dicts only), so it loads with ``torch.load(..., weights_only=True)``.

Copying normaliser statistics from the train explorer into a test explorer (the Runner does this
before every test)::

    test_explorer.load_normalizer_state_dict(train_explorer.normalizer_state_dict())

This copies the running mean/variance only; the test explorer's normalisers stay frozen and keep
their own per-worker state (discounted returns), so the two explorers may have different numbers
of workers.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from digideep.storage.codec import decode, encode

__all__ = ["ExplorerStateMixin"]

log = logging.getLogger(__name__)


class ExplorerStateMixin:
    """``state_dict`` / ``load_state_dict`` and the normaliser copy for :class:`Explorer`."""

    envs: Any
    agents: dict[str, Any]
    mode: str
    num_workers: int
    steps: int
    n_episode: int
    timesteps: int
    was_reset: bool
    _seeded: bool
    _obs: Any
    _masks: np.ndarray
    _hidden: dict[str, np.ndarray]
    _ones: np.ndarray
    make_environment: Any

    def _capturable(self) -> bool:
        """Whether every worker's env state can be captured (asked after the envs were reset)."""
        return all(self.envs.unwrapped.call("capturable"))

    def _stateful_wrappers(self) -> list[tuple[str, Any]]:
        """Vector wrappers with ``state_dict``, outermost first, keyed ``"<depth>:<class>"``."""
        found, env, depth = [], self.envs, 0
        while env is not None and env is not self.envs.unwrapped:
            if callable(getattr(type(env), "state_dict", None)):
                found.append((f"{depth}:{type(env).__name__}", env))
            env, depth = getattr(env, "env", None), depth + 1
        return found

    def normalizer_state_dict(self) -> dict[str, Any]:
        """Statistics of the vector normalisers, ``{"<depth>:<class>": {"statistics": ...}}``.

        A vector wrapper takes part when its ``state_dict()`` has a ``"statistics"`` entry (as
        digideep's normalisers do). Gymnasium's per-worker normalisers are not copied: use
        digideep's vector ones where a test explorer needs the train statistics.
        """
        states = {key: w.state_dict() for key, w in self._stateful_wrappers()}
        return {key: {"statistics": s["statistics"]} for key, s in states.items() if "statistics" in s}

    def load_normalizer_state_dict(self, state: dict[str, Any]) -> None:
        """Load normaliser statistics (from this or another explorer of the same env params).

        Raises:
            ValueError: when the normaliser stacks differ.
        """
        wrappers = {k: w for k, w in self._stateful_wrappers() if "statistics" in w.state_dict()}
        if set(state) != set(wrappers):
            raise ValueError(
                f"normaliser state has {sorted(state)}, this explorer's env has {sorted(wrappers)}; "
                "both explorers need the same vector_wrappers"
            )
        for key, saved in state.items():
            wrappers[key].load_state_dict({"statistics": saved["statistics"]})

    def state_dict(self) -> dict[str, Any]:
        """Counters, current observations/masks/hidden states, normalisers and every worker's env state."""
        return {
            "counters": {
                "steps": self.steps,
                "n_episode": self.n_episode,
                "timesteps": self.timesteps,
                "was_reset": self.was_reset,
            },
            "num_workers": self.num_workers,
            "seeded": self._seeded,
            "observations": encode(self._obs),
            "masks": encode(self._masks),
            "hidden_state": encode(self._hidden),
            "wrappers": {key: w.state_dict() for key, w in self._stateful_wrappers()},
            "envs": list(self.envs.unwrapped.call("capture_state")) if self._capturable() else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; the next :meth:`update` then equals the original's.

        Where the environment's state was not captured (or does not apply), the workers start new
        episodes instead and a warning says so.

        Raises:
            ValueError: when the number of workers or the normaliser stacks differ.
        """
        if state["num_workers"] != self.num_workers:
            raise ValueError(
                f"explorer state is for {state['num_workers']} workers, this '{self.mode}' explorer has "
                f"{self.num_workers}; use the same num_workers to resume"
            )
        wrappers = dict(self._stateful_wrappers())
        if set(state["wrappers"]) != set(wrappers):
            raise ValueError(
                f"explorer state has normalisers {sorted(state['wrappers'])}, this env has {sorted(wrappers)}"
            )
        for key, saved in state["wrappers"].items():
            wrappers[key].load_state_dict(saved)
        counters = state["counters"]
        self.steps, self.n_episode = int(counters["steps"]), int(counters["n_episode"])
        self.timesteps, self._seeded = int(counters["timesteps"]), bool(state["seeded"])
        restored = False
        if state["envs"] is not None and self._capturable():
            base = self.envs.unwrapped
            base.set_attr("pending_state", list(state["envs"]))
            restored = all(base.call("apply_pending_state"))
        if restored:
            self._obs = decode(state["observations"])
            masks = decode(state["masks"])
            self._masks = self._ones if np.all(masks == 1.0) else masks
            self._hidden = {n: decode(h) for n, h in state["hidden_state"].items()}
            self.was_reset = bool(counters["was_reset"])
        else:
            log.warning(
                "explorer '%s': the state of environment '%s' cannot be captured or restored; "
                "the restored explorer starts new episodes",
                self.mode,
                self.make_environment.model_name,
            )
            self._seeded = True
            self.reset()
