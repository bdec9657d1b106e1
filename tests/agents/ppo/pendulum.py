"""Small Pendulum PPO agents for the update-mode tests: tiny networks (a compile takes seconds, not the
update), one seed for every agent, and one update from a fixed minibatch order."""

from __future__ import annotations

import pytest
import torch

from digideep.agents.ppo import PPO
from digideep.agents.update_modes import compiler_missing
from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.memory import RolloutMemory
from tests.agents.ppo.test_acting import ENV, SESSION

SMALL = {"hidden_sizes": [16], "batch_size": 16, "n_epochs": 2}
"""2 epochs of 4 minibatches on a :func:`pendulum_chunk`."""

COMPILE = pytest.param(
    "compile",
    marks=[
        pytest.mark.compile,
        pytest.mark.skipif(compiler_missing(), reason="compile needs a C++ compiler"),
    ],
)
MODES = pytest.mark.parametrize("mode", ["eager", COMPILE])
"""The update modes that run on the CPU (``cudagraphs`` needs CUDA)."""


def agent(mode: str, **args) -> PPO:
    """A Pendulum PPO agent from seed 0 (the weights that explored :func:`pendulum_chunk`)."""
    torch.manual_seed(0)
    observation_space, action_space = MakeEnvironment(**ENV).spaces()
    return PPO("agent", SESSION, observation_space, action_space["agent"], update_mode=mode, **SMALL, **args)


def pendulum_chunk() -> dict:
    """One Pendulum chunk of 2 workers x 32 steps, explored by :func:`agent`'s initial weights."""
    explorer = Explorer(SESSION, {"agent": agent("eager")}, "train", ENV, 2, 32, seed=0)
    memory = RolloutMemory(2)
    try:
        memory.store(explorer.update())
        return memory.last_chunk()
    finally:
        explorer.close()


def update(learner: PPO, chunk: dict) -> dict[str, float]:
    """One update from a fixed minibatch order (two agents see the same minibatches); sets
    ``learner.new_graphs``, the graphs torch.compile traced meanwhile."""
    graphs = compiled_graphs()
    torch.manual_seed(1)
    metrics = learner.update(chunk)
    learner.new_graphs = compiled_graphs() - graphs
    return metrics


def compiled_graphs() -> int:
    """Graphs torch.compile has traced in this process (a compiled update of a new loss adds some)."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]
