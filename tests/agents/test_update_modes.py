"""update_mode: what each mode accepts, what ``auto`` picks and says, and CUDA graphs where CUDA is."""

from __future__ import annotations

import pytest
import torch

from digideep.agents import update_modes
from digideep.agents.sac import SAC
from digideep.agents.td3 import TD3
from digideep.agents.update_modes import CudaGraphUpdate, acting_only
from digideep.errors import UsageError
from tests.agents.test_losses_train_as_written import ACTIONS, OBSERVATIONS, SESSION, agent, minibatch


def test_auto_runs_eager_on_the_cpu_and_says_why():
    learner = agent(SAC, "auto")
    assert learner.update_mode == "eager"
    assert learner.update_mode_reason.startswith("CPU: the step is bound by its matrix products")


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("fast", "update_mode 'fast' is not one of eager, compile, cudagraphs, auto"),
        ("cudagraphs", "update_mode 'cudagraphs' needs a CUDA device and this agent runs on cpu"),
    ],
)
def test_a_mode_that_cannot_run_is_refused_in_one_line(mode, message):
    with pytest.raises(UsageError, match=message) as error:
        agent(TD3, mode)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("cls", [SAC, TD3])
def test_an_agent_trained_with_cuda_graphs_acts_on_the_cpu(cls):
    """play and the exported model build the agent with acting_only(args): on an H100, logging the
    model of a cudagraphs run failed with "update_mode 'cudagraphs' needs a CUDA device"."""
    args = {"hidden_sizes": (16, 16), "update_mode": "cudagraphs"}
    learner = cls("agent", SESSION, OBSERVATIONS, ACTIONS, **acting_only(args))
    assert learner.update_mode == "eager" and args["update_mode"] == "cudagraphs"  # the params are kept
    observations = torch.zeros(3, 5).numpy()
    masks = torch.ones(3, 1).numpy()
    actions = learner.action_generator(
        observations, learner.initial_hidden_state(3), masks, deterministic=True
    )
    assert actions["actions"].shape == (3, 2)
    assert acting_only({"lr": 1e-3}) == {"lr": 1e-3}  # an agent without the argument is left alone


def test_an_update_that_cannot_be_captured_is_refused_in_one_line_naming_the_cause(monkeypatch):
    """Only the wrapping is tested here (no CUDA): a capture that fails, as one does on an update that
    reads a value to the host, becomes one line naming the cause and the modes that run it."""

    def capture_fails(*args, **kwargs):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore lines")

    monkeypatch.setattr(update_modes, "_Graph", capture_fails)
    monkeypatch.setattr(CudaGraphUpdate, "WARMUP", 0)  # the eager warm-up needs a CUDA stream
    update = CudaGraphUpdate(lambda x: {"loss": x.sum()}, "agent 'agent'")
    with pytest.raises(UsageError) as error:
        update(torch.ones(2))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("agent 'agent': the update could not be captured as a CUDA graph (CUDA error: ")
    assert message.endswith("remove it, or use update_mode 'compile' or 'eager'")


def test_compile_without_a_cpp_compiler_is_refused_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++ or clang++ on it
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(UsageError, match=r"needs a C\+\+ compiler on the CPU .* or use update_mode 'eager'"):
        agent(SAC, "compile")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("cls", [SAC, TD3])
def test_cuda_graphs_replay_the_eager_update(cls):
    """The captured step is the eager step: the same metrics and weights over warm-up, capture and
    replays (both TD3 variants, with and without the delayed actor step)."""
    session = type(SESSION)(device=torch.device("cuda"), videos_path=None)
    made = {}
    for mode in ("eager", "cudagraphs"):
        torch.manual_seed(0)
        made[mode] = cls("agent", session, OBSERVATIONS, ACTIONS, hidden_sizes=(16, 16), update_mode=mode)
    data = minibatch(steps=12)
    data = type(data)(*(field.cuda() for field in data))
    for mode, learner in made.items():
        torch.manual_seed(3)
        made[mode] = (learner, learner.learn(data))
    (eager, expected), (graphed, got) = made["eager"], made["cudagraphs"]
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    for ours, theirs in zip(graphed.policy.parameters(), eager.policy.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
