"""Network building blocks shared by the agents.

- :func:`mlp`: a multilayer perceptron (an ``nn.Sequential``).
- :class:`EnsembleMLP`: ``E`` independent MLPs with stacked parameters, used for the twin critics of
  SAC and TD3: one call, one backward, one optimizer parameter set. The members are evaluated one
  after another with ``torch.addmm`` (docs/measurements.md: why not one ``torch.baddbmm``).
- Mixed precision: under ``torch.autocast`` (the off-policy agents' ``precision="bfloat16"``) the
  hidden layers run in bfloat16 while the output layers run in float32, so Q-values, means and
  log-stds keep float32 resolution.
- :func:`init_linear_default`, :func:`init_orthogonal`: weight initializations (PyTorch's default
  ``nn.Linear`` rule, as SB3 uses for SAC/TD3/DDPG; orthogonal, as SB3 and CleanRL use for PPO).

The image trunk and the observation encoders are :mod:`digideep.agents.encoders`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "MLP",
    "EnsembleMLP",
    "activation",
    "init_linear_default",
    "init_orthogonal",
    "mlp",
    "mlp_layers",
]

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
}


_FUNCTIONS = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "elu": F.elu,
    "gelu": F.gelu,
    "silu": F.silu,
    "leaky_relu": F.leaky_relu,
}

# In-place forms, applied to a fresh matmul output (one allocation less per layer); GELU has none.
_INPLACE = {
    "relu": torch.relu_,
    "tanh": torch.tanh_,
    "elu": F.elu_,
    "silu": lambda x: F.silu(x, inplace=True),
    "leaky_relu": F.leaky_relu_,
}


def activation(name: str) -> nn.Module:
    """An activation module by name (``relu``, ``tanh``, ``elu``, ``gelu``, ``silu``, ``leaky_relu``)."""
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation '{name}'; choose one of {sorted(_ACTIVATIONS)}") from None


def _autocasting(x: torch.Tensor) -> bool:
    return torch.is_autocast_enabled(x.device.type)


class MLP(nn.Sequential):
    """``nn.Sequential`` whose output layer (and output activation) runs in float32 under autocast."""

    def __init__(self, *layers: nn.Module, head_from: int) -> None:
        super().__init__(*layers)
        self.head_from = head_from

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = list(self)
        for layer in layers[: self.head_from]:
            x = layer(x)
        if _autocasting(x):
            with torch.autocast(x.device.type, enabled=False):
                x = x.float()
                for layer in layers[self.head_from :]:
                    x = layer(x)
            return x
        for layer in layers[self.head_from :]:
            x = layer(x)
        return x


def mlp(
    in_dim: int,
    hidden_sizes: Sequence[int],
    out_dim: int,
    activation_name: str = "relu",
    output_activation: str | None = None,
) -> MLP:
    """A multilayer perceptron ``in_dim -> hidden_sizes... -> out_dim``.

    Args:
        in_dim: input features.
        hidden_sizes: widths of the hidden layers, e.g. ``[256, 256]``.
        out_dim: output features.
        activation_name: activation after every hidden layer.
        output_activation: activation after the last layer, or None.

    Returns:
        :class:`MLP` (an ``nn.Sequential``) mapping ``(B, in_dim) float32`` to ``(B, out_dim) float32``.
    """
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden_sizes]
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [nn.Linear(fan_in, fan_out), activation(activation_name)]
    head_from = len(layers)
    layers.append(nn.Linear(sizes[-1], out_dim))
    if output_activation is not None:
        layers.append(activation(output_activation))
    return MLP(*layers, head_from=head_from)


def mlp_layers(network: nn.Module) -> tuple[list[nn.Linear], list[type[nn.Module]]] | None:
    """``(linear layers, hidden activation types)`` of a ``Linear, act, ..., Linear`` stack (what
    :func:`mlp` builds without an output activation) whose linear layers all have a bias, or None.

    PPO's NumPy acting uses it to see whether it applies.
    """
    if not isinstance(network, nn.Sequential):
        return None
    layers = list(network)
    linears, activations = layers[0::2], layers[1::2]
    if len(linears) != len(activations) + 1 or not all(
        isinstance(m, nn.Linear) and m.bias is not None for m in linears
    ):
        return None
    return linears, [type(m) for m in activations]


def init_linear_default(weight: torch.Tensor, bias: torch.Tensor, fan_in: int) -> None:
    """PyTorch's ``nn.Linear`` default: weight and bias uniform in ``±1/sqrt(fan_in)``."""
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        weight.uniform_(-bound, bound)
        bias.uniform_(-bound, bound)


