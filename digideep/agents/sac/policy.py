"""SAC policy: a tanh-squashed Gaussian actor and twin critics with a target copy.

Actions are in normalized ``[-1, 1]`` units; the agent maps them to the env's bounds.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from digideep.agents.base import PolicyBase
from digideep.agents.networks import EnsembleMLP, mlp

__all__ = ["LOG_STD_MAX", "LOG_STD_MIN", "SACPolicy", "squashed_gaussian"]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SB3's clamp of the actor's log-std
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


def squashed_gaussian(
    mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterized sample ``a = tanh(mean + std * noise)`` and its log-density.

    ``log pi(a) = sum_d [log N(u_d; mean, std) - log(1 - tanh(u_d)^2)]``, with the stable form
    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``.

    Args:
        mean: ``(B, A)``.
        log_std: ``(B, A)``.
        noise: ``(B, A)`` standard normal draws.

    Returns:
        ``(actions (B, A) in (-1, 1), log_prob (B,))``.
    """
    u = mean + log_std.exp() * noise
    gaussian = -0.5 * noise.pow(2) - log_std - _HALF_LOG_2PI
    correction = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))
    return torch.tanh(u), (gaussian - correction).sum(dim=-1)


class SACPolicy(PolicyBase):
    """Tanh-Gaussian actor ``obs -> (mean, log_std)`` and ``num_critics`` Q-networks in one ensemble.

    Args:
        obs_dim: observation features.
        act_dim: action features.
        hidden_sizes: hidden widths of actor and critics (SB3/CleanRL: 256, 256).
        num_critics: critics in the ensemble (2: clipped double Q).
        activation: hidden activation.
        initial_alpha: initial entropy temperature (``log_alpha`` is a parameter of the policy).
        learn_alpha: whether ``log_alpha`` requires gradients.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int] = (256, 256),
        num_critics: int = 2,
        activation: str = "relu",
        initial_alpha: float = 1.0,
        learn_alpha: bool = True,
    ) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.actor = mlp(obs_dim, hidden_sizes, 2 * act_dim, activation)
        self.critic = EnsembleMLP(obs_dim + act_dim, hidden_sizes, 1, num_critics, activation)
        self.critic_target = copy.deepcopy(self.critic)
        self.critic_target.requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor([math.log(initial_alpha)]), requires_grad=learn_alpha)

    def actor_head(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)``, each ``(B, A)``, log-std clamped to ``[LOG_STD_MIN, LOG_STD_MAX]``."""
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(
        self, obs: torch.Tensor, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions (B, A), log_prob (B,))`` with ``actions ~ pi(.|obs)``, reparameterized."""
        mean, log_std = self.actor_head(obs)
        if noise is None:
            noise = torch.randn_like(mean)
        return squashed_gaussian(mean, log_std, noise)

    def q_values(
        self, obs: torch.Tensor, actions: torch.Tensor, target: bool = False, detach: bool = False
    ) -> torch.Tensor:
        """``(B, E)`` critic values at normalized ``actions``; ``detach`` keeps gradients off the weights."""
        x = torch.cat([obs, actions], dim=-1)
        if target:
            return self.critic_target(x)
        if detach:  # the unwrapped module: DataParallel would scatter the weights along with the batch
            critic: EnsembleMLP = self.unwrapped("critic")  # type: ignore[assignment]
            return critic(x, critic.detached_params())
        return self.critic(x)

    def target_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` the value the soft Q target bootstraps from: the minimum over the target critics
        (clipped double Q). A variant overrides it (REDQ: the minimum over a random subset)."""
        return self.q_values(obs, actions, target=True).min(dim=-1).values

    def actor_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` the value the actor maximizes: the minimum over the critics, their weights detached
        so that gradients reach ``actions`` only. A variant overrides it (REDQ: the critics' mean)."""
        return self.q_values(obs, actions, detach=True).min(dim=-1).values

    def generate_actions(
        self, observations: torch.Tensor, hidden_state: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        """Normalized actions ``(W, A)``: ``tanh(mean)`` when deterministic, else a sample."""
        del masks
        if deterministic:
            actions = torch.tanh(self.actor_head(observations)[0])
        else:
            actions = self.sample(observations)[0]
        return {"actions": actions, "hidden_state": hidden_state, "artifacts": {}}
