"""PPO's fast paths: NumPy acting agrees with the torch policy, and the flat parameter buffer trains
the modules' own parameters."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Normal

from digideep.agents.base import AgentBase, OnDevice
from digideep.agents.ppo import PPO
from digideep.agents.ppo.numpy_acting import NumpyGaussianActing
from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.memory import RolloutMemory

SESSION = OnDevice(torch.device("cpu"))
ENV = {"model_name": "Pendulum-v1"}


def trained_agent(**args) -> tuple[PPO, dict]:
    """A PPO agent after one eager update on a real Pendulum chunk, and that chunk."""
    torch.manual_seed(0)
    observation_space, action_space = MakeEnvironment(**ENV).spaces()
    args = {"batch_size": 16, "n_epochs": 2, "update_mode": "eager", **args}
    agent = PPO("agent", SESSION, observation_space, action_space["agent"], **args)
    explorer = Explorer(SESSION, {"agent": agent}, "train", ENV, 2, 32, seed=0)
    memory = RolloutMemory(2)
    try:
        memory.store(explorer.update())
        batch = agent.sample(memory)
        agent.update(batch)
    finally:
        explorer.close()
    return agent, batch


def torch_outputs(agent: PPO, observations: np.ndarray, deterministic: bool) -> dict:
    """The generic (torch) acting path of the same agent."""
    hidden, masks = agent.initial_hidden_state(len(observations)), np.ones((len(observations), 1), np.float32)
    return AgentBase.action_generator(agent, observations, hidden, masks, deterministic)


def test_numpy_acting_matches_the_torch_policy_after_updates() -> None:
    agent, _ = trained_agent()
    assert agent._numpy_acting is not None, "a CPU MLP Gaussian policy acts in NumPy"
    observations = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    hidden, masks = agent.initial_hidden_state(5), np.ones((5, 1), np.float32)

    fast = agent.action_generator(observations, hidden, masks, deterministic=True)
    reference = torch_outputs(agent, observations, deterministic=True)
    for key in ("values", "action_log_probs"):
        np.testing.assert_allclose(fast["artifacts"][key], reference["artifacts"][key], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast["actions"], reference["actions"], rtol=1e-5, atol=1e-6)

    sampled = agent.action_generator(observations, hidden, masks, deterministic=False)
    with torch.no_grad():
        dist = agent.policy.distribution(torch.from_numpy(observations))
        log_prob = dist.log_prob(torch.from_numpy(sampled["actions"])).sum(-1, keepdim=True)
    assert not np.allclose(sampled["actions"], fast["actions"]), "stochastic actions carry noise"
    np.testing.assert_allclose(
        sampled["artifacts"]["action_log_probs"], log_prob.numpy(), rtol=1e-5, atol=1e-5
    )
    assert sampled["actions"].dtype == np.float32 and sampled["actions"].shape == (5, 1)

    # hand edits of the parameters reach the next action too
    with torch.no_grad():
        agent.policy.critic[-1].bias.add_(1.0)
    moved = agent.action_generator(observations, hidden, masks, deterministic=True)
    np.testing.assert_allclose(moved["artifacts"]["values"], fast["artifacts"]["values"] + 1.0, rtol=1e-5)


@pytest.mark.parametrize(
    ("args", "action_space", "applies"),
    [
        ({}, None, True),
        ({"activation": "relu", "hidden_sizes": (8, 4, 2)}, None, True),
        ({"hidden_sizes": ()}, None, True),
        ({"activation": "elu"}, None, False),
        ({"recurrent": True, "recurrent_size": 8}, None, False),
        ({}, gym.spaces.Discrete(3), False),
    ],
    ids=["tanh", "relu 3 layers", "linear", "elu", "gru", "discrete"],
)
def test_numpy_acting_runs_what_it_can_and_refuses_the_rest(args, action_space, applies) -> None:
    """NumPy acts for a feed-forward Gaussian policy of tanh or ReLU MLPs; anything else acts in torch."""
    observations = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    actions = action_space or gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    agent = PPO("agent", SESSION, observations, actions, update_mode="eager", **args)
    assert (agent._numpy_acting is not None) is applies
    if applies:  # and it acts as the torch policy does
        x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
        hidden, masks = agent.initial_hidden_state(4), np.ones((4, 1), np.float32)
        fast = agent.action_generator(x, hidden, masks, deterministic=True)
        reference = torch_outputs(agent, x, deterministic=True)
        np.testing.assert_allclose(fast["actions"], reference["actions"], rtol=1e-5, atol=1e-6)


def test_an_edited_network_acts_in_torch() -> None:
    """A network that is no longer a plain ``Linear, act, ..., Linear`` stack is refused by NumPy acting."""
    torch.manual_seed(0)
    observations = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    agent = PPO(
        "agent", SESSION, observations, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), update_mode="eager"
    )
    agent.policy.actor.append(torch.nn.Tanh())  # a squashed mean
    assert NumpyGaussianActing.build(agent.policy, [agent.flat.param], agent.acting_rng) is None


def test_the_flat_buffer_trains_the_modules_parameters() -> None:
    agent, _ = trained_agent()
    for p in agent.policy.parameters():
        assert p.data_ptr() >= agent.flat.param.data_ptr(), "every parameter lives in the flat buffer"
    assert agent.flat.param.numel() == sum(p.numel() for p in agent.policy.parameters())
    torch.testing.assert_close(
        agent.flat.param.detach(), torch.cat([p.detach().reshape(-1) for p in agent.policy.parameters()])
    )


def test_state_round_trip_continues_the_same_stochastic_actions() -> None:
    agent, batch = trained_agent()
    state = agent.state_dict()
    twin = PPO(
        "agent",
        SESSION,
        agent.observation_space,
        agent.action_space,
        batch_size=16,
        n_epochs=2,
        update_mode="eager",
    )
    twin.load_state_dict(state)
    observations = np.zeros((2, 3), np.float32)
    hidden, masks = agent.initial_hidden_state(2), np.ones((2, 1), np.float32)
    for _ in range(3):
        mine = agent.action_generator(observations, hidden, masks)
        theirs = twin.action_generator(observations, hidden, masks)
        np.testing.assert_array_equal(mine["actions"], theirs["actions"])
    torch.manual_seed(3)
    agent.update(batch)
    torch.manual_seed(3)
    twin.update(batch)
    for key, value in agent.policy.state_dict().items():
        assert torch.equal(twin.policy.state_dict()[key], value), key


def test_the_log_prob_formula_is_normals() -> None:
    """The log-prob formula the NumPy path uses is Normal's."""
    mean, log_std, noise = torch.randn(4, 3), torch.randn(3), torch.randn(4, 3)
    actions = mean + log_std.exp() * noise
    formula = -0.5 * noise.square().sum(-1) - log_std.sum() - 3 * 0.5 * np.log(2 * np.pi)
    torch.testing.assert_close(formula, Normal(mean, log_std.exp()).log_prob(actions).sum(-1))


