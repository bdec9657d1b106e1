"""Acting from a copy of the policy on the host (``acting_device: host``, what an off-policy agent on a
GPU does): the copy acts with the weights of the last update, after a load too, shares the noise
process the checkpoint holds, and changes nothing a run computes.

On the CPU the agent acts from its policy itself; these tests force the copy there (the agent then
copies its CPU policy to a CPU copy), so every step of the GPU's path runs but the device transfer. On
the CPU both kernels are the same, so a run that acts from the copy must match one that does not, bit
for bit: a copy that missed a refresh, or kept its own noise state, would act on other numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from digideep.agents.ddpg import DDPG
from digideep.agents.off_policy import OffPolicyAgent, host_copy
from digideep.agents.sac import SAC
from digideep.agents.td3 import TD3
from digideep.errors import UsageError
from tests.agents.runner_setup import close, iterate, make_runner, path_of, small_params

ARGS = {"batch_size": 16, "updates_per_iteration": 4, "learning_starts": 16, "hidden_sizes": [16, 16]}
AGENTS = {
    "sac": (SAC, ARGS),
    "td3": (TD3, ARGS),
    "ddpg-ou": (DDPG, {**ARGS, "noise_type": "ou", "noise_std": 0.3}),  # a noise process with a state
}


def params(cls: type, args: dict[str, Any]) -> dict[str, Any]:
    """Pendulum, 2 workers, 8 steps an iteration, a 64-row replay."""
    return small_params(path_of(cls), args, "Pendulum-v1", 2, 8, 0, 64)


def force_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Act from a host copy on the CPU too (elsewhere only an agent on a GPU does)."""
    monkeypatch.setattr(
        OffPolicyAgent, "_acts_from_copy", property(lambda self: self.acting_device == "host")
    )


def run(
    tmp_path: Path, cls: type, args: dict[str, Any], iterations: int
) -> tuple[dict[str, Any], np.ndarray]:
    """The agent's state and the memory's actions after ``iterations`` iterations from seed 0."""
    torch.manual_seed(0)
    runner = make_runner(tmp_path, params(cls, args))
    try:
        iterate(runner, iterations)
        agent = runner.agents["agent"]
        runner.explore()  # acts once more, after the last update
        return agent.state_dict(), np.array(runner.memories["train"]["/agents/agent/actions"])
    finally:
        close(runner)


