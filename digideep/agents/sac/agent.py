"""Soft Actor-Critic (Haarnoja et al. 2018): tanh-Gaussian actor, twin critics, automatic temperature.

The update follows CleanRL's ``sac_continuous_action.py`` and SB3's ``SAC.train``: soft Q target from
the target critics under ``no_grad``, critic step, then (every ``policy_frequency`` gradient steps) the
actor step against the freshly updated critics together with the temperature step, then the Polyak
average of the target critics. Both critics are one ensemble (one call, one backward); the actor loss
reads the critics through detached weights, so no critic weight gradients are computed for it.
Each step's gradients come from :meth:`SAC._critic_gradients` and :meth:`SAC._actor_gradients`
(autograd) or, by default on the CPU in float32, from their hand-written twins
(:mod:`.analytic_gradients`), and go straight into the optimizer's update
(:func:`~digideep.agents.utils.adam_step`): no ``zero_grad``, no ``.grad`` accumulation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch

from digideep.agents.off_policy import OffPolicyAgent, Transitions
from digideep.agents.sac import losses
from digideep.agents.sac.analytic_gradients import AnalyticSACGradients
from digideep.agents.sac.policy import SACPolicy
from digideep.agents.utils import (
    MetricAccumulator,
    adam_step,
    make_adam,
    optimizer_params,
    overrides,
    polyak_update,
)

__all__ = ["SAC"]

log = logging.getLogger(__name__)


class SAC(OffPolicyAgent):
    """Soft Actor-Critic for Box action spaces.

    Args:
        name: the agent's name (its key in the trajectory, ``/agents/<name>/...``).
        session: the run's Session (device, paths).
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
        activation: hidden activation.
        analytic_gradients: on the CPU in float32, compute the gradients of both steps by hand
            (:mod:`.analytic_gradients`: the same losses and gradients as autograd's up to rounding,
            faster at HalfCheetah sizes, README) instead of autograd. Used only for ReLU or tanh
            networks and while a subclass keeps :meth:`_critic_gradients` and :meth:`_actor_gradients`.
        **params: :class:`~digideep.agents.off_policy.OffPolicyAgent` arguments (``gamma``, ``tau``,
            ``batch_size``, ``updates_per_iteration``, ``learning_starts``, ``hidden_sizes``, ...).
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
        activation: str = "relu",
        analytic_gradients: bool = True,
        **params: Any,
    ) -> None:
        super().__init__(name, session, observation_space, action_space, **params)
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if policy_frequency < 1:
            raise ValueError(f"policy_frequency must be >= 1, got {policy_frequency}")
        act_dim = self.scaler.dim
        self.policy = SACPolicy(
            self.obs.dim, act_dim, self.hidden_sizes, 2, activation, initial_alpha=alpha, learn_alpha=autotune
        ).to(self.device)
        if self.data_parallel:
            self.policy.parallelize(["actor", "critic", "critic_target"])
        self.autotune = bool(autotune)
        self.target_entropy = float(-act_dim if target_entropy is None else target_entropy)
        self.policy_frequency = int(policy_frequency)

        critic = self.policy.unwrapped("critic")
        actor_groups = [{"params": list(self.policy.unwrapped("actor").parameters()), "lr": actor_lr or lr}]
        if self.autotune:
            actor_groups.append({"params": [self.policy.log_alpha], "lr": alpha_lr or lr})
        self.critic_optimizer = make_adam(critic.parameters(), critic_lr or lr, self.device)
        self.actor_optimizer = make_adam(actor_groups, actor_lr or lr, self.device)
        self._target_params = list(self.policy.unwrapped("critic_target").parameters())
        self._online_params = list(critic.parameters())
        self._actor_params = optimizer_params(self.actor_optimizer)  # actor, then log_alpha
        # the hand-written gradients, where they apply and the autograd ones are not overridden
        self._analytic = None
        if analytic_gradients and not overrides(type(self), SAC, "_critic_gradients", "_actor_gradients"):
            self._analytic = AnalyticSACGradients.build(self, activation)

    # -- acting ----------------------------------------------------------------------------------
    def _act(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        out = self.policy.generate_actions(obs, hidden, masks, deterministic)
        out["actions"] = self.scaler.to_env(out["actions"]).reshape(-1, *self.scaler.shape)
        return out

    @property
    def alpha(self) -> float:
        """The current entropy temperature."""
        return float(self.policy.log_alpha.detach().exp())

    # -- learning --------------------------------------------------------------------------------
    def learn(self, data: Transitions) -> dict[str, float]:
        """One SAC gradient step per minibatch (``data`` leading axis)."""
        policy, tau, analytic = self.policy, self.tau, self._analytic
        critic_gradients = self._critic_gradients if analytic is None else analytic.critic_gradients
        actor_gradients = self._actor_gradients if analytic is None else analytic.actor_gradients
        num_steps, batch_size, act_dim = data.actions.shape
        noise = torch.randn(num_steps, 2, batch_size, act_dim, device=self.device)
        metrics = MetricAccumulator()
        alpha = policy.log_alpha.detach().exp()
        for i in range(num_steps):
            batch = Transitions(*(field[i] for field in data))
            grads, qf_loss, q_mean = critic_gradients(batch, noise[i, 0], alpha)
            adam_step(self.critic_optimizer, grads)
            metrics.add(**{"losses/qf_loss": qf_loss, "losses/qf_values": q_mean})

            if self.updates % self.policy_frequency == 0:
                grads, actor_loss, log_prob, alpha_loss = actor_gradients(
                    batch.observations, noise[i, 1], alpha
                )
                adam_step(self.actor_optimizer, grads)
                alpha = policy.log_alpha.detach().exp()
                metrics.add(**{"losses/actor_loss": actor_loss, "losses/entropy": -log_prob.mean()})
                if alpha_loss is not None:
                    metrics.add(**{"losses/alpha_loss": alpha_loss})

            polyak_update(self._target_params, self._online_params, tau)
            self.updates += 1
        metrics.add(**{"charts/alpha": alpha.reshape(())})
        return metrics.result()

    def _critic_gradients(
        self, batch: Transitions, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[Sequence[torch.Tensor], torch.Tensor, torch.Tensor]:
        """The critic step's gradients (autograd) on one minibatch (``B`` rows): ``(gradients of the
        critics' parameters, critic loss, mean Q)``, the loss values detached. ``noise`` ``(B, A)``
        samples the next actions; ``alpha`` is the temperature."""
        policy, next_obs = self.policy, batch.next_observations
        with self.mixed_precision():
            with torch.no_grad():
                next_actions, next_log_prob = policy.sample(next_obs, noise)
                next_q = policy.q_values(next_obs, next_actions, target=True)
                target = losses.soft_q_target(
                    batch.rewards, batch.terminals, next_q, next_log_prob, alpha, self.gamma
                )
            q = policy.q_values(batch.observations, batch.actions)
            qf_loss = losses.critic_loss(q, target)
        return torch.autograd.grad(qf_loss, self._online_params), qf_loss.detach(), q.detach().mean()

    def _actor_gradients(
        self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[Sequence[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The actor step's gradients (autograd): ``(gradients of the actor's parameters and log_alpha,
        actor loss, log pi (B,), temperature loss or None)``, detached. ``noise`` samples the actions."""
        policy = self.policy
        alpha_loss = None
        with self.mixed_precision():
            pi_actions, log_prob = policy.sample(obs, noise)
            q_pi = policy.q_values(obs, pi_actions, detach=True)
            actor_loss = loss = losses.actor_loss(log_prob, q_pi, alpha)
            if self.autotune:
                alpha_loss = losses.alpha_loss(policy.log_alpha, log_prob, self.target_entropy)
                loss = loss + alpha_loss
        grads = torch.autograd.grad(loss, self._actor_params)
        if alpha_loss is not None:
            alpha_loss = alpha_loss.detach()
        return grads, actor_loss.detach(), log_prob.detach(), alpha_loss

    # -- state -----------------------------------------------------------------------------------
    def _stateful(self) -> dict[str, Any]:
        return {
            **super()._stateful(),
            "policy": self.policy,
            "critic_optimizer": self.critic_optimizer,
            "actor_optimizer": self.actor_optimizer,
        }
