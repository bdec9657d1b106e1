"""Soft Actor-Critic (Haarnoja et al. 2018): tanh-Gaussian actor, an ensemble of critics, automatic
temperature.

The update is written once, in :meth:`SAC.gradient_step`, and reads like CleanRL's
``sac_continuous_action.py`` and SB3's ``SAC.train``: soft Q target from the target critics under
``no_grad``, critic step, then (every ``policy_frequency`` gradient steps) the actor step against the
freshly updated critics together with the temperature step, then the Polyak average of the target
critics. Every loss comes from :mod:`.losses` and every gradient from autograd; ``update_mode`` runs
that same function eagerly, compiled or as a CUDA graph (:mod:`digideep.agents.update_modes`). The
critics are one ensemble (one call, one backward); the actor loss reads them through detached weights,
so no critic weight gradients are computed for it.

A variant overrides an expression, not the update: :meth:`SAC.build_policy` returns its own
:class:`~digideep.agents.sac.policy.SACPolicy` subclass, whose ``target_q`` and ``actor_q`` reduce the
critics for the target and for the actor (SAC: their minimum; a REDQ-style variant: the minimum over a
random subset of ``num_critics`` critics, and their mean). ``docs/new-agent.md`` shows one.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import torch

from digideep.agents.off_policy import OffPolicyAgent, Transitions
from digideep.agents.sac import losses
from digideep.agents.sac.policy import SACPolicy
from digideep.agents.utils import make_adam, minimize, optimizer_params, polyak_update

__all__ = ["SAC"]

log = logging.getLogger(__name__)


class SAC(OffPolicyAgent):
    """Soft Actor-Critic for Box action spaces.

    Args:
        name: the agent's name (its key in the trajectory, ``/agents/<name>/...``).
        session: what picks the agent's device (:class:`~digideep.agents.base.AgentSession`).
        observation_space: the single-environment observation space.
        action_space: this agent's action space.
        lr: learning rate of actor, critics and temperature (SB3: one ``learning_rate``, 3e-4).
        actor_lr: actor learning rate; ``lr`` when None (CleanRL ``policy_lr`` 3e-4).
        critic_lr: critic learning rate; ``lr`` when None (CleanRL ``q_lr`` 1e-3).
        alpha_lr: temperature learning rate; ``lr`` when None.
        alpha: initial temperature with ``autotune`` (SB3 and CleanRL start at 1.0), else the fixed one.
        autotune: learn the temperature towards ``target_entropy``.
        target_entropy: entropy target; ``-act_dim`` when None (the SAC paper's heuristic).
        policy_frequency: gradient steps per actor and temperature step (1 in SB3 and the paper).
        num_critics: critics in the ensemble; the target and the actor take their minimum (2: clipped
            double Q; SB3 ``n_critics``).
        activation: hidden activation.
        **params: :class:`~digideep.agents.off_policy.OffPolicyAgent` arguments (``gamma``, ``tau``,
            ``batch_size``, ``updates_per_iteration``, ``learning_starts``, ``hidden_sizes``,
            ``update_mode``, ...).
    """

    def __init__(
        self,
        name: str,
        session: Any,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        lr: float = 3e-4,
        actor_lr: float | None = None,
        critic_lr: float | None = None,
        alpha_lr: float | None = None,
        alpha: float = 1.0,
        autotune: bool = True,
        target_entropy: float | None = None,
        policy_frequency: int = 1,
        num_critics: int = 2,
        activation: str = "relu",
        **params: Any,
    ) -> None:
        super().__init__(name, session, observation_space, action_space, **params)
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if policy_frequency < 1 or num_critics < 1:
            raise ValueError(
                f"policy_frequency and num_critics must be >= 1, got {policy_frequency} and {num_critics}"
            )
        self.initial_alpha = float(alpha)
        self.autotune = bool(autotune)
        self.target_entropy = float(-self.scaler.dim if target_entropy is None else target_entropy)
        self.policy_frequency = int(policy_frequency)
        self.num_critics = int(num_critics)
        self.activation = activation
        self.policy = self.build_policy().to(self.device)
        if self.data_parallel:
            self.policy.parallelize(["actor", "critic", "critic_target"])

        critic = self.policy.unwrapped("critic")
        actor_groups = [{"params": list(self.policy.unwrapped("actor").parameters()), "lr": actor_lr or lr}]
        if self.autotune:
            actor_groups.append({"params": [self.policy.log_alpha], "lr": alpha_lr or lr})
        capturable = self.requested_update_mode == "cudagraphs"
        self.critic_optimizer = make_adam(
            critic.parameters(), critic_lr or lr, self.device, capturable=capturable
        )
        self.actor_optimizer = make_adam(actor_groups, actor_lr or lr, self.device, capturable=capturable)
        self._critic_params = optimizer_params(self.critic_optimizer)
        self._actor_params = optimizer_params(self.actor_optimizer)  # actor, then log_alpha
        self._target_params = list(self.policy.unwrapped("critic_target").parameters())
        self._update = self.update_function(self.gradient_step, self.requested_update_mode)

    def build_policy(self) -> SACPolicy:
        """The networks: actor, ``num_critics`` critics and their targets, and ``log_alpha``.

        A hook for variants: return a :class:`~digideep.agents.sac.policy.SACPolicy` subclass (e.g. one
        whose ``target_q`` takes a random subset of the critics); the optimizers are built from its
        ``actor``, ``critic`` and ``log_alpha``. It runs in the constructor after the settings are stored
        (``self.obs.dim``, ``self.scaler.dim``, ``self.hidden_sizes``, ``self.num_critics``,
        ``self.activation``, ``self.initial_alpha``, ``self.autotune``).
        """
        return SACPolicy(
            self.obs.dim,
            self.scaler.dim,
            self.hidden_sizes,
            self.num_critics,
            self.activation,
            initial_alpha=self.initial_alpha,
            learn_alpha=self.autotune,
        )

    @property
    def alpha(self) -> float:
        """The current entropy temperature."""
        return float(self.policy.log_alpha.detach().exp())

    # -- learning --------------------------------------------------------------------------------
    def step_noise(self, data: Transitions) -> torch.Tensor:
        """``(N, 2, B, A)`` standard normal draws: per step, the next actions' and the actor step's."""
        num_steps, batch_size, act_dim = data.actions.shape
        return torch.randn(num_steps, 2, batch_size, act_dim, device=self.device)

    def gradient_step(
        self, batch: Transitions, noise: torch.Tensor, *, actor_step: bool
    ) -> dict[str, torch.Tensor]:
        """One SAC gradient step on one minibatch of ``B`` transitions: the update, written once.

        Args:
            batch: the minibatch, ``(B, ...)`` tensors.
            noise: ``(2, B, A)`` standard normal draws that sample the next actions and the actor's.
            actor_step: also step the actor and the temperature.

        Returns:
            Metric tensors (0-d, detached).
        """
        policy, obs = self.policy, batch.observations
        alpha = policy.log_alpha.detach().exp()
        with self.mixed_precision():
            # soft Q target: target critics at the next state and an action of the current policy
            with torch.no_grad():
                next_actions, next_log_prob = policy.sample(batch.next_observations, noise[0])
                next_q = policy.target_q(batch.next_observations, next_actions)  # (B,)
                target = losses.soft_q_target(
                    batch.rewards, batch.terminals, next_q, next_log_prob, alpha, self.gamma
                )
            q = policy.q_values(obs, batch.actions)
            qf_loss = losses.critic_loss(q, target)
        minimize(self.critic_optimizer, qf_loss, self._critic_params)
        metrics = {"losses/qf_loss": qf_loss.detach(), "losses/qf_values": q.detach().mean()}

        if actor_step:
            # actor against the freshly updated critics (weights detached), and the temperature
            with self.mixed_precision():
                pi_actions, log_prob = policy.sample(obs, noise[1])
                q_pi = policy.actor_q(obs, pi_actions)  # (B,)
                actor_loss = loss = losses.actor_loss(log_prob, q_pi, alpha)
                if self.autotune:
                    alpha_loss = losses.alpha_loss(policy.log_alpha, log_prob, self.target_entropy)
                    loss = loss + alpha_loss
                    metrics["losses/alpha_loss"] = alpha_loss.detach()
            minimize(self.actor_optimizer, loss, self._actor_params)
            metrics["losses/actor_loss"] = actor_loss.detach()
            metrics["losses/entropy"] = -log_prob.detach().mean()

        polyak_update(self._target_params, self._critic_params, self.tau)
        return metrics

    def learn_metrics(self) -> dict[str, torch.Tensor]:
        """The temperature after the iteration's steps."""
        return {"charts/alpha": self.policy.log_alpha.detach().exp().reshape(())}

    # -- state -----------------------------------------------------------------------------------
    def _stateful(self) -> dict[str, Any]:
        return {
            **super()._stateful(),
            "policy": self.policy,
            "critic_optimizer": self.critic_optimizer,
            "actor_optimizer": self.actor_optimizer,
        }
