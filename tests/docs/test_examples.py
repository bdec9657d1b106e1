"""The guide's worked example (docs/examples/) in a real Runner: train, checkpoint, reload, resume exactly."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from digideep.environment.make_environment import MakeEnvironment
from digideep.memory import RolloutMemory, check_nan, drop_final_prestep, inspect_shapes
from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.params import apply_cpanel
from digideep.pipeline.resuming import from_checkpoint
from digideep.pipeline.runner import Runner
from digideep.storage.checkpoint import find_checkpoints, load_checkpoint
from digideep.storage.session import Session
from digideep.utility.monitoring import monitor
from digideep.utility.profiling import profiler
from docs.examples import cartpole_reinforce, inspect_chunk, pendulum_redq, samplers
from docs.examples.redq import REDQ, REDQPolicy
from docs.examples.reinforce import Reinforce, discounted_returns
from tests.helpers import assert_same_tensors, assert_same_training
from tests.pipeline.test_resume import final_state, kill_after_checkpoint, resume_command, run, train_command

nan = np.nan

# --8<-- [start:small_params]
SMALL = {
    "number_epochs": 4,
    "epoch_size": 1,
    "n_steps": 32,
    "num_workers": 2,
    "save_interval": 2,
    "test_interval": 2,
    "test_episodes": 1,
    "tracking": False,
}


def small_params() -> dict:
    """The example's params tree with a small cpanel (validated like ``--cpanel``), tracking off."""
    params = cartpole_reinforce.gen_params(apply_cpanel(cartpole_reinforce.cpanel, SMALL))
    assert params["tracking"] == {"enabled": False}
    return params


# --8<-- [end:small_params]


@pytest.fixture(autouse=True)
def fresh_debug_tools():
    """The Monitor and Profiler are process-wide: start every test without other tests' values."""
    monitor.load_state_dict({"windows": {}, "values": {}, "running": {}})
    profiler.reset()


# --8<-- [start:train_and_resume]
def test_example_trains_checkpoints_and_resumes_exactly(tmp_path):
    params = small_params()
    session = Session(root=tmp_path, name="reinforce")
    runner = Runner(session, params)
    try:
        assert isinstance(runner.agents["agent"], Reinforce)
        assert runner.train() == "finished"
    finally:
        runner.close()
        session.close()
    assert runner.counters.iteration == 4 and runner.counters.frames == 4 * 32 * 2
    checkpoints = find_checkpoints(session.checkpoints_location)
    assert [c.iteration for c in checkpoints] == [2, 4]
    _, middle = load_checkpoint(checkpoints[0].path)
    _, straight = load_checkpoint(checkpoints[-1].path)  # states.pt loads with weights_only=True
    written = checkpoints[-1].states_file.stat().st_mtime_ns
    with pytest.raises(AssertionError):  # the last two iterations did learn something
        assert_same_tensors(middle["agents"], straight["agents"])

    # reload the middle checkpoint and train the last two iterations again: the same numbers
    session = Session(root=tmp_path, name="reinforce", resume=True)
    resumed = from_checkpoint(session, checkpoints[0].path)
    try:
        assert resumed.counters.iteration == 2
        assert resumed.train() == "finished"
    finally:
        resumed.close()
        session.close()
    rewritten = find_checkpoints(session.checkpoints_location)[-1]
    assert rewritten.iteration == 4 and rewritten.states_file.stat().st_mtime_ns != written
    _, again = load_checkpoint(rewritten.path)
    assert_same_tensors(straight["agents"], again["agents"], "agents")
    for counter in ("iteration", "frames", "best_test_return", "best_checkpoint"):
        assert straight["counters"][counter] == again["counters"][counter], counter


# --8<-- [end:train_and_resume]


