"""SAC's critic and actor gradients written out by hand (:mod:`digideep.agents.analytic_mlp` says why).

:class:`AnalyticSACGradients` has the two methods the agent's autograd path has,
:meth:`~digideep.agents.sac.agent.SAC._critic_gradients` and
:meth:`~digideep.agents.sac.agent.SAC._actor_gradients`, with the same arguments and results; the
loss values come from :mod:`~digideep.agents.sac.losses` and only their derivatives are written
here. ``tests/agents/sac/test_analytic_gradients.py`` checks every gradient against autograd's.

The derivatives, for ``B`` rows, ``a = tanh(u)``, ``u = mean + std * noise``, ``std = exp(log_std)``:

- critic loss: see :func:`~digideep.agents.analytic_mlp.fit_critics`;
- actor loss ``mean(alpha log pi(a|s) - min_e Q_e(s, a))``: ``d/dQ_e = -1/B`` for the smallest critic
  of each row (autograd's ``min`` sends it to the index it returns), back through the critics to the
  action columns of their input; ``d/du = d/da (1 - a^2) + 2 alpha a / B``, since the log-density's
  tanh correction ``-log(1 - tanh(u)^2)`` has derivative ``2 tanh(u)``; ``d/d mean = d/du`` and
  ``d/d log_std = d/du std noise - alpha / B``, zero where the clamp of ``log_std`` is active;
- temperature loss ``-mean(log_alpha (log pi + target_entropy))``: ``d/d log_alpha =
  -mean(log pi + target_entropy)``.
"""

from __future__ import annotations

from typing import Any

import torch

from digideep.agents.analytic_mlp import StackedMLP, fit_critics, linear_stack
from digideep.agents.off_policy import Transitions
from digideep.agents.sac import losses
from digideep.agents.sac.policy import LOG_STD_MAX, LOG_STD_MIN, squashed_gaussian

__all__ = ["AnalyticSACGradients"]


class AnalyticSACGradients:
    """The gradients of SAC's critic step and actor step, without autograd. Use :meth:`build`.

    Args:
        agent: the :class:`~digideep.agents.sac.agent.SAC` agent.
        actor: the linear layers of its actor.
        activation: the hidden activation of its networks.
    """

    def __init__(self, agent: Any, actor: list[torch.nn.Linear], activation: str) -> None:
        policy = agent.policy
        self.gamma, self.autotune, self.target_entropy = agent.gamma, agent.autotune, agent.target_entropy
        self.log_alpha = policy.log_alpha
        self.obs_dim = agent.obs.dim
        self.critic_grads = [torch.zeros_like(p) for p in agent._online_params]
        self.actor_grads = [torch.zeros_like(p) for p in agent._actor_params]  # actor, then log_alpha
        self.critics = StackedMLP.of_ensemble(policy.critic, activation, self.critic_grads)
        self.target_critics = StackedMLP.of_ensemble(policy.critic_target, activation)
        self.actor = StackedMLP.of_linears(actor, activation, self.actor_grads)

    @classmethod
    def build(cls, agent: Any, activation: str) -> AnalyticSACGradients | None:
        """The hand-written gradients of ``agent``, or None where they do not apply: they need float32
        on the CPU without ``DataParallel``, ReLU or tanh hidden layers, and the policy's own networks."""
        found = linear_stack(agent.policy.actor)
        if not StackedMLP.applies(agent, activation) or found is None or found[1:] != (activation, False):
            return None
        return cls(agent, found[0], activation)

    def _sample(self, observations: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(actions, log_prob, std, unclamped log_std)`` of the actor at ``observations``."""
        mean, raw_log_std = self.actor.forward(observations)[0].chunk(2, dim=-1)
        log_std = raw_log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        actions, log_prob = squashed_gaussian(mean, log_std, noise)
        return actions, log_prob, log_std.exp(), raw_log_std

    @torch.no_grad()
    def critic_gradients(
        self, batch: Transitions, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """As :meth:`SAC._critic_gradients <digideep.agents.sac.agent.SAC._critic_gradients>`."""
        next_actions, next_log_prob = self._sample(batch.next_observations, noise)[:2]
        next_q = self.target_critics.forward(batch.next_observations, next_actions).squeeze(-1).t()
        target = losses.soft_q_target(
            batch.rewards, batch.terminals, next_q, next_log_prob, alpha, self.gamma
        )
        loss, mean_q = fit_critics(self.critics, batch.observations, batch.actions, target)
        return self.critic_grads, loss, mean_q

    @torch.no_grad()
    def actor_gradients(
        self, observations: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """As :meth:`SAC._actor_gradients <digideep.agents.sac.agent.SAC._actor_gradients>`."""
        actions, log_prob, std, raw_log_std = self._sample(observations, noise)
        q = self.critics.forward(observations, actions)  # (E, B, 1)
        rows = q.shape[1]
        smallest = q.argmin(0, keepdim=True)
        actor_loss = losses.actor_loss(log_prob, q.squeeze(-1).t(), alpha)

        grad_q = torch.zeros_like(q).scatter_(0, smallest, -1.0 / rows)
        grad_actions = self.critics.backward(grad_q, weights=False, input_columns=slice(self.obs_dim, None))
        scale = alpha / rows
        grad_u = grad_actions.mul_(1.0 - actions * actions).add_(actions * (2.0 * scale))
        grad_log_std = (grad_u * std * noise).sub_(scale)
        grad_log_std.mul_((raw_log_std >= LOG_STD_MIN) & (raw_log_std <= LOG_STD_MAX))
        self.actor.backward(torch.cat([grad_u, grad_log_std], dim=-1).unsqueeze(0))

        alpha_loss = None
        if self.autotune:
            alpha_loss = losses.alpha_loss(self.log_alpha, log_prob, self.target_entropy)
            self.actor_grads[-1].copy_((log_prob + self.target_entropy).mean().neg())
        return self.actor_grads, actor_loss, log_prob, alpha_loss
