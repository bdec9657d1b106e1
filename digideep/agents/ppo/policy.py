"""PPO policy, as in CleanRL's ``ppo_continuous_action.py``: separate actor and critic MLPs, a
``torch.distributions.Normal`` with a state-independent log-std for Box actions (``Categorical`` for
Discrete ones), and an optional GRU whose state the Explorer carries as ``/agents/<name>/hidden_state``.

With image observations (Atari) an :class:`~digideep.agents.encoders.ObservationEncoder` (the Nature
CNN, CleanRL's ``ppo_atari.py``) is a trunk that actor and critic share; the heads then are single
linear layers by default (``hidden_sizes=()``).

Actor and critic stay two plain modules: at 64x64 the update's cost is per-operation overhead, not
arithmetic, and fusing them into one batched two-member network does not lower it
(docs/measurements.md). Acting is where fusing pays: on the CPU the agent acts through
:mod:`~digideep.agents.ppo.numpy_acting`, one fused NumPy forward over copies of these weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from digideep.agents.base import PolicyBase
from digideep.agents.encoders import ObservationEncoder
from digideep.agents.networks import init_orthogonal, mlp

__all__ = ["ActorCriticPolicy"]


class ActorCriticPolicy(PolicyBase):
    """Actor-critic for PPO.

    With ``recurrent`` a GRU cell on the observations feeds both networks, and its state resets where
    ``masks`` is 0; otherwise the observations are the features.

    Args:
        obs_dim: observation features.
        action_space: Box (diagonal Gaussian) or Discrete (categorical).
        hidden_sizes: hidden widths of actor and critic (64, 64 in SB3/CleanRL).
        activation: hidden activation (tanh in SB3/CleanRL).
        log_std_init: initial log-std of the Gaussian.
        ortho_init: orthogonal initialization (gain sqrt(2), actor head 0.01, critic head 1).
        recurrent: put a GRU cell in front of the networks.
        recurrent_size: GRU state size.
        encoder: a shared trunk (the CNN of image observations); None: the observations are the input.
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
        encoder: ObservationEncoder | None = None,
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
        self.encoder = encoder
        if encoder is not None:
            obs_dim = encoder.out_dim
            if ortho_init:
                init_orthogonal(encoder)  # gain sqrt(2) on every conv and linear layer (CleanRL)
        self.gru = nn.GRUCell(obs_dim, recurrent_size) if recurrent else None
        feature_dim = recurrent_size if recurrent else obs_dim
        self.critic = mlp(feature_dim, hidden_sizes, 1, activation)
        self.actor = mlp(feature_dim, hidden_sizes, out_dim, activation)
        self.log_std = None if self.discrete else nn.Parameter(torch.full((out_dim,), float(log_std_init)))
        if ortho_init:
            init_orthogonal(self.critic, last_gain=1.0)
            init_orthogonal(self.actor, last_gain=0.01)
            if self.gru is not None:
                init_orthogonal(self.gru, gain=1.0)

    # -- pieces ----------------------------------------------------------------------------------
    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, obs_dim)`` observations (uint8 or float32) to ``(B, E) float32`` trunk features."""
        return obs if self.encoder is None else self.encoder(obs)

    def features(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``(features (W, F), next hidden (W, h))``; feed-forward passes ``obs`` through."""
        obs = self.encode(obs)
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
        if self.encoder is not None:
            obs = self.encoder(obs.reshape(-1, obs.shape[-1])).reshape(*obs.shape[:2], -1)
        if self.gru is None:
            return obs
        outputs = []
        for t in range(obs.shape[1]):
            hidden = self.gru(obs[:, t], hidden * masks[:, t])
            outputs.append(hidden)
        return torch.stack(outputs, dim=1)

    def value(self, features: torch.Tensor) -> torch.Tensor:
        """``(B,)`` state values of ``(B, F)`` features."""
        return self.critic(features).squeeze(-1)

    def distribution(self, features: torch.Tensor) -> Distribution:
        """The action distribution at ``(B, F)`` features (Normal per action dimension, or Categorical)."""
        if self.discrete:
            return Categorical(logits=self.actor(features), validate_args=False)
        mean = self.actor(features)
        return Normal(mean, self.log_std.exp().expand_as(mean), validate_args=False)

    def log_prob_entropy(
        self, dist: Distribution, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log_prob (B,), entropy (B,))`` of ``actions`` (Box ``(B, *shape)``, Discrete ``(B,)``)."""
        if self.discrete:
            return dist.log_prob(actions.long().reshape(-1) - self.action_offset), dist.entropy()
        actions = actions.reshape(dist.mean.shape)
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)

    def generate_actions(
        self, observations: torch.Tensor, hidden_state: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        """Actions with artifacts ``values (W, 1)`` and ``action_log_probs (W, 1)``."""
        features, next_hidden = self.features(observations, hidden_state, masks)
        dist = self.distribution(features)
        if self.discrete:
            index = dist.logits.argmax(-1) if deterministic else dist.sample()
            actions, log_prob = index + self.action_offset, dist.log_prob(index)
        else:
            actions = dist.mean if deterministic else dist.rsample()  # rsample: cheaper than sample()
            log_prob = dist.log_prob(actions).sum(-1)
            actions = actions.reshape(-1, *self.action_shape)
        return {
            "actions": actions,
            "hidden_state": next_hidden,
            "artifacts": {
                "values": self.value(features).unsqueeze(-1),
                "action_log_probs": log_prob.unsqueeze(-1),
            },
        }