def test_discounted_returns_restart_at_episode_ends_and_stop_at_the_chunk_end():
    nan = np.nan
    chunk = {  # one worker, T = 4: the episode ends by termination at row 1
        "/rewards": np.array([[1, 2, 3, 4, nan]], np.float32)[..., None],
        "/terminals": np.array([[0, 1, 0, 0, nan]], np.float32)[..., None],
        "/truncations": np.array([[0, 0, 0, 0, nan]], np.float32)[..., None],
    }
    returns = discounted_returns(chunk, {"gamma": 0.5})["/returns"][0, :, 0]
    np.testing.assert_allclose(returns[:4], [1 + 0.5 * 2, 2, 3 + 0.5 * 4, 4])
    assert np.isnan(returns[4])
    assert set(chunk) == {"/rewards", "/terminals", "/truncations"}  # the input is not modified


def test_debug_units_inject_into_the_example_sampler(tmp_path, caplog):
    """What docs/samplers.md shows: inspect_shapes and check_nan inserted into an agent's sampler."""
    env = small_params()["env"]
    observation_space, action_space = MakeEnvironment(**env).spaces()
    agent = Reinforce("agent", DeviceChoice(), observation_space, action_space["agent"])
    sampler = agent.sampler
    sampler.insert(sampler.units.index(drop_final_prestep) + 1, check_nan)  # after the NaN row is gone
    sampler.insert(len(sampler.units), inspect_shapes)
    memory = RolloutMemory(num_workers=1)
    T = 3
    memory.store(
        {
            "/observations": np.zeros((1, T + 1, 4), np.float32),
            "/masks": np.ones((1, T + 1, 1), np.float32),
            "/rewards": np.array([[[1], [1], [1], [nan]]], np.float32),
            "/terminals": np.array([[[0], [0], [1], [nan]]], np.float32),
            "/truncations": np.array([[[0], [0], [0], [nan]]], np.float32),
            "/agents/agent/actions": np.zeros((1, T + 1), np.int64),
            "/agents/agent/hidden_state": np.zeros((1, T + 1, 1), np.float32),
        }
    )
    caplog.set_level("INFO", logger="digideep.memory.sampler")
    batch = agent.sample(memory)
    assert batch["/returns"].shape == (T, 1) and batch["/observations"].shape == (T, 4)
    assert "/returns: (3, 1) float32" in caplog.text
    metrics = agent.update(batch)
    assert set(metrics) == {"losses/policy_loss", "charts/entropy", "charts/mean_return"}

    memory.store({**memory.last_chunk(), "/rewards": np.full((1, T + 1, 1), nan, np.float32)})
    with pytest.raises(ValueError, match="check_nan: key '/rewards'"):
        agent.sample(memory)


def test_sampler_examples_run(tmp_path, capsys):
    """docs/examples/samplers.py, shown in docs/samplers.md."""
    samplers.main(tmp_path)
    out = capsys.readouterr().out
    assert "'/observations': (4, 64, 4)" in out and "'/indices': (4, 64, 2)" in out
    assert out.splitlines()[-1].startswith("8 {'/observations': (25, 4)")


def test_inspect_chunk_example_shapes():
    """docs/examples/inspect_chunk.py, shown in docs/trajectories.md."""
    chunk = inspect_chunk.explore_one_chunk()
    assert {key: (value.shape, str(value.dtype)) for key, value in chunk.items()} == {
        "/observations": ((2, 21, 4), "float32"),
        "/next_observations": ((2, 21, 4), "float32"),
        "/masks": ((2, 21, 1), "float32"),
        "/rewards": ((2, 21, 1), "float32"),
        "/terminals": ((2, 21, 1), "float32"),
        "/truncations": ((2, 21, 1), "float32"),
        "/agents/agent/actions": ((2, 21), "int64"),
        "/agents/agent/hidden_state": ((2, 21, 1), "float32"),
    }
    ended = chunk["/terminals"][:, :-1, 0] + chunk["/truncations"][:, :-1, 0]
    np.testing.assert_array_equal(chunk["/masks"][:, 1:, 0], 1.0 - ended)  # masks mark episode starts