def test_resuming_from_a_checkpoint_is_bit_identical_to_an_uninterrupted_run(tmp_path) -> None:
    """Pendulum (NumPy acting, flat buffer): 4 iterations straight == 2, checkpoint, new Runner, 2 more."""
    from digideep.pipeline.devices import DeviceChoice
    from digideep.pipeline.resuming import from_checkpoint
    from digideep.pipeline.runner import Runner
    from digideep.storage.checkpoint import find_checkpoints
    from digideep.storage.session import Session
    from tests.agents.runner_setup import small_params

    params = small_params("digideep.agents.ppo.PPO", {"batch_size": 16, "n_epochs": 2}, "Pendulum-v1", 1, 32)
    params["runner"].update({"number_epochs": 4, "save_interval": 2})
    finals = {}
    for name in ("straight", "killed"):
        session = Session(root=tmp_path / name, name="run")
        runner = Runner(session, params, devices=DeviceChoice("cpu"))
        try:
            if name == "straight":
                assert runner.train() == "finished"
                finals[name] = runner.agents["agent"].state_dict()
                continue
            for _ in range(2):  # the Runner's stages, as the loop calls them, then a checkpoint and a "kill"
                runner.explore(), runner.store(), runner.sample(), runner.update()
            runner.checkpoint()
        finally:
            runner.close()
            session.close()
        session = Session(root=tmp_path / name, name="run", resume=True)
        newest = find_checkpoints(session.checkpoints_location)[-1].path
        resumed = from_checkpoint(session, newest, devices=DeviceChoice("cpu"))
        try:
            assert resumed.counters.iteration == 2
            assert resumed.train() == "finished"
            finals[name] = resumed.agents["agent"].state_dict()
        finally:
            resumed.close()
            session.close()
    straight, killed = finals["straight"], finals["killed"]
    assert straight["acting_rng"] == killed["acting_rng"]
    assert straight["counters"] == killed["counters"]
    for key, value in straight["policy"].items():
        assert torch.equal(killed["policy"][key], value), key
