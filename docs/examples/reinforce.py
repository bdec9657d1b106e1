"""REINFORCE, the worked example of the developer guide ("Writing a new agent").

Vanilla policy gradient (Williams 1992) for a Discrete action space, in four parts:

1. :class:`CategoricalPolicy`, a :class:`~digideep.agents.base.PolicyBase`: observations to a
   categorical distribution over actions;
2. :func:`discounted_returns`, a sampler unit ``unit(data, info) -> data``;
3. :class:`Reinforce`, an :class:`~digideep.agents.base.AgentBase`: acts for the Explorer, samples its
   memory through a :class:`~digideep.memory.Sampler`, updates, saves its state;
4. ``docs/examples/cartpole_reinforce.py``, the parameter file that names it.

The test ``tests/docs/test_examples.py`` trains it in a real Runner, checkpoints and resumes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from digideep.agents.base import AgentBase, PolicyBase
from digideep.agents.utils import make_adam, to_torch
from digideep.memory import Sampler, drop_final_prestep, flatten_first_two, get_last_chunk, select_keys

__all__ = ["CategoricalPolicy", "Reinforce", "discounted_returns"]


# --8<-- [start:policy]
class CategoricalPolicy(PolicyBase):
    """An MLP from ``(B, obs_dim) float32`` observations to the logits of ``num_actions`` actions."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = obs_dim
        for size in hidden_sizes:
            layers += [nn.Linear(width, size), nn.Tanh()]
            width = size
        layers.append(nn.Linear(width, num_actions))
        self.logits = nn.Sequential(*layers)

    def distribution(self, observations: torch.Tensor) -> torch.distributions.Categorical:
        """The action distribution for ``(B, obs_dim)`` observations."""
        return torch.distributions.Categorical(logits=self.logits(observations))

    def generate_actions(
        self,
        observations: torch.Tensor,
        hidden_state: torch.Tensor,
        masks: torch.Tensor,
        deterministic: bool,
    ) -> dict[str, Any]:
        """``(W,) int64`` actions; the hidden state ``(W, 1)`` passes through (feed-forward policy)."""
        dist = self.distribution(observations)
        actions = dist.probs.argmax(dim=-1) if deterministic else dist.sample()
        return {"actions": actions, "hidden_state": hidden_state, "artifacts": {}}


# --8<-- [end:policy]


# --8<-- [start:unit]
def discounted_returns(data: dict[str, np.ndarray], info: dict[str, Any]) -> dict[str, np.ndarray]:
    """Sampler unit: add ``"/returns"``, the discounted reward-to-go of every row of a chunk.

    Takes and returns a chunk ``{key: (W, T + 1, ...)}`` (it needs the time axis, so it runs before
    ``drop_final_prestep`` and ``flatten_first_two``). The return restarts after a row whose
    transition ended an episode (``/terminals`` or ``/truncations`` is 1.0) and is cut at the end
    of the chunk: REINFORCE has no critic to bootstrap from. Row ``T`` (the final prestep) is NaN.

    info:
        gamma (float): the discount.

    Returns:
        the input entries (not copied, not modified) plus ``"/returns": (W, T + 1, 1) float32``.
    """
    rewards = data["/rewards"][..., 0]  # (W, T + 1); row T is a NaN placeholder
    ended = np.maximum(data["/terminals"][..., 0], data["/truncations"][..., 0])
    returns = np.full_like(rewards, np.nan)
    running = np.zeros(rewards.shape[0], dtype=np.float32)
    for t in range(rewards.shape[1] - 2, -1, -1):
        running = rewards[:, t] + info["gamma"] * running * (1.0 - ended[:, t])
        returns[:, t] = running
    return {**data, "/returns": returns[..., None]}


# --8<-- [end:unit]


# --8<-- [start:agent]
class Reinforce(AgentBase):
    """REINFORCE with normalised returns as the advantage, one gradient step per chunk.

    Args:
        name: the agent's name (its key in the env's Dict action space and in trajectory keys).
        session: what picks the agent's device (the run's ``DeviceChoice``, see ``AgentBase``).
        observation_space: the single-env observation space (a Box or a Dict of Boxes).
        action_space: this agent's Discrete action space.
        lr: Adam learning rate.
        gamma: discount of the returns.
        ent_coef: weight of the entropy bonus.
        hidden_sizes: widths of the policy's hidden layers (tanh).
        seed: seed of the sampler's generator (unused by these units, saved for exact resume).
    """

    def __init__(
        self,
        name: str,
        session: Any,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        lr: float = 1e-2,
        gamma: float = 0.99,
        ent_coef: float = 0.0,
        hidden_sizes: Sequence[int] = (32,),
        seed: int = 0,
    ) -> None:
        super().__init__(name, session, observation_space, action_space)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(
                f"agent '{name}' (Reinforce) needs a Discrete action space, got {action_space}; "
                "use PPO or SAC for Box actions"
            )
        self.ent_coef = float(ent_coef)
        self.policy = CategoricalPolicy(self.obs.dim, int(action_space.n), hidden_sizes).to(self.device)
        self.optimizer = make_adam(self.policy.parameters(), lr, self.device)
        self.action_key = f"/agents/{name}/actions"
        keys = [*self.obs.keys("/observations"), self.action_key, "/rewards", "/terminals", "/truncations"]
        self.sampler = Sampler(
            [get_last_chunk, select_keys, discounted_returns, drop_final_prestep, flatten_first_two],
            {"keys": keys, "gamma": float(gamma), "seed": seed},
        )

    # -- the Explorer's side: AgentBase.action_generator converts numpy <-> torch and calls this
    def _act(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        return self.policy.generate_actions(obs, hidden, masks, deterministic)

    # -- the Runner's side
    def sample(self, memory: Any) -> dict[str, np.ndarray]:
        """The latest chunk with its returns, flattened: ``{key: (W * T, ...)}``."""
        return self.sampler(memory)

    def update(self, batches: Mapping[str, np.ndarray]) -> dict[str, float]:
        """One policy-gradient step on ``batches`` (from :meth:`sample`); returns the metrics."""
        data = to_torch(batches, self.device)
        observations = self.obs.from_batch(data, "/observations", leading=1)  # (N, obs_dim)
        returns = data["/returns"][:, 0]  # (N,)
        advantages = (returns - returns.mean()) / (returns.std() + 1e-8)
        dist = self.policy.distribution(observations)
        log_probs = dist.log_prob(data[self.action_key])  # (N,)
        entropy = dist.entropy().mean()
        loss = -(log_probs * advantages).mean() - self.ent_coef * entropy
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        self.iterations += 1
        return {
            "losses/policy_loss": loss.item(),
            "charts/entropy": entropy.item(),
            "charts/mean_return": returns.mean().item(),
        }

    # -- state: AgentBase.state_dict() saves these objects' state dicts and the counters
    def _stateful(self) -> dict[str, Any]:
        return {"policy": self.policy, "optimizer": self.optimizer, "sampler": self.sampler}


# --8<-- [end:agent]