def init_orthogonal(module: nn.Module, gain: float = math.sqrt(2.0), last_gain: float | None = None) -> None:
    """Orthogonal weights and zero biases for every ``nn.Linear``, ``nn.Conv2d`` and recurrent cell.

    Args:
        module: the network.
        gain: gain of all layers but the last linear one.
        last_gain: gain of the last linear layer (e.g. 0.01 for a policy head, 1.0 for a value head);
            ``gain`` when None.
    """
    linears = [m for m in module.modules() if isinstance(m, nn.Linear | nn.Conv2d)]
    for index, layer in enumerate(linears):
        is_last = index == len(linears) - 1
        nn.init.orthogonal_(layer.weight, last_gain if (is_last and last_gain is not None) else gain)
        nn.init.zeros_(layer.bias)
    for cell in (m for m in module.modules() if isinstance(m, nn.RNNCellBase | nn.RNNBase)):
        for name, param in cell.named_parameters():
            nn.init.orthogonal_(param, gain) if "weight" in name else nn.init.zeros_(param)


# kept over torch.func's stack_module_state + vmap: faster in bench/bench_library_pieces.py (docs/measurements.md)
class EnsembleMLP(nn.Module):
    """``ensemble_size`` independent MLPs on the same input, each a chain of ``torch.addmm``.

    Parameters are stacked (one tensor per layer for all members, so one optimizer, one Polyak call
    and one checkpoint layout for the ensemble): layer ``i`` has ``weights[i]: (E, fan_in, fan_out)`` and
    ``biases[i]: (E, 1, fan_out)``. Each member is initialized like its own ``nn.Linear`` stack.

    Args:
        in_dim: input features.
        hidden_sizes: hidden widths.
        out_dim: output features per member (1 for Q-functions).
        ensemble_size: number of members (2 for twin critics).
        activation_name: hidden activation.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int = 1,
        ensemble_size: int = 2,
        activation_name: str = "relu",
    ) -> None:
        super().__init__()
        self.ensemble_size = ensemble_size
        self.out_dim = out_dim
        sizes = [in_dim, *hidden_sizes, out_dim]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            weight = nn.Parameter(torch.empty(ensemble_size, fan_in, fan_out))
            bias = nn.Parameter(torch.empty(ensemble_size, 1, fan_out))
            init_linear_default(weight, bias, fan_in)
            self.weights.append(weight)
            self.biases.append(bias)
        self.act = activation(activation_name)
        self._act_fn = _FUNCTIONS[activation_name]  # functional form: no Module call per layer
        self._act_inplace = _INPLACE.get(activation_name, self._act_fn)

    def layer_params(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """``(weights, biases)``, one entry per layer (cheaper than slicing the ParameterLists)."""
        return list(self.weights._parameters.values()), list(self.biases._parameters.values())

    def forward(
        self,
        x: torch.Tensor,
        params: tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """Evaluate every member.

        Args:
            x: ``(B, in_dim) float32``, shared by all members.
            params: optional ``(weights, biases)`` to use instead of the module's own, e.g. detached
                copies so that a loss reaches the input but not the weights.

        Returns:
            ``(B, E) float32`` when ``out_dim == 1``, else ``(B, E, out_dim)``. Batch-first, so that
            ``torch.nn.DataParallel`` can gather it.
        """
        weights, biases = self.layer_params() if params is None else params
        last = len(weights) - 1
        act = self._act_inplace
        layers = [(w.unbind(0), b.unbind(0)) for w, b in zip(weights, biases, strict=True)]
        autocasting = _autocasting(x)
        outputs = []
        for member in range(self.ensemble_size):
            h = x
            for layer in range(last):
                # in place: addmm's backward needs its inputs, not its output
                h = act(torch.addmm(layers[layer][1][member], h, layers[layer][0][member]))
            w, b = layers[last][0][member], layers[last][1][member]
            if autocasting:
                with torch.autocast(h.device.type, enabled=False):
                    h = torch.addmm(b, h.float(), w)
            else:
                h = torch.addmm(b, h, w)
            outputs.append(h)
        if self.out_dim == 1:
            return torch.cat(outputs, dim=-1)  # (B, E)
        return torch.stack(outputs, dim=1)  # (B, E, out)

    def detached_params(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """``(weights, biases)`` detached from autograd, for :meth:`forward`'s ``params``."""
        weights, biases = self.layer_params()
        return [w.detach() for w in weights], [b.detach() for b in biases]

    def member(self, index: int, x: torch.Tensor, detach: bool = False) -> torch.Tensor:
        """Evaluate one member only (e.g. TD3's actor loss uses Q1).

        Args:
            index: member index in ``[0, E)``.
            x: ``(B, in_dim) float32``.
            detach: use weights detached from autograd.

        Returns:
            ``(B, out_dim) float32``.
        """
        weights, biases = self.layer_params()
        last = len(weights) - 1
        h = x
        for layer, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
            w, b = weight[index], bias[index]
            if detach:
                w, b = w.detach(), b.detach()
            if layer < last:
                h = self._act_fn(torch.addmm(b, h, w))
            elif _autocasting(h):
                with torch.autocast(h.device.type, enabled=False):
                    h = torch.addmm(b, h.float(), w)
            else:
                h = torch.addmm(b, h, w)
        return h
