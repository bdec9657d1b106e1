"""StackedMLP: the forward pass and the gradients of the networks it mirrors, whatever the batch size
of the call before."""

from __future__ import annotations

import pytest
import torch

from digideep.agents.analytic_mlp import StackedMLP, linear_stack
from digideep.agents.networks import EnsembleMLP, mlp


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_an_ensemble_at_changing_batch_sizes_matches_autograd(activation: str) -> None:
    torch.manual_seed(0)
    ensemble = EnsembleMLP(7, [16, 24], 1, 3, activation)
    grads = [torch.full_like(p, float("nan")) for p in ensemble.parameters()]
    stack = StackedMLP.of_ensemble(ensemble, activation, grads)
    for rows in (32, 5, 32):  # the buffers are made again when the batch size changes
        x, upstream = torch.randn(rows, 7, requires_grad=True), torch.randn(rows, 3)
        expected = ensemble(x)  # (B, E)
        expected_grads = torch.autograd.grad(expected, [x, *ensemble.parameters()], upstream)
        got = stack.forward(x[:, :4].detach(), x[:, 4:].detach())  # joined along the features
        torch.testing.assert_close(got.squeeze(-1).t(), expected.detach())
        columns = stack.backward(upstream.t().unsqueeze(-1), input_columns=slice(4, None))
        torch.testing.assert_close(columns, expected_grads[0][:, 4:])
        for ours, theirs in zip(grads, expected_grads[1:], strict=True):
            torch.testing.assert_close(ours, theirs)


def test_a_linear_stack_with_a_tanh_output_and_one_member_of_an_ensemble() -> None:
    torch.manual_seed(0)
    actor = mlp(5, [8, 8], 2, "relu", output_activation="tanh")
    linears, activation, tanh_output = linear_stack(actor)
    assert (activation, tanh_output) == ("relu", True)
    grads = [torch.zeros_like(p) for p in actor.parameters()]
    stack = StackedMLP.of_linears(linears, activation, grads)
    x = torch.randn(10, 5)
    torch.testing.assert_close(torch.tanh(stack.forward(x)[0]), actor(x).detach())

    ensemble = EnsembleMLP(5, [8], 1, 2, "relu")
    second = StackedMLP.of_ensemble(ensemble, "relu").member(1)
    torch.testing.assert_close(second.forward(x)[0], ensemble.member(1, x).detach())


@pytest.mark.parametrize(
    "network",
    [
        mlp(3, [4], 2, "elu"),
        torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2, bias=False)),
        torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Tanh(), torch.nn.Linear(4, 2)),
    ],
    ids=["elu", "no bias", "two activations"],
)
def test_other_networks_are_not_linear_stacks(network: torch.nn.Module) -> None:
    assert linear_stack(network) is None
