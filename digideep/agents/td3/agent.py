"""TD3 (Fujimoto et al. 2018): twin critics, target policy smoothing and delayed actor updates.

The update reads like CleanRL's ``td3_continuous_action.py`` and SB3's ``TD3.train``: target under
``no_grad`` (with smoothed target actions), critic step, and every ``policy_frequency`` gradient steps
an actor step against the freshly updated first critic (through detached critic weights) followed by
the Polyak average of both targets. DDPG (:mod:`digideep.agents.ddpg`) is the special case with one
critic, no delay and no smoothing, as in SB3. Each step's gradients come from
:meth:`TD3._critic_gradients` and :meth:`TD3._actor_gradients` (autograd) or, by default on the CPU in
float32, from their hand-written twins (:mod:`.analytic_gradients`).

Defaults follow the paper, SB3 and CleanRL: two critics, ``policy_frequency`` 2, smoothing noise 0.2
clipped at 0.5, Gaussian exploration noise 0.1, ``lr`` 3e-4 (CleanRL; SB3 uses 1e-3).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch

from digideep.agents.noise import make_noise
from digideep.agents.off_policy import OffPolicyAgent, Transitions
from digideep.agents.td3 import losses
from digideep.agents.td3.analytic_gradients import AnalyticTD3Gradients
from digideep.agents.td3.policy import DeterministicPolicy
from digideep.agents.utils import MetricAccumulator, adam_step, make_adam, overrides, polyak_update

__all__ = ["TD3"]

log = logging.getLogger(__name__)


class TD3(OffPolicyAgent):
    """Twin Delayed Deep Deterministic Policy Gradient for Box action spaces.

    Args:
        name: the agent's name (its key in the trajectory, ``/agents/<name>/...``).
        session: the run's Session (device, paths).
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
        analytic_gradients: on the CPU in float32, compute the gradients of both steps by hand
            (:mod:`.analytic_gradients`: the same losses and gradients as autograd's up to rounding)
            instead of autograd. Used only for ReLU or tanh networks and while a subclass keeps
            :meth:`_critic_gradients` and :meth:`_actor_gradients`.
        **params: :class:`~digideep.agents.off_policy.OffPolicyAgent` arguments.
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
        analytic_gradients: bool = True,
        **params: Any,
    ) -> None:
        super().__init__(name, session, observation_space, action_space, **params)
        if policy_frequency < 1 or num_critics < 1:
            raise ValueError(
                f"policy_frequency and num_critics must be >= 1, got {policy_frequency} and {num_critics}"
            )
        act_dim = self.scaler.dim
        noise = make_noise(noise_type, act_dim, noise_std, self.device)
        self.policy = DeterministicPolicy(
            self.obs.dim, act_dim, self.hidden_sizes, num_critics, activation, noise
        ).to(self.device)
        if self.data_parallel:
            self.policy.parallelize(["actor", "critic", "actor_target", "critic_target"])
        self.policy_frequency = int(policy_frequency)
        self.target_policy_noise = float(target_policy_noise)
        self.target_noise_clip = float(target_noise_clip)
        actor = self.policy.unwrapped("actor")
        critic = self.policy.unwrapped("critic")
        self.actor_optimizer = make_adam(actor.parameters(), actor_lr or lr, self.device)
        self.critic_optimizer = make_adam(critic.parameters(), critic_lr or lr, self.device)
        self._target_params = [
            *self.policy.unwrapped("actor_target").parameters(),
            *self.policy.unwrapped("critic_target").parameters(),
        ]
        self._actor_params = list(actor.parameters())
        self._critic_params = list(critic.parameters())
        self._online_params = [*self._actor_params, *self._critic_params]
        # the hand-written gradients, where they apply and the autograd ones are not overridden
        self._analytic = None
        if analytic_gradients and not overrides(type(self), TD3, "_critic_gradients", "_actor_gradients"):
            self._analytic = AnalyticTD3Gradients.build(self, activation)

    # -- acting ----------------------------------------------------------------------------------
    def _act(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        out = self.policy.generate_actions(obs, hidden, masks, deterministic)
        out["actions"] = self.scaler.to_env(out["actions"]).reshape(-1, *self.scaler.shape)
        return out

    # -- learning --------------------------------------------------------------------------------
    def learn(self, data: Transitions) -> dict[str, float]:
        """One gradient step per minibatch (``data`` leading axis)."""
        analytic = self._analytic
        critic_gradients = self._critic_gradients if analytic is None else analytic.critic_gradients
        actor_gradients = self._actor_gradients if analytic is None else analytic.actor_gradients
        noise = torch.randn_like(data.actions) if self.target_policy_noise > 0 else None
        metrics = MetricAccumulator()
        for i in range(data.actions.shape[0]):
            batch = Transitions(*(field[i] for field in data))
            grads, qf_loss, q_mean = critic_gradients(batch, None if noise is None else noise[i])
            adam_step(self.critic_optimizer, grads)
            metrics.add(**{"losses/qf_loss": qf_loss, "losses/qf_values": q_mean})

            if self.updates % self.policy_frequency == 0:
                grads, actor_loss = actor_gradients(batch.observations)
                adam_step(self.actor_optimizer, grads)
                polyak_update(self._target_params, self._online_params, self.tau)
                metrics.add(**{"losses/actor_loss": actor_loss})
            self.updates += 1
        return metrics.result()

    def _critic_gradients(
        self, batch: Transitions, noise: torch.Tensor | None
    ) -> tuple[Sequence[torch.Tensor], torch.Tensor, torch.Tensor]:
        """The critic step's gradients (autograd) on one minibatch (``B`` rows): ``(gradients of the
        critics' parameters, critic loss, mean Q)``, the loss values detached. ``noise`` ``(B, A)``
        smooths the target actions (None: no smoothing)."""
        policy, next_obs = self.policy, batch.next_observations
        with self.mixed_precision():
            with torch.no_grad():
                next_actions = policy.actor_target(next_obs)
                if noise is not None:
                    next_actions = losses.smoothed_target_actions(
                        next_actions, noise, self.target_policy_noise, self.target_noise_clip
                    )
                next_q = policy.q_values(next_obs, next_actions, target=True)
                target = losses.q_target(batch.rewards, batch.terminals, next_q, self.gamma)
            q = policy.q_values(batch.observations, batch.actions)
            qf_loss = losses.critic_loss(q, target)
        return torch.autograd.grad(qf_loss, self._critic_params), qf_loss.detach(), q.detach().mean()

    def _actor_gradients(self, obs: torch.Tensor) -> tuple[Sequence[torch.Tensor], torch.Tensor]:
        """The actor step's gradients (autograd): ``(gradients of the actor's parameters, actor loss)``."""
        with self.mixed_precision():
            actor_loss = losses.actor_loss(self.policy.q1_detached(obs, self.policy.actor(obs)))
        return torch.autograd.grad(actor_loss, self._actor_params), actor_loss.detach()

    # -- state -----------------------------------------------------------------------------------
    def _stateful(self) -> dict[str, Any]:
        return {
            **super()._stateful(),
            "policy": self.policy,
            "critic_optimizer": self.critic_optimizer,
            "actor_optimizer": self.actor_optimizer,
            "noise": self.policy.noise,
        }
