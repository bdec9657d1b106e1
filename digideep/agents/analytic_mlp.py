"""Forward and backward passes of MLPs written out by hand, into buffers that are reused every step.

Why: at SAC and TD3's HalfCheetah sizes (batch 256, 256x256 networks) a gradient step is about
0.6 GFLOP of matrix products, and on one CPU thread autograd ran it at about 40 % of the speed the
same products reach alone. Most of the rest was not the graph bookkeeping but memory: autograd
allocates every activation and gradient afresh, so each step touches new pages and evicts the
cache the matrix products need. Measured on the twin critics' loss and gradients alone (2 x 256x256,
batch 256, 1 thread): autograd 2.86 ms, the same layers as one ``torch.autograd.Function`` 2.25 ms,
the hand-written pass into reused buffers 1.81 ms (matrix products alone 1.55 ms).

:class:`StackedMLP` evaluates ``E`` MLPs of the same shape on one input batch with ``torch.baddbmm``
(``E = 2`` for twin critics, ``E = 1`` for an actor), keeps each layer's output in a buffer of its
own, and runs the backward pass from a given ``d loss / d output``: each weight's and bias's
gradient is written into a tensor given once at construction, and the gradient of the input is
returned where it is asked for. Buffers are allocated on the first call and again only when the
batch size changes. Everything runs under ``torch.no_grad``: these passes record no graph.

A call's activations live until the next :meth:`StackedMLP.forward` of the same stack, so a
backward pass must follow its own forward pass; the agents call them in that order.

The agents use it where it applies (float32 on the CPU, ReLU or tanh hidden layers) and fall back
to autograd elsewhere: ``sac/analytic_gradients.py`` and ``td3/analytic_gradients.py`` say how, and
their tests check every gradient against autograd's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn

from digideep.agents.networks import EnsembleMLP, mlp_layers

__all__ = ["StackedMLP", "fit_critics", "linear_stack"]


def _relu_backward(grad: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.threshold_backward.grad_input(grad, output, 0.0, grad_input=grad)


def _tanh_backward(grad: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.tanh_backward.grad_input(grad, output, grad_input=grad)


# hidden activation: (forward in place, backward in place into ``grad`` given the activation's output)
_ACTIVATIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], Callable[..., torch.Tensor]]] = {
    "relu": (torch.relu_, _relu_backward),
    "tanh": (torch.tanh_, _tanh_backward),
}
_ACTIVATION_NAMES = {nn.ReLU: "relu", nn.Tanh: "tanh"}


class _Layer(NamedTuple):
    """One layer of ``E`` members: ``y = x @ weight + bias``.

    ``weight`` is ``(E, in, out)`` and ``bias`` ``(E, 1, out)``, views of the parameters (a
    ``nn.Linear``'s weight is seen transposed). ``grad_weight`` and ``grad_bias`` are the tensors the
    gradients go to, shaped like the parameters; ``linear_layout`` says the weight gradient is wanted
    as ``(E, out, in)`` (the layout of ``nn.Linear.weight``).
    """

    weight: torch.Tensor
    bias: torch.Tensor
    grad_weight: torch.Tensor | None
    grad_bias: torch.Tensor | None
    linear_layout: bool


class StackedMLP:
    """``E`` MLPs of one shape, evaluated together, with a hand-written backward pass.

    Use :meth:`of_ensemble` for an :class:`~digideep.agents.networks.EnsembleMLP` and :meth:`of_linears`
    for a stack of ``nn.Linear`` layers (see :func:`linear_stack`).

    Args:
        layers: the layers, input first.
        activation: the hidden layers' activation, ``"relu"`` or ``"tanh"``; none after the last.
    """

    def __init__(self, layers: Sequence[_Layer], activation: str) -> None:
        self.layers = list(layers)
        self.activation = activation
        self.members = self.layers[0].weight.shape[0]
        self._activate, self._activation_backward = _ACTIVATIONS[activation]
        self._rows = -1
        self._outputs: list[torch.Tensor] = []
        self._grads: list[torch.Tensor] = []
        self._input: torch.Tensor | None = None
        self._x: torch.Tensor | None = None  # the last forward's input

    @staticmethod
    def applies(agent: Any, activation: str) -> bool:
        """Whether an off-policy ``agent`` whose networks use ``activation`` can step with stacks: float32
        on the CPU, no ``DataParallel``, ReLU or tanh hidden layers."""
        cpu_float32 = agent.device.type == "cpu" and agent.precision == "float32"
        return cpu_float32 and not agent.data_parallel and activation in _ACTIVATIONS

    @classmethod
    def of_ensemble(
        cls, ensemble: EnsembleMLP, activation: str, grads: Sequence[torch.Tensor] | None = None
    ) -> StackedMLP:
        """The members of ``ensemble``.

        Args:
            ensemble: the ensemble (its current weights are read at every call).
            activation: its hidden activation.
            grads: gradient tensors in ``ensemble.parameters()`` order (all weights, then all biases),
                or None for a stack whose weight gradients are never asked for (a target network).
        """
        weights, biases = ensemble.layer_params()
        grad_weights: Sequence[torch.Tensor | None] = [None] * len(weights)
        grad_biases: Sequence[torch.Tensor | None] = [None] * len(weights)
        if grads is not None:
            grad_weights, grad_biases = grads[: len(weights)], grads[len(weights) :]
        layers = [
            _Layer(w.detach(), b.detach(), gw, gb, linear_layout=False)
            for w, b, gw, gb in zip(weights, biases, grad_weights, grad_biases, strict=True)
        ]
        return cls(layers, activation)

    @classmethod
    def of_linears(
        cls, linears: Sequence[nn.Linear], activation: str, grads: Sequence[torch.Tensor] | None = None
    ) -> StackedMLP:
        """One member made of ``linears``.

        Args:
            linears: the layers, input first; each has a bias.
            activation: the activation between them.
            grads: gradient tensors in parameter order (weight, bias, weight, bias, ...), or None.
        """
        layers = []
        for index, linear in enumerate(linears):
            grad_weight = grad_bias = None
            if grads is not None:
                grad_weight, grad_bias = grads[2 * index].unsqueeze(0), grads[2 * index + 1].view(1, 1, -1)
            weight, bias = linear.weight.detach(), linear.bias.detach()
            layers.append(_Layer(weight.t().unsqueeze(0), bias.view(1, 1, -1), grad_weight, grad_bias, True))
        return cls(layers, activation)

    def member(self, index: int) -> StackedMLP:
        """A stack of member ``index`` alone (views of the same weights and gradients)."""
        one = slice(index, index + 1)
        layers = [
            _Layer(
                layer.weight[one],
                layer.bias[one],
                None if layer.grad_weight is None else layer.grad_weight[one],
                None if layer.grad_bias is None else layer.grad_bias[one],
                layer.linear_layout,
            )
            for layer in self.layers
        ]
        return StackedMLP(layers, self.activation)

    def _buffers(self, rows: int, like: torch.Tensor) -> None:
        if rows == self._rows:
            return
        members = self.members
        self._outputs = [like.new_empty(members, rows, layer.weight.shape[2]) for layer in self.layers]
        # d loss / d (input of layer i) for i >= 1, at index i - 1
        self._grads = [like.new_empty(members, rows, layer.weight.shape[1]) for layer in self.layers[1:]]
        self._input = like.new_empty(rows, self.layers[0].weight.shape[1])
        self._rows = rows

    @torch.no_grad()
    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Evaluate every member on the features ``inputs`` joined along the last axis.

        Args:
            inputs: ``(B, features)`` float32 tensors whose features add up to the input width.

        Returns:
            ``(E, B, out)``, a buffer that the next call of this stack overwrites.
        """
        rows = inputs[0].shape[0]
        self._buffers(rows, inputs[0])
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, dim=-1, out=self._input)
        self._x = x
        h = x.expand(self.members, *x.shape)
        last = len(self.layers) - 1
        for index, (layer, out) in enumerate(zip(self.layers, self._outputs, strict=True)):
            h = torch.baddbmm(layer.bias, h, layer.weight, out=out)
            if index < last:
                self._activate(h)
        return h

    @torch.no_grad()
    def backward(
        self, grad: torch.Tensor, weights: bool = True, input_columns: slice | None = None
    ) -> torch.Tensor | None:
        """The backward pass of the last :meth:`forward`, from ``grad = d loss / d output`` ``(E, B, out)``.

        Args:
            grad: the loss's gradient with respect to the output.
            weights: write every weight's and bias's gradient into its gradient tensor.
            input_columns: also return ``d loss / d input[:, input_columns]``, summed over the members.

        Returns:
            ``(B, columns)`` for ``input_columns``, else None.
        """
        x = self._x
        assert x is not None, "backward before forward"
        inputs = [x.expand(self.members, *x.shape), *self._outputs[:-1]]
        for index in range(len(self.layers) - 1, -1, -1):
            layer, layer_input = self.layers[index], inputs[index]
            if weights:
                if layer.linear_layout:
                    torch.bmm(grad.transpose(1, 2), layer_input, out=layer.grad_weight)
                else:
                    torch.bmm(layer_input.transpose(1, 2), grad, out=layer.grad_weight)
                torch.sum(grad, 1, keepdim=True, out=layer.grad_bias)
            if index:
                grad = torch.bmm(grad, layer.weight.transpose(1, 2), out=self._grads[index - 1])
                grad = self._activation_backward(grad, layer_input)
            elif input_columns is not None:
                weight = layer.weight[:, input_columns]
                return torch.bmm(grad, weight.transpose(1, 2)).sum(0)
        return None


