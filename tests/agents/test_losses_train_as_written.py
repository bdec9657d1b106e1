"""An edit to an off-policy agent's loss is what trains, in every update mode that runs here.

Each test edits ``agents/<method>/losses.py`` as a researcher would (monkeypatched before the agent is
built), makes one gradient step and checks the parameters moved as the edited loss says: a loss made
zero leaves its networks exactly where they were (Adam's first step on a zero gradient is zero) while
the others move, and an added penalty trains to other weights than the shipped loss. ``cudagraphs``
needs CUDA and is covered where one is present (``tests/agents/test_update_modes.py``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from digideep.agents.base import OnDevice
from digideep.agents.ddpg import DDPG
from digideep.agents.off_policy import Transitions
from digideep.agents.sac import SAC
from digideep.agents.sac import losses as sac_losses
from digideep.agents.td3 import TD3
from digideep.agents.td3 import losses as td3_losses
from digideep.memory import Memory

SESSION = OnDevice(torch.device("cpu"))
OBSERVATIONS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACTIONS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
AGENTS = {"SAC": (SAC, sac_losses), "TD3": (TD3, td3_losses), "DDPG": (DDPG, td3_losses)}


def agent(cls: type, mode: str, **args):
    torch.manual_seed(0)
    return cls("agent", SESSION, OBSERVATIONS, ACTIONS, hidden_sizes=(16, 16), update_mode=mode, **args)


def minibatch(steps: int = 1, rows: int = 32) -> Transitions:
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(steps, rows, 5, generator=generator)
    return Transitions(
        obs,
        torch.rand(steps, rows, 2, generator=generator) * 2 - 1,
        torch.randn(steps, rows, generator=generator),
        obs + 0.1 * torch.randn(steps, rows, 5, generator=generator),
        (torch.rand(steps, rows, generator=generator) < 0.1).float(),
    )


def parameters(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def moved(before: list[torch.Tensor], module: torch.nn.Module) -> list[bool]:
    return [not torch.equal(b, p) for b, p in zip(before, module.parameters(), strict=True)]


def compiled_graphs() -> int:
    """Graphs torch.compile has traced in this process: a compiled update of an edited loss adds some
    (a silent fall-back to eager, e.g. past the recompile limit, adds none)."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def zero(loss_fn):
    """The same loss times zero: the same graph, a zero gradient."""
    return lambda *args, **kwargs: 0.0 * loss_fn(*args, **kwargs)


MODES = pytest.mark.parametrize("mode", ["eager", pytest.param("compile", marks=pytest.mark.compile)])


@MODES
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_critic_loss_made_zero_leaves_the_critics_and_the_actor_still_learns(monkeypatch, name, mode):
    cls, losses = AGENTS[name]
    monkeypatch.setattr(losses, "critic_loss", zero(losses.critic_loss))
    learner = agent(cls, mode)
    critic, actor = parameters(learner.policy.critic), parameters(learner.policy.actor)
    graphs = compiled_graphs()
    metrics = learner.learn(minibatch())  # the first step is also an actor step
    assert (compiled_graphs() > graphs) == (mode == "compile"), "the edited loss was not compiled"
    assert metrics["losses/qf_loss"] == 0.0
    assert not any(moved(critic, learner.policy.critic)), "the critics trained on a loss that was zero"
    assert all(moved(actor, learner.policy.actor))


def replay(steps: int = 40) -> Memory:
    """A RAM memory of ``steps`` random transitions of one worker, with the keys the agents sample."""
    rng = np.random.default_rng(2)
    obs = rng.standard_normal((1, steps + 1, 5)).astype(np.float32)
    memory = Memory(None, num_workers=1, capacity=steps + 1)
    memory.store(
        {
            "/observations": obs,
            "/next_observations": obs + 0.1,
            "/agents/agent/actions": rng.uniform(-1, 1, (1, steps + 1, 2)).astype(np.float32),
            "/rewards": rng.standard_normal((1, steps + 1, 1)).astype(np.float32),
            "/terminals": np.zeros((1, steps + 1, 1), np.float32),
        }
    )
    return memory


@pytest.mark.parametrize("replay_device", ["host", "device"])
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_an_edited_loss_trains_through_either_replay_sampler(monkeypatch, name, replay_device):
    """The Runner's path: ``update(sample(memory))``, minibatches drawn by the numpy sampler or on the
    agent's device (the GPU's path, forced on the CPU): the critic loss made zero still holds."""
    cls, losses = AGENTS[name]
    monkeypatch.setattr(losses, "critic_loss", zero(losses.critic_loss))
    learner = agent(
        cls, "eager", batch_size=8, updates_per_iteration=2, learning_starts=0, replay_device=replay_device
    )
    critic, actor = parameters(learner.policy.critic), parameters(learner.policy.actor)
    metrics = learner.update(learner.sample(replay()))
    assert learner.updates == 2 and metrics["losses/qf_loss"] == 0.0
    assert not any(moved(critic, learner.policy.critic)), "the critics trained on a loss that was zero"
    assert all(moved(actor, learner.policy.actor))


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_an_actor_loss_made_zero_leaves_the_actor_and_the_critics_still_learn(monkeypatch, name):
    cls, losses = AGENTS[name]
    monkeypatch.setattr(losses, "actor_loss", zero(losses.actor_loss))
    learner = agent(cls, "eager")
    critic, actor = parameters(learner.policy.critic), parameters(learner.policy.actor)
    learner.learn(minibatch())
    assert not any(moved(actor, learner.policy.actor)), "the actor trained on a loss that was zero"
    assert all(moved(critic, learner.policy.critic))


def test_a_temperature_loss_made_zero_leaves_the_temperature(monkeypatch):
    monkeypatch.setattr(sac_losses, "alpha_loss", zero(sac_losses.alpha_loss))
    learner = agent(SAC, "eager")
    learner.learn(minibatch())
    assert learner.alpha == 1.0
    monkeypatch.undo()
    unpatched = agent(SAC, "eager")
    unpatched.learn(minibatch())
    assert unpatched.alpha != 1.0


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_penalty_added_to_the_critic_loss_trains_other_weights(monkeypatch, name):
    """The researcher's edit from the issue: a penalty on Q. With the former hand-written default, 0 of
    3 critic weight tensors differed from an unpatched run."""
    cls, losses = AGENTS[name]
    shipped = agent(cls, "eager")
    shipped.learn(minibatch(steps=3))
    original = losses.critic_loss
    monkeypatch.setattr(losses, "critic_loss", lambda q, target: original(q, target) + 0.1 * q.pow(2).mean())
    edited = agent(cls, "eager")
    edited.learn(minibatch(steps=3))
    assert all(moved(parameters(shipped.policy.critic), edited.policy.critic))


@pytest.mark.compile
@pytest.mark.parametrize("name", ["SAC", "TD3"])
def test_compiled_updates_run_the_same_function_as_eager(name):
    """The compiled step is the eager one transformed: the same losses, to float rounding (inductor
    fuses and reorders sums, so not bit for bit), over steps with and without the delayed actor step."""
    cls, _ = AGENTS[name]
    eager, compiled = agent(cls, "eager"), agent(cls, "compile")
    assert (eager.update_mode, compiled.update_mode) == ("eager", "compile")
    data = minibatch(steps=4)
    torch.manual_seed(3)
    expected = eager.learn(data)
    torch.manual_seed(3)
    graphs = compiled_graphs()
    got = compiled.learn(data)
    assert compiled_graphs() > graphs
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    for ours, theirs in zip(compiled.policy.parameters(), eager.policy.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
