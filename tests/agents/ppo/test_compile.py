"""PPO's ``torch_compile`` option: the compiled minibatch loss trains as the eager one does."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from digideep.agents.ppo import PPO
from digideep.agents.ppo.agent import Minibatch
from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.memory import RolloutMemory
from tests.agents.ppo.test_acting import ENV, SESSION

ANNEALED = {"batch_size": 16, "n_epochs": 2, "anneal_clip": True, "anneal_lr": True, "total_iterations": 4}


def agent(**args) -> PPO:
    torch.manual_seed(0)
    observation_space, action_space = MakeEnvironment(**ENV).spaces()
    return PPO("agent", SESSION, observation_space, action_space["agent"], **ANNEALED, **args)


def chunks(count: int) -> list[dict]:
    """``count`` real Pendulum chunks of 2 workers x 32 steps, explored by an untrained agent."""
    explorer = Explorer(SESSION, {"agent": agent()}, "train", ENV, 2, 32, seed=0)
    memory = RolloutMemory(2)
    try:
        out = []
        for _ in range(count):
            memory.store(explorer.update())
            out.append(memory.last_chunk())
        return out
    finally:
        explorer.close()


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "clang++")),
    reason="torch.compile on the CPU needs a C++ compiler",
)
def test_the_compiled_loss_and_its_gradients_are_the_eager_ones_at_every_clip_range() -> None:
    """Same parameters, same minibatch: the compiled loss, its parts and its gradients equal eager ones.
    (Whole updates are not compared: Adam turns float rounding in near-zero gradients into steps of
    ``lr``, so two runs drift apart as any two PPO runs on different kernels do.)"""
    compiled = agent(torch_compile=True)
    batch = chunks(1)[0]
    metrics = compiled.update(batch)  # a whole update through the compiled loss (it compiles here)
    assert metrics.keys() == agent().update(batch).keys()
    assert all(np.isfinite(value) for value in metrics.values())

    # the policy moved: ratios differ from 1, so the clip range changes the loss
    data = compiled._prepare(batch)
    minibatch = Minibatch(*(data[k].reshape(-1, *data[k].shape[2:])[:16] for k in Minibatch._fields))
    params = list(compiled.policy.parameters())
    losses = []
    with torch._dynamo.config.patch(error_on_recompile=True):  # another clip range: no recompilation
        for clip in (0.2, 0.001):
            got = compiled._minibatch_loss(minibatch.observations, minibatch, torch.tensor(clip))
            expected = compiled._loss(minibatch.observations, minibatch, clip)
            for name, ours, theirs in zip(
                ("loss", "policy", "value", "entropy", "log_ratio"), got, expected, strict=True
            ):
                torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6, msg=name)
            for ours, theirs in zip(
                torch.autograd.grad(got[0], params), torch.autograd.grad(expected[0], params), strict=True
            ):
                torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
            losses.append(float(got[0]))
    assert losses[0] != losses[1], "the clip range reaches the compiled loss"


def test_without_a_cpp_compiler_the_option_is_refused_in_one_line(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(ValueError, match=r"torch_compile=True needs a C\+\+ compiler"):
        agent(torch_compile=True)
