"""Every agent end to end on a real env: a few updates with the Explorer and a memory, finite losses,
parameters that moved, and a state dict that reloads (``weights_only=True``) to the same agent."""

from __future__ import annotations

import gc
import math
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box

from digideep.agents.ddpg import DDPG
from digideep.agents.ppo import PPO
from digideep.agents.sac import SAC
from digideep.agents.td3 import TD3
from digideep.errors import UsageError
from digideep.pipeline.devices import DeviceChoice
from tests.agents.runner_setup import close, iterate, make_runner, path_of, small_params

SMALL_OFF_POLICY = {
    "batch_size": 32,
    "updates_per_iteration": 8,
    "learning_starts": 32,
    "hidden_sizes": [32, 32],
}
CASES = {
    "sac": (SAC, SMALL_OFF_POLICY, "Pendulum-v1", 1000),
    # the device sampler (the draw and gather of a GPU run), forced on the CPU
    "sac-device-replay": (SAC, {**SMALL_OFF_POLICY, "replay_device": "device"}, "Pendulum-v1", 1000),
    "td3": (TD3, SMALL_OFF_POLICY, "Pendulum-v1", 1000),
    "ddpg-ou": (DDPG, {**SMALL_OFF_POLICY, "noise_type": "ou", "noise_std": 0.3}, "Pendulum-v1", 1000),
    "ppo-box": (PPO, {"batch_size": 16, "n_epochs": 2, "hidden_sizes": [16]}, "Pendulum-v1", None),
    "ppo-discrete": (PPO, {"batch_size": 16, "n_epochs": 2, "hidden_sizes": [16]}, "CartPole-v1", None),
    "ppo-gru": (
        PPO,
        {"batch_size": 32, "n_epochs": 2, "recurrent": True, "recurrent_size": 8},
        "CartPole-v1",
        None,
    ),
}


