"""TD3's (and DDPG's) critic and actor gradients written out by hand (:mod:`digideep.agents.analytic_mlp`
says why).

:class:`AnalyticTD3Gradients` has the two methods the agent's autograd path has,
:meth:`~digideep.agents.td3.agent.TD3._critic_gradients` and
:meth:`~digideep.agents.td3.agent.TD3._actor_gradients`, with the same arguments and results; the
loss values come from :mod:`~digideep.agents.td3.losses` and only their derivatives are written
here. ``tests/agents/td3/test_analytic_gradients.py`` checks every gradient against autograd's.

The derivatives, for ``B`` rows and the actor ``mu(s) = tanh(z)``:

- critic loss: see :func:`~digideep.agents.analytic_mlp.fit_critics`;
- actor loss ``-mean Q_1(s, mu(s))``: ``d/dQ_1 = -1/B``, back through the first critic to the action
  columns of its input, then ``d/dz = d/d mu (1 - mu^2)`` and back through the actor.
"""

from __future__ import annotations

from typing import Any

import torch

from digideep.agents.analytic_mlp import StackedMLP, fit_critics, linear_stack
from digideep.agents.off_policy import Transitions
from digideep.agents.td3 import losses

__all__ = ["AnalyticTD3Gradients"]


class AnalyticTD3Gradients:
    """The gradients of TD3's critic step and actor step, without autograd. Use :meth:`build`.

    Args:
        agent: the :class:`~digideep.agents.td3.agent.TD3` (or DDPG) agent.
        actor: the linear layers of its actor.
        actor_target: the linear layers of its target actor.
        activation: the hidden activation of its networks.
    """

    def __init__(
        self, agent: Any, actor: list[torch.nn.Linear], actor_target: list[torch.nn.Linear], activation: str
    ) -> None:
        policy = agent.policy
        self.gamma, self.obs_dim = agent.gamma, agent.obs.dim
        self.policy_noise, self.noise_clip = agent.target_policy_noise, agent.target_noise_clip
        self.critic_grads = [torch.zeros_like(p) for p in agent._critic_params]
        self.actor_grads = [torch.zeros_like(p) for p in agent._actor_params]
        self.critics = StackedMLP.of_ensemble(policy.critic, activation, self.critic_grads)
        self.first_critic = self.critics.member(0)
        self.target_critics = StackedMLP.of_ensemble(policy.critic_target, activation)
        self.actor = StackedMLP.of_linears(actor, activation, self.actor_grads)
        self.target_actor = StackedMLP.of_linears(actor_target, activation)

    @classmethod
    def build(cls, agent: Any, activation: str) -> AnalyticTD3Gradients | None:
        """The hand-written gradients of ``agent``, or None where they do not apply: they need float32
        on the CPU without ``DataParallel``, ReLU or tanh hidden layers, and the policy's own networks."""
        actor, actor_target = linear_stack(agent.policy.actor), linear_stack(agent.policy.actor_target)
        if not StackedMLP.applies(agent, activation) or actor is None or actor_target is None:
            return None
        if actor[1:] != (activation, True) or actor_target[1:] != (activation, True):
            return None
        return cls(agent, actor[0], actor_target[0], activation)

    @torch.no_grad()
    def critic_gradients(
        self, batch: Transitions, noise: torch.Tensor | None
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """As :meth:`TD3._critic_gradients <digideep.agents.td3.agent.TD3._critic_gradients>`."""
        next_obs = batch.next_observations
        next_actions = torch.tanh(self.target_actor.forward(next_obs)[0])
        if noise is not None:
            next_actions = losses.smoothed_target_actions(
                next_actions, noise, self.policy_noise, self.noise_clip
            )
        next_q = self.target_critics.forward(next_obs, next_actions).squeeze(-1).t()
        target = losses.q_target(batch.rewards, batch.terminals, next_q, self.gamma)
        loss, mean_q = fit_critics(self.critics, batch.observations, batch.actions, target)
        return self.critic_grads, loss, mean_q

    @torch.no_grad()
    def actor_gradients(self, observations: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """As :meth:`TD3._actor_gradients <digideep.agents.td3.agent.TD3._actor_gradients>`."""
        actions = torch.tanh(self.actor.forward(observations)[0])
        q = self.first_critic.forward(observations, actions)  # (1, B, 1)
        actor_loss = losses.actor_loss(q[0])
        grad_q = torch.full_like(q, -1.0 / q.shape[1])
        columns = slice(self.obs_dim, None)  # the actions' columns of the critic's input
        grad_actions = self.first_critic.backward(grad_q, weights=False, input_columns=columns)
        self.actor.backward(grad_actions.mul_(1.0 - actions * actions).unsqueeze(0))
        return self.actor_grads, actor_loss
