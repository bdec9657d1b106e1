"""Deterministic actor-critic policy of TD3 and DDPG: a tanh actor and an ensemble of critics, with
target copies of both.

Actions are in normalized ``[-1, 1]`` units; the agent maps them to the env's bounds.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from digideep.agents.base import PolicyBase
from digideep.agents.networks import EnsembleMLP, mlp
from digideep.agents.noise import NoiseBase

__all__ = ["DeterministicPolicy"]


class DeterministicPolicy(PolicyBase):
    """``mu(s) = tanh(MLP(s))`` and ``num_critics`` Q-networks, each with a target copy.

    Args:
        obs_dim: observation features.
        act_dim: action features.
        hidden_sizes: hidden widths of actor and critics.
        num_critics: 1 for DDPG, 2 for TD3.
        activation: hidden activation.
        noise: exploration noise process (normalized units), or None.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int] = (256, 256),
        num_critics: int = 1,
        activation: str = "relu",
        noise: NoiseBase | None = None,
    ) -> None:
        super().__init__()
        self.actor = mlp(obs_dim, hidden_sizes, act_dim, activation, output_activation="tanh")
        self.critic = EnsembleMLP(obs_dim + act_dim, hidden_sizes, 1, num_critics, activation)
        self.actor_target = copy.deepcopy(self.actor)
        self.critic_target = copy.deepcopy(self.critic)
        self.actor_target.requires_grad_(False)
        self.critic_target.requires_grad_(False)
        self.noise = noise

    def q_values(self, obs: torch.Tensor, actions: torch.Tensor, target: bool = False) -> torch.Tensor:
        """``(B, E)`` critics (or their targets) at normalized ``actions``."""
        x = torch.cat([obs, actions], dim=-1)
        return self.critic_target(x) if target else self.critic(x)

    def target_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` the value the target bootstraps from: the minimum over the target critics (clipped
        double Q; the one critic in DDPG). A variant overrides it."""
        return self.q_values(obs, actions, target=True).min(dim=-1).values

    def actor_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` the value the actor maximizes: the first critic alone, its weights detached so that
        gradients reach ``actions`` only. A variant overrides it (e.g. the mean over the critics)."""
        critic: EnsembleMLP = self.unwrapped("critic")  # type: ignore[assignment]
        return critic.member(0, torch.cat([obs, actions], dim=-1), detach=True).squeeze(-1)

    def generate_actions(
        self, observations: torch.Tensor, hidden_state: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        """Normalized actions ``(W, A)``: ``mu(s)``, plus clipped noise unless deterministic."""
        actions = self.actor(observations)
        if not deterministic and self.noise is not None:
            actions = (actions + self.noise.sample(masks)).clamp(-1.0, 1.0)
        return {"actions": actions, "hidden_state": hidden_state, "artifacts": {}}
