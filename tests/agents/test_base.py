"""Shared agent pieces: observation flattening, action scaling, DataParallel-free state dicts, metrics."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from digideep.agents.base import OnDevice
from digideep.agents.sac import SAC
from digideep.agents.sac.policy import SACPolicy
from digideep.agents.utils import BoxScaler, MetricAccumulator, ObservationAdapter
from digideep.errors import UsageError


def test_dict_observations_flatten_in_a_fixed_order() -> None:
    space = gym.spaces.Dict(
        {"b": gym.spaces.Box(-1, 1, (2,)), "a": gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (1, 3))})}
    )
    adapter = ObservationAdapter(space)
    assert adapter.dim == 5
    assert adapter.keys() == ["/observations/a/x", "/observations/b"]  # the space's (sorted) order
    explorer_obs = {"/b": np.ones((4, 2), np.float32), "/a/x": np.zeros((4, 1, 3), np.float32)}
    flat = adapter.from_explorer(explorer_obs, torch.device("cpu"))
    assert flat.shape == (4, 5) and flat[:, :3].eq(0).all() and flat[:, 3:].eq(1).all()
    batch = {
        "/observations/b": torch.ones(3, 4, 2),
        "/observations/a/x": torch.zeros(3, 4, 1, 3),
    }
    assert adapter.from_batch(batch).shape == (3, 4, 5)
    with pytest.raises(TypeError, match="FlattenObservation"):
        ObservationAdapter(gym.spaces.Discrete(3))


def test_box_scaler_maps_bounds_to_unit_interval() -> None:
    scaler = BoxScaler(
        gym.spaces.Box(np.array([-2.0, 0.0]), np.array([2.0, 10.0]), dtype=np.float64), torch.device("cpu")
    )
    actions = torch.tensor([[-2.0, 0.0], [2.0, 10.0], [0.0, 5.0]])
    torch.testing.assert_close(
        scaler.to_normalized(actions), torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    )
    torch.testing.assert_close(scaler.to_env(scaler.to_normalized(actions)), actions)
    with pytest.raises(ValueError, match="RescaleAction"):
        BoxScaler(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), torch.device("cpu"))


def test_data_parallel_policy_saves_plain_names_and_loads_both_ways() -> None:
    # DataParallel needs its module on the first GPU where there is one, and runs it in place elsewhere
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    plain = SACPolicy(3, 2, [8]).to(device)
    wrapped = SACPolicy(3, 2, [8]).to(device)
    wrapped.parallelize(["actor", "critic", "critic_target"], force=True)
    assert isinstance(wrapped.actor, torch.nn.DataParallel)
    state = wrapped.state_dict()
    assert set(state) == set(plain.state_dict()) and not any("module." in k for k in state)
    plain.load_state_dict(state)
    wrapped.load_state_dict({k: v.cpu() for k, v in plain.state_dict().items()})  # as a checkpoint loads
    obs = torch.randn(4, 3, device=device)
    hidden, masks = torch.zeros(4, 1, device=device), torch.ones(4, 1, device=device)
    out_plain = plain.generate_actions(obs, hidden, masks, deterministic=True)
    out_wrapped = wrapped.generate_actions(obs, hidden, masks, deterministic=True)
    torch.testing.assert_close(out_plain["actions"], out_wrapped["actions"])
    actions = torch.zeros(4, 2, device=device)
    torch.testing.assert_close(plain.q_values(obs, actions), wrapped.q_values(obs, actions))


def test_metric_accumulator_means_every_name_once() -> None:
    metrics = MetricAccumulator()
    metrics.add(a=torch.tensor(1.0), b=torch.tensor(4.0))
    metrics.add(a=torch.tensor(3.0))
    assert metrics.result() == {"a": 2.0, "b": 4.0}
    assert MetricAccumulator().result() == {}


def test_precision_is_checked() -> None:
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    with pytest.raises(ValueError, match="precision must be 'float32' or 'bfloat16'"):
        SAC("agent", None, space, space, precision="float16")


def test_bfloat16_update_keeps_float32_weights_and_finite_losses() -> None:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    act_space = gym.spaces.Box(-2, 2, (1,), np.float32)
    agent = SAC("agent", None, obs_space, act_space, precision="bfloat16", hidden_sizes=[16], batch_size=8)
    rng = np.random.default_rng(0)
    batch = {
        "/observations": rng.standard_normal((4, 8, 3)).astype(np.float32),
        "/next_observations": rng.standard_normal((4, 8, 3)).astype(np.float32),
        "/agents/agent/actions": rng.uniform(-2, 2, (4, 8, 1)).astype(np.float32),
        "/rewards": rng.standard_normal((4, 8, 1)).astype(np.float32),
        "/terminals": np.zeros((4, 8, 1), np.float32),
    }
    metrics = agent.update(batch)
    assert all(np.isfinite(v) for v in metrics.values()) and agent.updates == 4
    assert all(p.dtype == torch.float32 for p in agent.policy.parameters())


def test_a_state_saved_on_the_cpu_loads_onto_the_agents_device(device) -> None:
    """Networks and optimizer states reach the agent's device through ``load_state_dict``."""
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    act_space = gym.spaces.Box(-2, 2, (1,), np.float32)
    on_device = OnDevice(torch.device(device))
    torch.manual_seed(0)
    trained = SAC("agent", on_device, obs_space, act_space, hidden_sizes=[16], batch_size=8)
    rng = np.random.default_rng(0)
    trained.update(
        {
            "/observations": rng.standard_normal((2, 8, 3)).astype(np.float32),
            "/next_observations": rng.standard_normal((2, 8, 3)).astype(np.float32),
            "/agents/agent/actions": rng.uniform(-2, 2, (2, 8, 1)).astype(np.float32),
            "/rewards": rng.standard_normal((2, 8, 1)).astype(np.float32),
            "/terminals": np.zeros((2, 8, 1), np.float32),
        }
    )
    state = trained.state_dict()
    assert all(t.device.type == "cpu" for t in _tensors(state))  # what a checkpoint holds
    fresh = SAC("agent", on_device, obs_space, act_space, hidden_sizes=[16], batch_size=8)
    fresh.load_state_dict(state)
    for name, tensor in fresh.policy.state_dict().items():
        assert tensor.device.type == device and torch.equal(tensor.cpu(), state["policy"][name]), name
    moments = [
        value
        for per_param in fresh.critic_optimizer.state.values()
        for key, value in per_param.items()
        if key != "step"
    ]
    assert moments and all(m.device.type == device for m in moments)
    assert fresh.updates == trained.updates == 2


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def test_image_observations_for_an_mlp_policy_are_refused_in_one_line():
    pixels = gym.spaces.Dict({"pixels": gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)})
    with pytest.raises(UsageError) as caught:
        ObservationAdapter(pixels)
    assert str(caught.value) == (
        "observation '/pixels' is an image (84, 84, 3) uint8, and digideep's agents have MLP policies; "
        "use state observations (dm_control: observation 'flat') or an agent with a CNN policy"
    )
