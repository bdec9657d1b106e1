"""Soft Actor-Critic (Haarnoja et al. 2018): tanh-Gaussian actor, twin critics, automatic temperature.

The update follows CleanRL's ``sac_continuous_action.py`` and SB3's ``SAC.train``: soft Q target from
the target critics under ``no_grad``, critic step, then (every ``policy_frequency`` gradient steps) the
actor step against the freshly updated critics together with the temperature step, then the Polyak
average of the target critics. Both critics are one ensemble (one call, one backward); the actor loss
reads the critics through detached weights, so no critic weight gradients are computed for it.
Gradients come from ``torch.autograd.grad`` and go straight into the optimizer's update
(:func:`~digideep.agents.utils.adam_step`): no ``zero_grad``, no ``.grad`` accumulation.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import torch

from digideep.agents.off_policy import OffPolicyAgent, Transitions
from digideep.agents.sac import losses
from digideep.agents.sac.policy import SACPolicy
from digideep.agents.utils import MetricAccumulator, adam_step, make_adam, optimizer_params, polyak_update

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
        policy, gamma, tau = self.policy, self.gamma, self.tau
        num_steps, batch_size, act_dim = data.actions.shape
        noise = torch.randn(num_steps, 2, batch_size, act_dim, device=self.device)
        metrics = MetricAccumulator()
        alpha = policy.log_alpha.detach().exp()
        for i in range(num_steps):
            obs, actions, next_obs = data.observations[i], data.actions[i], data.next_observations[i]
            with self.mixed_precision():
                with torch.no_grad():
                    next_actions, next_log_prob = policy.sample(next_obs, noise[i, 0])
                    next_q = policy.q_values(next_obs, next_actions, target=True)
                    target = losses.soft_q_target(
                        data.rewards[i], data.terminals[i], next_q, next_log_prob, alpha, gamma
                    )
                q = policy.q_values(obs, actions)
                qf_loss = losses.critic_loss(q, target)
            adam_step(self.critic_optimizer, torch.autograd.grad(qf_loss, self._online_params))
            metrics.add(**{"losses/qf_loss": qf_loss.detach(), "losses/qf_values": q.detach().mean()})

            if self.updates % self.policy_frequency == 0:
                with self.mixed_precision():
                    pi_actions, log_prob = policy.sample(obs, noise[i, 1])
                    q_pi = policy.q_values(obs, pi_actions, detach=True)
                    actor_loss = losses.actor_loss(log_prob, q_pi, alpha)
                    loss = actor_loss
                    if self.autotune:
                        alpha_loss = losses.alpha_loss(policy.log_alpha, log_prob, self.target_entropy)
                        loss = loss + alpha_loss
                        metrics.add(**{"losses/alpha_loss": alpha_loss.detach()})
                adam_step(self.actor_optimizer, torch.autograd.grad(loss, self._actor_params))
                alpha = policy.log_alpha.detach().exp()
                metrics.add(
                    **{"losses/actor_loss": actor_loss.detach(), "losses/entropy": -log_prob.detach().mean()}
                )

            polyak_update(self._target_params, self._online_params, tau)
            self.updates += 1
        metrics.add(**{"charts/alpha": alpha.reshape(())})
        return metrics.result()

    # -- state -----------------------------------------------------------------------------------
    def _stateful(self) -> dict[str, Any]:
        return {
            **super()._stateful(),
            "policy": self.policy,
            "critic_optimizer": self.critic_optimizer,
            "actor_optimizer": self.actor_optimizer,
        }
