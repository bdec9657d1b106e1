"""TD3 (Fujimoto et al. 2018): twin critics, target policy smoothing and delayed actor updates.

The update reads like CleanRL's ``td3_continuous_action.py`` and SB3's ``TD3.train``: target under
``no_grad`` (with smoothed target actions), critic step, and every ``policy_frequency`` gradient steps
an actor step against the freshly updated first critic (through detached critic weights) followed by
the Polyak average of both targets. DDPG (:mod:`digideep.agents.ddpg`) is the special case with one
critic, no delay and no smoothing, as in SB3. The update is written once, in :meth:`TD3.gradient_step`:
every loss from :mod:`.losses`, every gradient from autograd, run eagerly, compiled or as a CUDA graph
by ``update_mode`` (:mod:`digideep.agents.update_modes`). A variant overrides an expression, not the
update: :meth:`TD3.build_policy` returns its own
:class:`~digideep.agents.td3.policy.DeterministicPolicy` subclass, whose ``target_q`` and ``actor_q``
reduce the critics for the target and for the actor.

Defaults follow the paper, SB3 and CleanRL: two critics, ``policy_frequency`` 2, smoothing noise 0.2
clipped at 0.5, Gaussian exploration noise 0.1, ``lr`` 3e-4 (CleanRL; SB3 uses 1e-3).
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import torch

from digideep.agents.noise import make_noise
from digideep.agents.off_policy import OffPolicyAgent, Transitions
from digideep.agents.td3 import losses
from digideep.agents.td3.policy import DeterministicPolicy
from digideep.agents.utils import make_adam, minimize, polyak_update

__all__ = ["TD3"]

log = logging.getLogger(__name__)


class TD3(OffPolicyAgent):
    """Twin Delayed Deep Deterministic Policy Gradient for Box action spaces.

    Args:
        name: the agent's name (its key in the trajectory, ``/agents/<name>/...``).
        session: what picks the agent's device (:class:`~digideep.agents.base.AgentSession`).
        observation_space: the single-environment observation space.
        action_space: this agent's action space.
        lr: learning rate of actor and critics (CleanRL 3e-4; SB3 1e-3).
        actor_lr: actor learning rate; ``lr`` when None.
        critic_lr: critic learning rate; ``lr`` when None.
        noise_type: exploration noise, ``"normal"``, ``"ou"`` (reset at episode starts) or ``"none"``.
        noise_std: its std (OU: sigma), in normalized action units (0.1 in SB3 zoo, CleanRL, TD3 paper).
        policy_frequency: gradient steps per actor step and target update (2; SB3 ``policy_delay``).
        num_critics: critics in the ensemble; the target takes their minimum (2; SB3 ``n_critics``).
        target_policy_noise: std of the target policy smoothing (0.2; 0 disables it).
        target_noise_clip: bound of the smoothing noise.
        activation: hidden activation.
        **params: :class:`~digideep.agents.off_policy.OffPolicyAgent` arguments (``update_mode``, ...).
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
        noise_type: str = "normal",
        noise_std: float = 0.1,
        policy_frequency: int = 2,
        num_critics: int = 2,
        target_policy_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        activation: str = "relu",
        **params: Any,
    ) -> None:
        super().__init__(name, session, observation_space, action_space, **params)
        if policy_frequency < 1 or num_critics < 1:
            raise ValueError(
                f"policy_frequency and num_critics must be >= 1, got {policy_frequency} and {num_critics}"
            )
        self.noise_type, self.noise_std = noise_type, float(noise_std)
        self.num_critics = int(num_critics)
        self.activation = activation
        self.policy = self.build_policy().to(self.device)
        if self.data_parallel:
            self.policy.parallelize(["actor", "critic", "actor_target", "critic_target"])
        self.policy_frequency = int(policy_frequency)
        self.target_policy_noise = float(target_policy_noise)
        self.target_noise_clip = float(target_noise_clip)
        actor = self.policy.unwrapped("actor")
        critic = self.policy.unwrapped("critic")
        capturable = self.requested_update_mode == "cudagraphs"
        self.actor_optimizer = make_adam(
            actor.parameters(), actor_lr or lr, self.device, capturable=capturable
        )
        self.critic_optimizer = make_adam(
            critic.parameters(), critic_lr or lr, self.device, capturable=capturable
        )
        self._target_params = [
            *self.policy.unwrapped("actor_target").parameters(),
            *self.policy.unwrapped("critic_target").parameters(),
        ]
        self._actor_params = list(actor.parameters())
        self._critic_params = list(critic.parameters())
        self._online_params = [*self._actor_params, *self._critic_params]
        self._update = self.update_function(self.gradient_step, self.requested_update_mode)

    def build_policy(self) -> DeterministicPolicy:
        """The networks: actor, ``num_critics`` critics and target copies of both, with the exploration
        noise, made where the agent acts (:attr:`act_device`). A hook for variants (return a
        :class:`~digideep.agents.td3.policy.DeterministicPolicy` subclass); it runs in the constructor
        after the settings are stored."""
        noise = make_noise(self.noise_type, self.scaler.dim, self.noise_std, self.act_device)
        return DeterministicPolicy(
            self.obs.dim, self.scaler.dim, self.hidden_sizes, self.num_critics, self.activation, noise
        )

    # -- learning --------------------------------------------------------------------------------
    def step_noise(self, data: Transitions) -> torch.Tensor | None:
        """``(N, B, A)`` standard normal draws of the target policy smoothing (None without it)."""
        return torch.randn_like(data.actions) if self.target_policy_noise > 0 else None

    def gradient_step(
        self, batch: Transitions, noise: torch.Tensor | None, *, actor_step: bool
    ) -> dict[str, torch.Tensor]:
        """One TD3 gradient step on one minibatch of ``B`` transitions: the update, written once.

        Args:
            batch: the minibatch, ``(B, ...)`` tensors.
            noise: ``(B, A)`` standard normal draws that smooth the target actions (None: no smoothing).
            actor_step: also step the actor and Polyak-average both targets (the delayed update).

        Returns:
            Metric tensors (0-d, detached).
        """
        policy, obs, next_obs = self.policy, batch.observations, batch.next_observations
        with self.mixed_precision():
            # target: the target critics at the next state and the (smoothed) target actor's action
            with torch.no_grad():
                next_actions = policy.actor_target(next_obs)
                if noise is not None:
                    next_actions = losses.smoothed_target_actions(
                        next_actions, noise, self.target_policy_noise, self.target_noise_clip
                    )
                next_q = policy.target_q(next_obs, next_actions)  # (B,)
                target = losses.q_target(batch.rewards, batch.terminals, next_q, self.gamma)
            q = policy.q_values(obs, batch.actions)
            qf_loss = losses.critic_loss(q, target)
        minimize(self.critic_optimizer, qf_loss, self._critic_params)
        metrics = {"losses/qf_loss": qf_loss.detach(), "losses/qf_values": q.detach().mean()}

        if actor_step:
            # deterministic policy gradient through the first critic (weights detached), then targets
            with self.mixed_precision():
                actor_loss = losses.actor_loss(policy.actor_q(obs, policy.actor(obs)))
            minimize(self.actor_optimizer, actor_loss, self._actor_params)
            polyak_update(self._target_params, self._online_params, self.tau)
            metrics["losses/actor_loss"] = actor_loss.detach()
        return metrics

    # -- state -----------------------------------------------------------------------------------
    def _stateful(self) -> dict[str, Any]:
        return {
            **super()._stateful(),
            "policy": self.policy,
            "critic_optimizer": self.critic_optimizer,
            "actor_optimizer": self.actor_optimizer,
            "noise": self.policy.noise,
        }