def assert_states_equal(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_states_equal(a[key], b[key])
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_run_that_acts_from_the_copy_matches_one_that_acts_from_the_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    cls, args = AGENTS[name]
    state, actions = run(tmp_path / "policy", cls, args, 4)
    force_the_copy(monkeypatch)
    copied_state, copied_actions = run(tmp_path / "copy", cls, args, 4)
    np.testing.assert_array_equal(copied_actions, actions)
    assert_states_equal(copied_state, state)  # weights, optimizers, sampler, noise state, counters


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_the_copy_acts_with_the_weights_of_the_last_update_and_of_a_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    force_the_copy(monkeypatch)
    cls, args = AGENTS[name]
    torch.manual_seed(0)
    runner = make_runner(tmp_path, params(cls, args))
    agent = runner.agents["agent"]
    obs, hidden, masks = (
        np.zeros((2, 3), np.float32),
        agent.initial_hidden_state(2),
        np.ones((2, 1), np.float32),
    )
    try:
        agent.action_generator(obs, hidden, masks, deterministic=True)
        copy = agent.acting_policy
        assert copy is not agent.policy
        assert all(p.device.type == "cpu" and not p.requires_grad for p in copy.parameters())
        before = agent.action_generator(obs, hidden, masks, deterministic=True)["actions"]
        iterate(runner, 3)  # updates change the policy; the next action reads it
        assert agent.updates > 0
        after = agent.action_generator(obs, hidden, masks, deterministic=True)["actions"]
        assert not np.array_equal(after, before)
        with torch.inference_mode():
            direct = agent.scaler.to_env(
                agent.policy.generate_actions(torch.zeros(2, 3), None, None, True)["actions"]
            )
        np.testing.assert_array_equal(after, direct.numpy())
        assert agent.acting_policy is copy  # refreshed in place, not rebuilt

        # a fresh agent that has acted once, then loads the trained state, acts as the trained one
        fresh = cls("agent", runner.devices, agent.observation_space, agent.action_space, **args)
        fresh.action_generator(obs, hidden, masks, deterministic=True)
        fresh.load_state_dict(agent.state_dict())
        np.testing.assert_array_equal(
            fresh.action_generator(obs, hidden, masks, deterministic=True)["actions"], after
        )

        # weights changed outside update(): policy_changed() makes the copy read them again
        with torch.no_grad():
            for param in agent.policy.parameters():
                param.zero_()
        assert np.array_equal(
            agent.action_generator(obs, hidden, masks, deterministic=True)["actions"], after
        )
        agent.policy_changed()
        moved = agent.action_generator(obs, hidden, masks, deterministic=True)["actions"]
        np.testing.assert_array_equal(moved, agent.scaler.to_env(torch.zeros(2, agent.scaler.dim)).numpy())
    finally:
        close(runner)


def test_the_copy_shares_the_noise_process_and_unwraps_data_parallel(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, params(*AGENTS["ddpg-ou"]))
    try:
        policy = runner.agents["agent"].policy
        policy.parallelize(["actor", "critic"], force=True)  # DataParallel runs its module on a CPU
        clone = host_copy(policy)
        assert clone.noise is policy.noise  # one OU state: the one the checkpoint saves
        assert not any(isinstance(m, torch.nn.DataParallel) for m in clone.modules())
        assert clone.actor is not policy.unwrapped("actor")
        assert_states_equal(clone.state_dict(), policy.state_dict())
    finally:
        close(runner)


def test_where_the_agent_acts_is_checked_and_recorded(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, params(SAC, ARGS))
    agent = runner.agents["agent"]
    try:
        # on the CPU the policy itself acts, whichever is asked for
        assert agent.acting_device == "host" and agent.acting_policy is agent.policy
        assert runner.resolved_settings()["agents/agent/resolved/acting_device"] == "host"
        on_device = SAC(
            "agent", runner.devices, agent.observation_space, agent.action_space, acting_device="device"
        )
        assert (on_device.acting_device, on_device.act_device.type) == ("device", "cpu")
        assert on_device.acting_policy is on_device.policy
        with pytest.raises(UsageError, match="acting_device 'gpu' is not one of auto, host, device"):
            SAC("agent", runner.devices, agent.observation_space, agent.action_space, acting_device="gpu")
    finally:
        close(runner)


def test_the_copy_holds_plain_tensors_though_it_is_made_in_inference_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    force_the_copy(monkeypatch)
    runner = make_runner(tmp_path, params(SAC, ARGS))
    agent = runner.agents["agent"]
    try:
        with torch.inference_mode():  # as the Explorer asks for actions
            copy = agent.acting_policy
        assert not any(p.is_inference() for p in copy.parameters())
        with torch.no_grad():  # usable outside inference mode too (an export, a user's script)
            copy.generate_actions(torch.zeros(2, 3), torch.zeros(2, 1), torch.ones(2, 1), True)
    finally:
        close(runner)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_on_a_gpu_the_agent_acts_on_the_host_with_its_trained_weights(tmp_path: Path, name: str) -> None:
    cls, args = AGENTS[name]
    runner = make_runner(tmp_path, params(cls, args), device="cuda")
    agent = runner.agents["agent"]
    obs, hidden, masks = (
        np.full((2, 3), 0.5, np.float32),
        agent.initial_hidden_state(2),
        np.ones((2, 1), np.float32),
    )
    try:
        iterate(runner, 3)
        assert (agent.device.type, agent.acting_device) == ("cuda", "host") and agent.updates > 0
        on_host = agent.action_generator(obs, hidden, masks, deterministic=True)["actions"]
        copy = agent.acting_policy
        assert copy is not agent.policy and all(p.device.type == "cpu" for p in copy.parameters())
        with torch.inference_mode():
            normalized = agent.policy.generate_actions(torch.as_tensor(obs, device="cuda"), None, None, True)
            on_gpu = agent.scaler.to_env(normalized["actions"]).cpu().numpy()
        np.testing.assert_allclose(on_host, on_gpu, rtol=1e-5, atol=1e-5)  # CPU and GPU kernels round apart
        noise = getattr(agent.policy, "noise", None)
        assert noise is None or (noise is copy.noise and noise.device.type == "cpu")
    finally:
        close(runner)
