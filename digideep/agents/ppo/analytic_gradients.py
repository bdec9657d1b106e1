"""PPO's minibatch loss and its gradients written out by hand, for feed-forward Gaussian MLP policies.

Why: at HalfCheetah sizes (64x64 networks, minibatches of 64) a PPO gradient step is a few hundred
microseconds of arithmetic wrapped in about a millisecond of per-operation overhead: autograd
records every forward operation, the ``Normal`` distribution builds its tensors, and the backward
pass walks the graph node by node. The loss here is the one :meth:`PPO._loss` computes (clipped
surrogate, optionally clipped value loss, entropy bonus), and its derivative is short enough to
write down, so this module runs the forward pass, then the backward pass as explicit matrix
products straight into the gradient views of :class:`~.flat_parameters.FlatParameters`: no graph,
no distribution objects, no gradient zeroing (every gradient is overwritten).

It is a twin of the autograd path, not a second definition of PPO: ``tests/agents/ppo`` checks
that the loss, its parts and every gradient equal autograd's on the same minibatch, with clipping
active in both the surrogate and the value loss. The agent uses it only where it applies
(:meth:`AnalyticGaussianStep.build`) and only while ``PPO._loss`` is not overridden, so a subclass
that changes the loss gets autograd. ``PPO(analytic_gradients=False)`` turns it off.

The derivatives, for a minibatch of ``B`` rows (``A`` advantages, ``r = exp(log p - log p_old)``,
``eps`` the clip range, ``z = (a - mean) / std``):

- surrogate ``-mean(min(r A, clip(r) A))``: ``d/d log p = -(A r / B)`` where the unclipped term is
  the smaller or equal, else 0. Inside the clip range both terms are the same product, and
  autograd's halves for a tie add up to the same; outside it the clipped term has no gradient;
- log-density ``log p = -|z|^2 / 2 - sum(log std) - d log sqrt(2 pi)``: ``d/d mean = z / std``,
  ``d/d log std = z^2 - 1``;
- value loss ``0.5 mean(max((V - R)^2, (V_c - R)^2))`` with ``V_c = V_old + clip(V - V_old)``:
  ``d/dV = (V - R) / B`` where the first term is the larger or equal, ``(V_c - R) / B`` where the
  second is larger and the clip is inactive, else 0. (Autograd splits a tie in half; the two halves
  are then equal up to rounding unless the clip is active and the errors are opposite, a case of
  probability zero.)
- entropy ``sum(log std) + d (1/2 + log sqrt(2 pi))`` per row: ``d/d log std = 1``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from digideep.agents.networks import mlp_layers

__all__ = ["AnalyticGaussianStep"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

# activation: (forward in place, backward given the activation's *output*)
_ACTIVATIONS: dict[type[nn.Module], tuple[Any, Any]] = {
    nn.Tanh: (torch.tanh_, torch.ops.aten.tanh_backward),
    nn.ReLU: (torch.relu_, lambda grad, out: torch.ops.aten.threshold_backward(grad, out, 0.0)),
}


class _Network:
    """The linear layers of one ``Linear, act, ..., Linear`` MLP (their ``.grad`` are written) and its
    activation. Use :meth:`of`."""

    def __init__(self, linears: list[nn.Linear], activation: type[nn.Module]) -> None:
        self.linears = linears
        self.forward_activation, self.backward_activation = _ACTIVATIONS[activation]

    @classmethod
    def of(cls, network: nn.Module) -> _Network | None:
        """The MLP ``network``, or None unless its hidden layers share one activation this module has."""
        found = mlp_layers(network)
        if found is None:
            return None
        linears, activations = found
        kinds = set(activations) or {nn.Tanh}  # a single Linear has no activation: any will do
        if len(kinds) != 1 or not kinds <= _ACTIVATIONS.keys():
            return None
        return cls(linears, kinds.pop())

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``[x, h1, ..., h_L, out]``: the input, each hidden activation and the output."""
        outputs = [x]
        for layer in self.linears[:-1]:
            x = self.forward_activation(F.linear(x, layer.weight, layer.bias))
            outputs.append(x)
        last = self.linears[-1]
        outputs.append(F.linear(x, last.weight, last.bias))
        return outputs

    def backward(self, outputs: list[torch.Tensor], grad: torch.Tensor) -> None:
        """Write ``d loss / d parameter`` into each layer's ``.grad`` given ``grad = d loss / d out``."""
        for index in range(len(self.linears) - 1, -1, -1):
            layer, layer_input = self.linears[index], outputs[index]
            torch.mm(grad.t(), layer_input, out=layer.weight.grad)
            torch.sum(grad, 0, out=layer.bias.grad)
            if index:
                grad = self.backward_activation(grad @ layer.weight, layer_input)


