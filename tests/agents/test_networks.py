"""Network blocks: the ensemble equals independent MLPs, detached weights stop gradients."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from digideep.agents.networks import EnsembleMLP, init_orthogonal, mlp


def reference_member(net: EnsembleMLP, index: int, x: torch.Tensor) -> torch.Tensor:
    h = x
    for layer, (w, b) in enumerate(zip(net.weights, net.biases, strict=True)):
        h = F.linear(h, w[index].T, b[index, 0])
        if layer < len(net.weights) - 1:
            h = torch.relu(h)
    return h


def test_ensemble_equals_independent_mlps() -> None:
    torch.manual_seed(0)
    net = EnsembleMLP(5, [8, 8], out_dim=1, ensemble_size=3)
    x = torch.randn(4, 5)
    out = net(x)
    assert out.shape == (4, 3)
    for k in range(3):
        torch.testing.assert_close(out[:, k : k + 1], reference_member(net, k, x))
        torch.testing.assert_close(net.member(k, x), reference_member(net, k, x))


def test_ensemble_multi_output_shape_and_default_init_bounds() -> None:
    net = EnsembleMLP(7, [16], out_dim=3, ensemble_size=2)
    assert net(torch.randn(5, 7)).shape == (5, 2, 3)
    assert net.weights[0].abs().max() <= 1 / math.sqrt(7)
    assert net.weights[1].abs().max() <= 1 / math.sqrt(16)
    assert not torch.equal(net.weights[0][0], net.weights[0][1]), "members must start different"


def test_detached_params_send_gradients_to_the_input_only() -> None:
    net = EnsembleMLP(3, [4], 1, 2)
    x = torch.randn(6, 3, requires_grad=True)
    net(x, net.detached_params()).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is None for p in net.parameters())
    x.grad = None
    net.member(0, x, detach=True).sum().backward()
    assert x.grad.abs().sum() > 0 and all(p.grad is None for p in net.parameters())


def test_mlp_and_orthogonal_init() -> None:
    net = mlp(4, [32, 32], 2, "tanh", output_activation="tanh")
    assert net(torch.randn(3, 4)).abs().max() <= 1
    init_orthogonal(net, gain=1.0, last_gain=0.01)
    first = net[0].weight
    torch.testing.assert_close(first.T @ first, torch.eye(4), atol=1e-5, rtol=0)
    assert net[-2].weight.abs().max() < 0.05 and net[0].bias.abs().sum() == 0


def test_unknown_activation_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        mlp(2, [3], 1, "swish")
