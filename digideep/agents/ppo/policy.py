"""PPO policy: actor and critic MLPs (evaluated together as a 2-member ensemble), a Gaussian with a
state-independent log-std for Box actions or a categorical for Discrete ones, and an optional GRU
whose state the Explorer carries as ``/agents/<name>/hidden_state``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from digideep.agents.base import PolicyBase
from digideep.agents.networks import EnsembleMLP

__all__ = ["ActorCriticPolicy"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class ActorCriticPolicy(PolicyBase):
    """Actor-critic for PPO.

    The actor and the critic are separate MLPs of the same widths (SB3's and CleanRL's default); they
    run as one :class:`~digideep.agents.networks.EnsembleMLP` whose member 0 outputs the action
    distribution's parameters and member 1 the value (its first output). With ``recurrent`` a GRU cell
    on the observations feeds both, and its state resets where ``masks`` is 0.

    Args:
        obs_dim: observation features.
        action_space: Box (diagonal Gaussian) or Discrete (categorical).
        hidden_sizes: hidden widths of actor and critic (64, 64 in SB3/CleanRL).
        activation: hidden activation (tanh in SB3/CleanRL).
        log_std_init: initial log-std of the Gaussian.
        ortho_init: orthogonal initialization (gain sqrt(2), actor head 0.01, value head 1).
        recurrent: put a GRU cell in front of the heads.
        recurrent_size: GRU state size.
    """

    def __init__(
        self,
        obs_dim: int,
        action_space: gym.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        recurrent: bool = False,
        recurrent_size: int = 64,
    ) -> None:
        super().__init__()
        if isinstance(action_space, gym.spaces.Discrete):
            self.discrete, out_dim = True, int(action_space.n)
            self.action_offset = int(action_space.start)
        elif isinstance(action_space, gym.spaces.Box):
            self.discrete, out_dim = False, int(math.prod(action_space.shape))
            self.action_offset = 0
        else:
            raise TypeError(f"PPO supports Box and Discrete action spaces, got {action_space}")
        self.action_shape = tuple(action_space.shape or ())
        self.recurrent = recurrent
        self.recurrent_size = recurrent_size if recurrent else 1
        self.gru = nn.GRUCell(obs_dim, recurrent_size) if recurrent else None
        self.heads = EnsembleMLP(
            recurrent_size if recurrent else obs_dim, hidden_sizes, out_dim, 2, activation
        )
        self.log_std = None if self.discrete else nn.Parameter(torch.full((out_dim,), float(log_std_init)))
        if ortho_init:
            self._orthogonal_init()

    def _orthogonal_init(self) -> None:
        last = len(self.heads.weights) - 1
        with torch.no_grad():
            for layer, (weight, bias) in enumerate(zip(self.heads.weights, self.heads.biases, strict=True)):
                for member, head_gain in enumerate((0.01, 1.0)):
                    gain = head_gain if layer == last else math.sqrt(2.0)
                    nn.init.orthogonal_(weight[member], gain)
                bias.zero_()
            if self.gru is not None:
                for name, param in self.gru.named_parameters():
                    nn.init.orthogonal_(param) if "weight" in name else nn.init.zeros_(param)

    # -- pieces ----------------------------------------------------------------------------------
    def features(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``(features (W, F), next hidden (W, h))``; feed-forward passes ``obs`` through."""
        if self.gru is None:
            return obs, hidden
        next_hidden = self.gru(obs, hidden * masks)
        return next_hidden, next_hidden

    def sequence_features(self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        """Features of whole sequences.

        Args:
            obs: ``(W, T, obs_dim)``.
            hidden: ``(W, h)`` state before row 0.
            masks: ``(W, T, 1)``; the state resets where 0.

        Returns:
            ``(W, T, F)``.
        """
        if self.gru is None:
            return obs
        outputs = []
        for t in range(obs.shape[1]):
            hidden = self.gru(obs[:, t], hidden * masks[:, t])
            outputs.append(hidden)
        return torch.stack(outputs, dim=1)

    def heads_forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(distribution parameters (B, out_dim), values (B,))`` from ``(B, F)`` features."""
        out = self.heads(features)
        if out.dim() == 2:
            out = out.unsqueeze(-1)
        return out[:, 0], out[:, 1, 0]

    def values(self, features: torch.Tensor) -> torch.Tensor:
        """``(B,)`` values."""
        return self.heads_forward(features)[1]

    def log_prob_entropy(
        self, dist: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log_prob (B,), entropy (B,))`` of ``actions`` (Box ``(B, A)``, Discrete ``(B,)``)."""
        if self.discrete:
            log_p = F.log_softmax(dist, dim=-1)
            index = (actions.long().reshape(-1) - self.action_offset).unsqueeze(-1)
            return log_p.gather(-1, index).squeeze(-1), -(log_p.exp() * log_p).sum(-1)
        log_std = self.log_std
        z = (actions.reshape(dist.shape) - dist) * torch.exp(-log_std)
        log_prob = (-0.5 * z.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
        entropy = (0.5 + _HALF_LOG_2PI + log_std).sum().expand(dist.shape[0])
        return log_prob, entropy

    def sample(self, dist: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, log_prob (B,))``: Box actions ``(B, *shape)`` float32, Discrete ``(B,)`` int64."""
        if self.discrete:
            log_p = F.log_softmax(dist, dim=-1)
            index = log_p.argmax(-1) if deterministic else torch.multinomial(log_p.exp(), 1).squeeze(-1)
            return index + self.action_offset, log_p.gather(-1, index.unsqueeze(-1)).squeeze(-1)
        if deterministic:
            actions = dist
            log_prob = (-self.log_std - _HALF_LOG_2PI).sum().expand(dist.shape[0])
        else:
            noise = torch.randn_like(dist)
            actions = dist + self.log_std.exp() * noise
            log_prob = (-0.5 * noise.pow(2) - self.log_std - _HALF_LOG_2PI).sum(-1)
        return actions.reshape(-1, *self.action_shape), log_prob

    def generate_actions(
        self, observations: torch.Tensor, hidden_state: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        """Actions with artifacts ``values (W, 1)`` and ``action_log_probs (W, 1)``."""
        features, next_hidden = self.features(observations, hidden_state, masks)
        dist, values = self.heads_forward(features)
        actions, log_prob = self.sample(dist, deterministic)
        return {
            "actions": actions,
            "hidden_state": next_hidden,
            "artifacts": {"values": values.unsqueeze(-1), "action_log_probs": log_prob.unsqueeze(-1)},
        }
