"""PPO's update modes: eager is reproducible, compile trains as eager does without recompiling as the
clip range and learning rate anneal, and ``auto`` picks and says what the measurement says."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from digideep.agents.ppo import PPO
from digideep.errors import UsageError
from tests.agents.ppo.pendulum import COMPILE, SMALL, agent, update
from tests.agents.ppo.test_acting import SESSION

ANNEALED = {"anneal_clip": True, "anneal_lr": True, "total_iterations": 4}


def test_two_eager_runs_from_one_seed_are_bit_identical(chunk) -> None:
    runs = []
    for _ in range(2):
        learner = agent("eager")
        metrics = [update(learner, chunk) for _ in range(2)]
        runs.append((learner.state_dict(), metrics))
    (first, first_metrics), (second, second_metrics) = runs
    assert first_metrics == second_metrics
    assert first["acting_rng"] == second["acting_rng"]
    for key, value in first["policy"].items():
        assert torch.equal(second["policy"][key], value), key
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(first["optimizer"]["state"][0][key], second["optimizer"]["state"][0][key])


@pytest.mark.parametrize("mode", [COMPILE])
def test_compile_trains_as_eager_does_and_annealing_recompiles_nothing(chunk, mode) -> None:
    """Two annealed updates from one seed: the same metrics as eager's to float rounding (inductor fuses
    and reorders sums, and Adam turns rounding in near-zero gradients into steps of ``lr``, so not bit
    for bit), and the second update, at another clip range and learning rate, compiles nothing new."""
    eager, compiled = agent("eager", **ANNEALED), agent(mode, **ANNEALED)
    assert compiled.update_mode == "compile"
    before = [p.detach().clone() for p in compiled.policy.parameters()]
    expected, got = update(eager, chunk), update(compiled, chunk)
    with torch._dynamo.config.patch(error_on_recompile=True):
        expected_next, got_next = update(eager, chunk), update(compiled, chunk)
    assert got_next["charts/learning_rate"] < got["charts/learning_rate"]
    for ours, theirs in ((got, expected), (got_next, expected_next)):
        assert ours.keys() == theirs.keys()
        assert all(np.isfinite(value) for value in ours.values())
        for key, value in theirs.items():
            assert ours[key] == pytest.approx(value, rel=1e-2, abs=1e-3), key
    assert all(not torch.equal(b, p) for b, p in zip(before, compiled.policy.parameters(), strict=True))


def test_auto_says_what_it_picks_and_why(monkeypatch) -> None:
    """The reason is the agent's; the Runner logs it beside the mode (test_main checks the line)."""
    mlp = agent("auto")
    recurrent = agent("auto", recurrent=True, recurrent_size=8)
    assert mlp.update_mode == "compile"
    assert mlp.update_mode_reason.startswith("CPU: compile runs")
    assert recurrent.update_mode == "eager"
    assert recurrent.update_mode_reason.startswith("a recurrent policy")

    monkeypatch.setenv("PATH", "")  # no g++ or clang++
    monkeypatch.delenv("CXX", raising=False)
    without = agent("auto")
    assert without.update_mode == "eager"
    assert without.update_mode_reason.startswith("compile would need a C++ compiler")
    with pytest.raises(UsageError, match=r"update_mode 'compile' needs a C\+\+ compiler") as error:
        agent("compile")
    assert "\n" not in str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [COMPILE])
def test_a_recurrent_policy_trains_compiled_too(mode) -> None:
    """The GRU's sequence features are computed inside the one step function: compile unrolls them."""
    observations = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    actions = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    learners = {}
    for name in ("eager", mode):
        torch.manual_seed(0)
        learners[name] = PPO(
            "agent",
            SESSION,
            observations,
            actions,
            update_mode=name,
            recurrent=True,
            recurrent_size=8,
            **SMALL,
        )
    workers, steps = 4, 8
    generator = torch.Generator().manual_seed(1)
    batch = {
        "/observations": torch.randn(workers, steps + 1, 3, generator=generator).numpy(),
        "/next_observations": torch.randn(workers, steps + 1, 3, generator=generator).numpy(),
        "/masks": (torch.rand(workers, steps + 1, 1, generator=generator) > 0.1).float().numpy(),
        "/rewards": torch.randn(workers, steps + 1, 1, generator=generator).numpy(),
        "/terminals": np.zeros((workers, steps + 1, 1), np.float32),
        "/truncations": np.zeros((workers, steps + 1, 1), np.float32),
        "/agents/agent/actions": torch.randn(workers, steps + 1, 1, generator=generator).numpy(),
        "/agents/agent/hidden_state": torch.randn(workers, steps + 1, 8, generator=generator).numpy(),
        "/agents/agent/artifacts/values": torch.randn(workers, steps + 1, 1, generator=generator).numpy(),
        "/agents/agent/artifacts/action_log_probs": -torch.rand(
            workers, steps + 1, 1, generator=generator
        ).numpy(),
    }
    expected, got = (update(learners[name], batch) for name in ("eager", mode))
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-2, abs=1e-3), key


@pytest.mark.parametrize("mode", [COMPILE])
def test_many_compiled_agents_in_one_process_all_run_compiled(chunk, mode) -> None:
    """Every new agent adds a cache entry to the same compiled code (dynamo guards on the identity of the
    optimizer the update passes to ``adam_step``); past dynamo's default limit of 8 the rest of a
    process (a tuning study, a test worker) silently ran the update uncompiled, and a run resumed in a
    fresh process then computed other numbers. Here hitting the limit raises instead of falling back."""
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for _ in range(12):
            update(agent(mode), chunk)
