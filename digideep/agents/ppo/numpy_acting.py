"""PPO's acting step in NumPy, for feed-forward Gaussian policies on the CPU.

Why: one acting step at HalfCheetah sizes (one row through two 64x64 tanh MLPs, a Gaussian sample and
its log-probability) is a few dozen tiny operations, which eager torch dispatches far more slowly
than NumPy does: enough for acting in torch to outlast the MuJoCo step (docs/measurements.md gives
the figures). The update still runs in torch on the same parameters.

What is fused: actor and critic run as *one* MLP whose first layer stacks both first layers and whose
later layers are block-diagonal (actor block, critic block), so a step is three matmuls instead of
six; its output is ``[mean | value]``. Those matrices are copies, rebuilt whenever the policy's
parameters changed (see :meth:`NumpyGaussianActing.refresh`).

Exploration noise comes from the agent's own NumPy generator (``standard_normal``, cheaper per step
than torch's ``randn``). The agent seeds it from torch's generator and keeps its state in its
checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from digideep.agents.networks import mlp_layers

__all__ = ["NumpyGaussianActing"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

_NUMPY_ACTIVATIONS: dict[type[nn.Module], Callable[[np.ndarray], np.ndarray]] = {
    nn.Tanh: np.tanh,
    nn.ReLU: lambda x: np.maximum(x, 0.0, dtype=x.dtype),
}


def _split(network: nn.Module) -> tuple[list[nn.Linear], list[type[nn.Module]]] | None:
    """:func:`~digideep.agents.networks.mlp_layers` of ``network`` if NumPy has its activations, else None."""
    found = mlp_layers(network)
    if found is None or not all(a in _NUMPY_ACTIVATIONS for a in found[1]):
        return None
    return found


def _block_diagonal(upper: np.ndarray, lower: np.ndarray) -> np.ndarray:
    out = np.zeros((upper.shape[0] + lower.shape[0], upper.shape[1] + lower.shape[1]), upper.dtype)
    out[: upper.shape[0], : upper.shape[1]] = upper
    out[upper.shape[0] :, upper.shape[1] :] = lower
    return out


class NumpyGaussianActing:
    """Actions, values and log-probabilities of a diagonal-Gaussian actor-critic, in NumPy.

    Use :meth:`build`; it returns None where this path does not apply.

    Args:
        policy: an :class:`~digideep.agents.ppo.policy.ActorCriticPolicy` (CPU, Box, no GRU or encoder).
        actor: the actor's linear layers; ``critic``: the critic's, the same widths.
        activations: the hidden activation of each layer but the last (the same in both).
        watched: tensors whose in-place changes mean the parameters changed (the policy's parameters,
            and the flat buffer the optimizer steps).
        rng: the generator of the exploration noise.
    """

    def __init__(
        self,
        policy: Any,
        actor: list[nn.Linear],
        critic: list[nn.Linear],
        activations: list[type[nn.Module]],
        watched: Sequence[torch.Tensor],
        rng: np.random.Generator,
    ) -> None:
        self.policy, self.actor, self.critic = policy, actor, critic
        self.activations = [_NUMPY_ACTIVATIONS[a] for a in activations]
        self.watched, self.rng = list(watched), rng
        self.action_shape = policy.action_shape
        self._version = -1
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []
        self.std = self.log_prob_constant = self._minus_half = np.zeros(0, np.float32)

    @classmethod
    def build(
        cls, policy: Any, watched: Sequence[torch.Tensor], rng: np.random.Generator
    ) -> NumpyGaussianActing | None:
        """The NumPy twin of ``policy``, or None unless it is a CPU float32 feed-forward Gaussian policy
        with tanh or ReLU MLPs of equal widths (see the class for the arguments)."""
        if policy.discrete or policy.gru is not None or policy.encoder is not None:
            return None
        if policy.log_std.device.type != "cpu" or policy.log_std.dtype != torch.float32:
            return None
        actor, critic = _split(policy.unwrapped("actor")), _split(policy.unwrapped("critic"))
        if actor is None or critic is None or actor[1] != critic[1]:
            return None
        if [m.in_features for m in actor[0]] != [m.in_features for m in critic[0]]:
            return None
        return cls(policy, actor[0], critic[0], actor[1], watched, rng)

    def refresh(self) -> None:
        """Rebuild the fused matrices, the std and the log-prob constant if the parameters changed.

        In-place changes of a tensor (``load_state_dict``'s copies, edits by hand) bump its version
        counter; their sum is compared with the one of the last rebuild. Fused Adam does not bump
        them, so the agent calls :meth:`parameters_changed` after its optimizer steps.
        """
        version = sum(t._version for t in self.watched)
        if version == self._version:
            return
        layers = []
        for index, (a, c) in enumerate(zip(self.actor, self.critic, strict=True)):
            wa, wc = a.weight.detach().numpy(), c.weight.detach().numpy()
            # the first layer reads the same input: stack; later ones read their own half
            weight = np.concatenate([wa, wc]) if index == 0 else _block_diagonal(wa, wc)
            bias = np.concatenate([a.bias.detach().numpy(), c.bias.detach().numpy()])
            layers.append((np.ascontiguousarray(weight.T), bias))
        log_std = self.policy.log_std.detach().numpy()
        self.layers = layers
        self.std = np.exp(log_std)
        self.log_prob_constant = -(log_std.sum() + log_std.shape[0] * _LOG_SQRT_2PI)
        self._minus_half = np.full((log_std.shape[0], 1), -0.5, np.float32)
        self._version = version

    def parameters_changed(self) -> None:
        """Rebuild before the next step (the optimizer stepped)."""
        self._version = -1

    def __call__(self, observations: np.ndarray, deterministic: bool) -> dict[str, np.ndarray]:
        """One step for ``W`` workers.

        Args:
            observations: ``(W, obs_dim)`` (cast to float32).
            deterministic: act with the mean.

        Returns:
            ``actions (W, *action_shape)``, ``values (W, 1)`` and ``action_log_probs (W, 1)``, float32.
        """
        self.refresh()
        x = np.asarray(observations, dtype=np.float32).reshape(len(observations), -1)
        for (weight_t, bias), activation in zip(self.layers, self.activations, strict=False):
            x = activation(x @ weight_t + bias)
        weight_t, bias = self.layers[-1]
        out = x @ weight_t + bias
        mean, value = out[:, :-1], out[:, -1:]
        # log N(mean + std * noise | mean, std) = -0.5 |noise|^2 - sum(log std) - d log sqrt(2 pi)
        if deterministic:
            actions = mean
            log_prob = np.full((len(out), 1), self.log_prob_constant, np.float32)
        else:
            noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
            actions = mean + self.std * noise
            # -0.5 |noise|^2 as a matmul: (W, d) @ (d, 1), cheaper than a keepdims reduction
            log_prob = np.square(noise) @ self._minus_half + self.log_prob_constant
        return {
            "actions": actions.reshape(-1, *self.action_shape),
            "values": value,
            "action_log_probs": log_prob,
        }