def linear_stack(network: nn.Module) -> tuple[list[nn.Linear], str, bool] | None:
    """``(linear layers, hidden activation, tanh output)`` of a ``Linear, act, ..., Linear[, Tanh]``
    ``nn.Sequential`` (what :func:`~digideep.agents.networks.mlp` builds) with biases and one ReLU or
    tanh activation, or None for any other network."""
    if not isinstance(network, nn.Sequential):
        return None
    layers = list(network)
    tanh_output = len(layers) % 2 == 0 and bool(layers) and isinstance(layers[-1], nn.Tanh)
    found = mlp_layers(nn.Sequential(*layers[:-1]) if tanh_output else network)
    if found is None:
        return None
    linears, activations = found
    names = {_ACTIVATION_NAMES.get(kind) for kind in activations} or {"relu"}  # one Linear: no activation
    if len(names) != 1 or None in names:
        return None
    return linears, names.pop(), tanh_output


@torch.no_grad()
def fit_critics(
    critics: StackedMLP, observations: torch.Tensor, actions: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The critics' squared TD error and its gradients (SAC's, TD3's and DDPG's critic step).

    The loss is ``losses.critic_loss``'s, ``sum_e mean_b (Q_e(s, a) - y)^2``; its derivative with respect
    to ``Q_e`` is ``2 (Q_e - y) / B``. The gradients go into the critics' gradient tensors.

    Args:
        critics: the online critics (``E`` members, one output each).
        observations: ``(B, obs_dim)``.
        actions: ``(B, act_dim)`` normalized.
        target: ``(B,)`` the TD targets.

    Returns:
        ``(loss, mean Q)``, scalars.
    """
    q = critics.forward(observations, actions).squeeze(-1)  # (E, B)
    error = q - target
    rows = error.shape[1]
    loss = error.square().mean(1).sum()
    critics.backward(error.mul_(2.0 / rows).unsqueeze(-1))
    return loss, q.mean()
