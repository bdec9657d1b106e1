"""``adam_step``: gradients from ``torch.autograd.grad`` give the same Adam update as ``backward``/``step``."""

from __future__ import annotations

import copy

import pytest
import torch

from digideep.agents.networks import EnsembleMLP, mlp
from digideep.agents.utils import adam_step, optimizer_params


def _loss(
    actor: torch.nn.Module, critic: EnsembleMLP, log_alpha: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    out = actor(x)
    return critic(torch.cat([x, out], dim=-1)).square().mean() + (log_alpha * out.mean()).squeeze()


@pytest.mark.parametrize("fused", [True, False])
def test_adam_step_matches_optimizer_step_bit_for_bit(fused: bool) -> None:
    torch.manual_seed(0)
    actor, critic = mlp(5, [16], 3), EnsembleMLP(8, [16], 1, 2)
    log_alpha = torch.nn.Parameter(torch.zeros(1))
    nets = (actor, critic, log_alpha)
    twin = copy.deepcopy(nets)

    def make(a: torch.nn.Module, c: EnsembleMLP, la: torch.Tensor) -> torch.optim.Adam:
        groups = [{"params": [*a.parameters(), *c.parameters()]}, {"params": [la], "lr": 1e-2}]
        return torch.optim.Adam(groups, lr=3e-3, fused=fused, foreach=None if fused else True)

    reference, fast = make(*nets), make(*twin)
    params = optimizer_params(fast)
    for step in range(4):  # the first step creates the state through step(), the rest take the fast path
        x = torch.randn(32, 5, generator=torch.Generator().manual_seed(step))
        reference.zero_grad(set_to_none=True)
        _loss(*nets, x).backward()
        reference.step()
        adam_step(fast, torch.autograd.grad(_loss(*twin, x), params))
    for a, b in zip(optimizer_params(reference), params, strict=True):
        assert torch.equal(a, b)
        assert b.grad is None
    for a, b in zip(reference.state.values(), fast.state.values(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))


def test_the_first_step_leaves_each_gradient_field_as_it_was() -> None:
    """Before Adam has state, ``adam_step`` goes through ``step()``: the ``.grad`` fields it sets for
    that are put back (PPO's flat buffer keeps its gradient tensor for the next minibatch)."""
    flat, fresh = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(2))
    kept = flat.grad = torch.zeros(4)
    optimizer = torch.optim.Adam([flat, fresh], lr=0.1)
    adam_step(optimizer, [torch.ones(4), torch.ones(2)])
    assert flat.grad is kept and fresh.grad is None
    assert optimizer.state[flat] and not torch.equal(flat.detach(), torch.ones(4))