def snapshot(agent: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in agent.policy.state_dict().items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_agent_learns_a_little_and_round_trips(tmp_path: Path, case: str) -> None:
    cls, args, model_name, capacity = CASES[case]
    torch.manual_seed(0)
    runner = make_runner(tmp_path, small_params(path_of(cls), args, model_name, 2, 16, 8, capacity))
    agent, memory = runner.agents["agent"], runner.memories["train"]
    try:
        before = snapshot(agent)
        metrics = iterate(runner, 3)
        assert metrics[-1], "the last iteration made gradient steps"
        assert all(math.isfinite(v) for m in metrics for v in m.values())
        loss_names = (
            {"losses/qf_loss", "losses/actor_loss"}
            if capacity
            else {"losses/policy_loss", "losses/value_loss"}
        )
        assert loss_names <= set(metrics[-1])
        after = snapshot(agent)
        for name in ("actor", "critic", "heads"):
            changed = [not torch.equal(before[k], after[k]) for k in before if k.startswith(name + ".")]
            assert not changed or any(changed), f"{case}: no {name} parameter changed"
        assert agent.updates > 0

        path = tmp_path / "agent.pt"
        torch.save(agent.state_dict(), path)
        state = torch.load(path, weights_only=True, map_location="cpu")
        twin = cls("agent", runner.devices, agent.observation_space, agent.action_space, **args)
        twin.load_state_dict(state)
        assert twin.updates == agent.updates
        for key, value in snapshot(agent).items():
            torch.testing.assert_close(twin.policy.state_dict()[key], value)
        observations = np.stack([agent.observation_space.sample() for _ in range(3)]).astype(np.float32)
        hidden, masks = agent.initial_hidden_state(3), np.ones((3, 1), np.float32)
        mine = agent.action_generator(observations, hidden, masks, deterministic=True)
        theirs = twin.action_generator(observations, hidden, masks, deterministic=True)
        np.testing.assert_allclose(mine["actions"], theirs["actions"], rtol=1e-6)
        # one more update from the same batch moves both agents the same way (optimizer state restored)
        if capacity:
            batch = agent.sample(memory)
            torch.manual_seed(1)
            agent.update(batch)
            torch.manual_seed(1)
            twin.update(batch)
            for key, value in snapshot(agent).items():
                torch.testing.assert_close(twin.policy.state_dict()[key], value)
    finally:
        close(runner)


def test_action_generator_contract(tmp_path: Path) -> None:
    torch.manual_seed(0)
    runner = make_runner(
        tmp_path, small_params(path_of(PPO), {"recurrent": True, "recurrent_size": 8}, "Pendulum-v1", 2, 4)
    )
    try:
        chunk = runner.explorers["train"].update()
        assert chunk["/agents/agent/hidden_state"].shape == (2, 5, 8)
        assert np.abs(chunk["/agents/agent/hidden_state"][:, 1:]).sum() > 0, "the GRU state flows"
        assert chunk["/agents/agent/artifacts/values"].shape == (2, 5, 1)
        assert chunk["/agents/agent/artifacts/action_log_probs"].dtype == np.float32
    finally:
        close(runner)
    ppo = runner.agents["agent"]
    agent = SAC("agent", runner.devices, ppo.observation_space, ppo.action_space)
    obs = np.zeros((4, 3), np.float32)
    out = agent.action_generator(obs, agent.initial_hidden_state(4), np.ones((4, 1), np.float32), False)
    assert out["actions"].shape == (4, 1) and out["actions"].dtype == np.float32
    assert np.all(np.abs(out["actions"]) <= 2.0) and out["hidden_state"].shape == (4, 1)
    assert out["artifacts"] == {}
    random = agent.random_action_generator(obs, agent.initial_hidden_state(4), np.ones((4, 1), np.float32))
    assert random["actions"].shape == (4, 1) and np.all(np.abs(random["actions"]) <= 2.0)


@pytest.mark.parametrize("cls", [SAC, TD3, DDPG])
@pytest.mark.parametrize("generator", ["action_generator", "random_action_generator"])
def test_acting_keeps_no_earlier_hidden_state_alive(cls: type, generator: str) -> None:
    """An agent without a recurrent state hands its input state back; the Explorer passes that to
    the next step, so an output that viewed its input would chain every earlier step's array."""
    agent = cls("agent", DeviceChoice("cpu"), Box(-1.0, 1.0, (3,)), Box(-2.0, 2.0, (1,)))
    act = getattr(agent, generator)
    obs, masks = np.zeros((2, 3), np.float32), np.ones((2, 1), np.float32)
    hidden = act(obs, agent.initial_hidden_state(2), masks)["hidden_state"]
    first = weakref.ref(hidden)
    for _ in range(3):
        hidden = act(obs, hidden, masks)["hidden_state"]
    gc.collect()
    assert first() is None, "the first step's state is still alive"


def test_off_policy_waits_for_learning_starts(tmp_path: Path) -> None:
    params = small_params(
        path_of(SAC), {**SMALL_OFF_POLICY, "learning_starts": 100}, "Pendulum-v1", 2, 16, capacity=1000
    )
    runner = make_runner(tmp_path, params)
    try:
        assert iterate(runner, 2) == [{}, {}]  # 2 x 16 x 2 = 64 < 100 transitions: nothing to learn yet
        assert iterate(runner, 2)[-1] and runner.agents["agent"].updates == 8
    finally:
        close(runner)


def test_replay_device_samples_tensors_on_the_agents_device_and_is_recorded(tmp_path: Path) -> None:
    args = {**SMALL_OFF_POLICY, "replay_device": "device"}
    runner = make_runner(tmp_path, small_params(path_of(TD3), args, "Pendulum-v1", 2, 16, capacity=40))
    agent, memory = runner.agents["agent"], runner.memories["train"]
    try:
        iterate(runner, 3)  # 48 steps into 40 rows per worker: wrapped
        batch = agent.sample(memory)
        assert all(isinstance(v, torch.Tensor) and v.device == agent.device for v in batch.values())
        data = agent.prepare(batch)
        assert data.observations.shape == (8, 32, 3)
        # the batch is the memory's rows at the drawn indices, taken from the ring (the CPU mirror)
        workers, rows = batch["/indices"][..., 0].numpy(), batch["/indices"][..., 1].numpy()
        np.testing.assert_array_equal(batch["/observations"].numpy(), memory["/observations"][workers, rows])
        assert runner.resolved_settings()["agents/agent/resolved/replay_device"] == "device"
        host = SAC("agent", runner.devices, agent.observation_space, agent.action_space)
        assert (host.replay_device, type(host.sampler).__name__) == ("host", "UniformTransitions")
        with pytest.raises(UsageError, match="replay_device 'gpu' is not one of auto, host, device"):
            SAC("agent", runner.devices, agent.observation_space, agent.action_space, replay_device="gpu")
    finally:
        close(runner)


def test_unknown_parameters_are_refused(tmp_path: Path) -> None:
    import gymnasium as gym

    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    with pytest.raises(TypeError, match=r"unknown parameters \['learning_rate'\]"):
        SAC("agent", None, space, space, learning_rate=1e-3)
    with pytest.raises(TypeError, match="Box action space"):
        TD3("agent", None, space, gym.spaces.Discrete(3))


def test_ddpg_is_td3_with_one_critic_and_no_smoothing() -> None:
    import gymnasium as gym

    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    session = None
    ddpg = DDPG("agent", session, space, space)
    assert isinstance(ddpg, TD3)
    assert (ddpg.policy.critic.ensemble_size, ddpg.policy_frequency, ddpg.target_policy_noise) == (1, 1, 0.0)
    td3 = TD3("agent", session, space, space)
    assert (td3.policy.critic.ensemble_size, td3.policy_frequency, td3.target_policy_noise) == (2, 2, 0.2)
    with pytest.raises(ValueError, match="one critic"):
        DDPG("agent", session, space, space, num_critics=2)


def test_bfloat16_warns_in_one_line_where_the_cpu_lacks_amx(caplog: pytest.LogCaptureFixture) -> None:
    import gymnasium as gym

    from digideep.agents.off_policy import bfloat16_speed_note

    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    with caplog.at_level("WARNING"):
        SAC("agent", None, space, space, precision="bfloat16")
    note = bfloat16_speed_note(torch.device("cpu"))
    warnings = [r.getMessage() for r in caplog.records if "bfloat16" in r.getMessage()]
    if note is None:  # a CPU with AMX: no warning
        assert warnings == []
    else:
        assert len(warnings) == 1 and "\n" not in warnings[0] and "float32" in warnings[0]