class AnalyticGaussianStep:
    """The loss of :meth:`PPO._loss` and its gradients, for a diagonal-Gaussian MLP actor-critic.

    Use :meth:`build`; it returns None where this path does not apply.

    Args:
        policy: an :class:`~digideep.agents.ppo.policy.ActorCriticPolicy` whose parameters have
            gradient tensors (``FlatParameters`` gives them views of one flat buffer).
        actor: the policy's actor MLP.
        critic: the policy's critic MLP.
        vf_coef: the value loss coefficient (as in :class:`~digideep.agents.ppo.agent.PPO`).
        ent_coef: the entropy bonus coefficient.
        clip_value_loss: clip the value loss with the clip range.
    """

    def __init__(
        self,
        policy: Any,
        actor: _Network,
        critic: _Network,
        vf_coef: float,
        ent_coef: float,
        clip_value_loss: bool,
    ) -> None:
        self.policy, self.actor, self.critic = policy, actor, critic
        self.vf_coef, self.ent_coef, self.clip_value_loss = vf_coef, ent_coef, clip_value_loss

    @classmethod
    def build(
        cls, policy: Any, vf_coef: float, ent_coef: float, clip_value_loss: bool
    ) -> AnalyticGaussianStep | None:
        """The analytic step of ``policy``, or None unless it is a feed-forward Gaussian policy (no GRU,
        no encoder) of tanh or ReLU MLPs in float32 whose parameters all have gradient tensors."""
        if policy.discrete or policy.gru is not None or policy.encoder is not None:
            return None
        if policy.log_std.dtype != torch.float32:
            return None
        actor, critic = _Network.of(policy.unwrapped("actor")), _Network.of(policy.unwrapped("critic"))
        if actor is None or critic is None or any(p.grad is None for p in policy.parameters()):
            return None
        return cls(policy, actor, critic, vf_coef, ent_coef, clip_value_loss)

    @torch.no_grad()
    def __call__(
        self, observations: torch.Tensor, batch: Any, clip: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One minibatch: write every parameter's gradient; return what :meth:`PPO._loss` returns.

        Args:
            observations: ``(B, obs_dim)`` float32.
            batch: the :class:`~digideep.agents.ppo.agent.Minibatch` (advantages already normalized).
            clip: the clip range.

        Returns:
            ``(loss, policy_loss, value_loss, mean entropy, log_ratio (B,))``, detached.
        """
        rows = observations.shape[0]
        log_std = self.policy.log_std
        actor_out, critic_out = self.actor.forward(observations), self.critic.forward(observations)
        mean, values = actor_out[-1], critic_out[-1].view(-1)
        dims = mean.shape[1]

        # the log-density of the taken actions and the log-ratio
        inv_std = torch.exp(-log_std)
        z = (batch.actions.reshape(rows, dims) - mean) * inv_std
        log_std_sum = log_std.sum()
        log_prob = (z * z).sum(1).mul_(-0.5).sub_(log_std_sum + dims * _LOG_SQRT_2PI)
        log_ratio = log_prob.sub_(batch.log_probs)
        ratio = torch.exp(log_ratio)

        # clipped surrogate and d loss / d log p
        advantages = batch.advantages
        unclipped = ratio * advantages
        clipped = ratio.clamp(1.0 - clip, 1.0 + clip).mul_(advantages)
        policy_loss = -torch.minimum(unclipped, clipped).mean()
        # the unclipped term carries the gradient where it is the smaller; inside the clip range the two
        # terms are the same product (equal), and there autograd's two halves add up to the same
        grad_log_prob = unclipped.mul_(unclipped <= clipped).mul_(-1.0 / rows)

        # value loss and d loss / d V
        error = values - batch.returns
        if self.clip_value_loss:
            delta = values - batch.values
            clipped_error = (batch.values + delta.clamp(-clip, clip)).sub_(batch.returns)
            first, second = error * error, clipped_error * clipped_error
            value_loss = 0.5 * torch.maximum(first, second).mean()
            # the larger term carries the gradient, the clipped one only where its clip is inactive
            grad_values = torch.where(first >= second, error, clipped_error.mul_(delta.abs_() <= clip))
        else:
            value_loss = 0.5 * (error * error).mean()
            grad_values = error
        grad_values = grad_values.mul_(self.vf_coef / rows)

        # d loss / d mean and d loss / d log std
        z_grad = z * grad_log_prob.unsqueeze(1)
        grad_log_std = (z_grad * z).sum(0).sub_(grad_log_prob.sum())
        if self.ent_coef:
            grad_log_std.sub_(self.ent_coef)
        log_std.grad.copy_(grad_log_std)
        self.actor.backward(actor_out, z_grad.mul_(inv_std))
        self.critic.backward(critic_out, grad_values.unsqueeze(1))

        entropy = log_std_sum + dims * (0.5 + _LOG_SQRT_2PI)
        loss = policy_loss + self.vf_coef * value_loss
        if self.ent_coef:
            loss = loss - self.ent_coef * entropy
        return loss, policy_loss, value_loss, entropy, log_ratio