# The guide's off-policy example: a REDQ-style SAC written outside the library (docs/examples/redq.py)
REDQ_SMALL = {
    "number_epochs": 4,
    "epoch_size": 2,
    "n_steps": 25,
    "learning_starts": 25,
    "batch_size": 32,
    "hidden_sizes": [16, 16],
    "num_critics": 4,
    "save_interval": 1,
    "test_interval": 2,
    "test_episodes": 1,
    "buffer_size": 70,
}
UPDATE_MODES = ["eager", pytest.param("compile", marks=pytest.mark.compile)]
if torch.cuda.is_available():
    UPDATE_MODES.append("cudagraphs")


SAC_METRICS = {
    "losses/qf_loss",
    "losses/qf_values",
    "losses/actor_loss",
    "losses/alpha_loss",
    "losses/entropy",
    "charts/alpha",
}


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", UPDATE_MODES)
def test_the_redq_example_trains_in_every_update_mode_and_precision(tmp_path, mode, precision):
    params = pendulum_redq.gen_params(
        apply_cpanel(pendulum_redq.cpanel, {**REDQ_SMALL, "update_mode": mode, "number_epochs": 1})
    )
    params["agents"]["agent"]["args"]["precision"] = precision
    params["tracking"] = {"enabled": False}
    session = Session(root=tmp_path, name="redq")
    runner = Runner(session, params, devices=DeviceChoice("cuda" if mode == "cudagraphs" else "cpu"))
    try:
        agent = runner.agents["agent"]
        assert isinstance(agent, REDQ) and agent.update_mode == mode and agent.precision == precision
        assert len(agent.policy.critic.layer_params()[0][0]) == 4  # num_critics reached SAC's ensemble
        metrics = []
        for _ in range(3):  # the stages of three iterations; learning starts in the first
            runner.explore()
            runner.store()
            runner.sample()
            metrics.append(runner.update())
    finally:
        runner.close()
        session.close()
    assert agent.updates == 3 * 25
    for step in metrics:  # SAC's metrics, all finite: REDQ trains through SAC's gradient_step
        assert {key.removeprefix("/agents/agent/") for key in step} == SAC_METRICS
        assert all(np.isfinite(value) for value in step.values())


def test_the_redq_policy_reduces_the_critics_as_redq_does():
    torch.manual_seed(0)
    policy = REDQPolicy(3, 1, [16, 16], num_critics=4, target_subset=2)
    obs, actions = torch.randn(8, 3), torch.rand(8, 1) * 2 - 1
    with torch.no_grad():
        q, target_q = policy.q_values(obs, actions), policy.q_values(obs, actions, target=True)
        torch.testing.assert_close(policy.actor_q(obs, actions), q.mean(dim=-1))  # the ensemble's mean
        subset_min = policy.target_q(obs, actions)  # the minimum over one random pair of target critics
    pairs = [target_q[:, list(pair)].amin(dim=-1) for pair in itertools.combinations(range(4), 2)]
    assert any(torch.equal(subset_min, pair) for pair in pairs)


def test_the_redq_example_resumes_after_a_kill_bit_for_bit(tmp_path, run_env):
    params = "docs/examples/pendulum_redq.py"
    run(train_command(tmp_path, "straight", params, REDQ_SMALL), run_env)
    interrupted = train_command(tmp_path, "killed", params, REDQ_SMALL)
    kill_after_checkpoint(interrupted, run_env, tmp_path / "killed" / "checkpoints", count=2)
    assert not (tmp_path / "killed" / "done.json").exists(), "the run finished before it could be killed"
    run(resume_command(tmp_path, "killed"), run_env)
    straight, _ = final_state(tmp_path, "straight")
    killed, _ = final_state(tmp_path, "killed")
    assert_same_training(straight, killed)
