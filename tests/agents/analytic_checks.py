"""What the off-policy agents' hand-written gradients are checked with: HalfCheetah-sized agents moved
off their initialization, random minibatches, and a comparison with autograd that fails on any
gradient left unwritten."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch

from digideep.agents.off_policy import Transitions

SESSION = SimpleNamespace(device=torch.device("cpu"), videos_path=None)
OBSERVATIONS = gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)
ACTIONS = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)


def moved_agent(cls: type, **args):
    """A HalfCheetah-sized agent whose parameters were moved off their initialization."""
    torch.manual_seed(0)
    agent = cls("agent", SESSION, OBSERVATIONS, ACTIONS, **args)
    with torch.no_grad():
        for parameter in agent.policy.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return agent


def transitions(steps: int = 1, rows: int = 256, seed: int = 1) -> Transitions:
    """``steps`` random minibatches of ``rows`` transitions, a tenth of them terminal."""
    generator = torch.Generator().manual_seed(seed)
    shape = (steps, rows)
    return Transitions(
        torch.randn(*shape, 17, generator=generator),
        torch.rand(*shape, 6, generator=generator) * 2 - 1,
        torch.randn(*shape, generator=generator),
        torch.randn(*shape, 17, generator=generator),
        (torch.rand(*shape, generator=generator) < 0.1).float(),
    )


def assert_same_as_autograd(
    autograd: Callable[[], Sequence], analytic: Callable[[], Sequence], grads: Sequence[torch.Tensor]
) -> None:
    """``autograd()`` and ``analytic()`` return ``(gradients, *values)``: equal gradients and values.

    ``grads`` (the analytic path's gradient tensors) are filled with NaN first, so a gradient it does
    not write fails.
    """
    expected_grads, *expected = autograd()
    expected_grads = [g.clone() for g in expected_grads]
    for grad in grads:
        grad.fill_(float("nan"))
    got_grads, *got = analytic()
    assert len(got_grads) == len(expected_grads)
    for index, (ours, theirs) in enumerate(zip(got_grads, expected_grads, strict=True)):
        torch.testing.assert_close(
            ours, theirs, rtol=1e-5, atol=1e-6, msg=lambda m, i=index: f"gradient {i}: {m}"
        )
    for index, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        if theirs is None:
            assert ours is None
        else:
            torch.testing.assert_close(
                ours, theirs, rtol=1e-5, atol=1e-5, msg=lambda m, i=index: f"value {i}: {m}"
            )


def _learn(agent, data: Transitions) -> dict[str, float]:
    torch.manual_seed(5)  # the sampling noise
    return agent.learn(data)


def learned_alike(fast, slow, data: Transitions) -> None:
    """Whole gradient steps from one seed, hand-written against autograd: the same metrics up to float
    rounding (parameters are not compared: Adam turns rounding in near-zero gradients into steps of
    ``lr``)."""
    assert fast._analytic is not None and slow._analytic is None
    ours, theirs = _learn(fast, data), _learn(slow, data)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert abs(ours[key] - theirs[key]) <= 1e-3 * max(0.1, abs(theirs[key])), (
            key,
            ours[key],
            theirs[key],
        )


def learned_twice_the_same(make: Callable[[], object], data: Transitions) -> None:
    """Two agents from one seed, the same steps: bit-identical parameters (the default is reproducible)."""
    first = make()
    _learn(first, data)
    second = make()
    _learn(second, data)
    for a, b in zip(first.policy.state_dict().values(), second.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b)
