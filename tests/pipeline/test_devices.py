import logging
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from digideep.agents.ddpg import DDPG
from digideep.agents.ppo import PPO
from digideep.agents.sac import SAC
from digideep.agents.td3 import TD3
from digideep.errors import UsageError
from digideep.pipeline.devices import (
    DeviceChoice,
    auto_device,
    available_devices,
    configure_determinism,
    requested_determinism,
)
from tests.helpers import CUDA

VECTOR = gym.spaces.Box(-1, 1, (3,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
ACTIONS = gym.spaces.Box(-1, 1, (2,), np.float32)


@pytest.mark.parametrize(
    ("agent_class", "observations", "expected"),
    [
        (SAC, VECTOR, "cuda"),
        (TD3, VECTOR, "cuda"),
        (DDPG, VECTOR, "cuda"),
        (PPO, VECTOR, "cpu"),
        (PPO, gym.spaces.Dict({"camera": IMAGE, "joints": VECTOR}), "cuda"),
    ],
    ids=["sac", "td3", "ddpg", "ppo-mlp", "ppo-images"],
)
def test_auto_puts_off_policy_and_cnn_agents_on_cuda_and_small_on_policy_mlps_on_the_cpu(
    agent_class, observations, expected
):
    agent = agent_class("agent", None, VECTOR, ACTIONS)  # built on the CPU; only its kind matters
    device, why = auto_device(agent, observations, cuda_available=True)
    assert device.type == expected and why
    assert auto_device(agent, observations, cuda_available=False)[0].type == "cpu"


def test_an_agent_class_can_state_its_auto_device():
    class CpuSAC(SAC):
        auto_device = "cpu"

    device, why = auto_device(CpuSAC("agent", None, VECTOR, ACTIONS), VECTOR, cuda_available=True)
    assert device.type == "cpu" and "auto_device" in why


def test_each_agent_logs_its_device_and_why(caplog):
    devices = DeviceChoice("auto")
    with caplog.at_level(logging.INFO, logger="digideep.pipeline.devices"):
        sac = SAC("agent", devices, VECTOR, ACTIONS)
        ppo = PPO("other", devices, VECTOR, ACTIONS)
    assert sac.device.type == ("cuda" if CUDA else "cpu") and ppo.device.type == "cpu"
    assert next(p.device for p in ppo.policy.parameters()).type == "cpu"
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"agent 'agent' (SAC) on {sac.device}: auto: ") for line in lines), lines
    assert any(line.startswith("agent 'other' (PPO) on cpu: auto: ") for line in lines), lines


def test_an_explicit_device_puts_every_agent_there():
    assert SAC("agent", DeviceChoice("cpu"), VECTOR, ACTIONS).device == torch.device("cpu")


def test_auto_requests_the_first_cuda_device_when_there_is_one():
    devices = DeviceChoice()
    assert devices.request == "auto"
    assert devices.device.type == ("cuda" if CUDA else "cpu")


@pytest.mark.parametrize(
    ("device", "message"),
    [
        pytest.param(
            "cuda",
            "has no usable CUDA device",
            marks=pytest.mark.skipif(CUDA, reason="this machine has CUDA"),
        ),
        ("cuda:99", "devices here: " + ", ".join(available_devices())),
        ("gpu", "is not one of auto, cpu, cuda, cuda:N"),
    ],
)
def test_a_device_that_does_not_exist_is_refused(device, message):
    with pytest.raises(UsageError, match=message):
        DeviceChoice(device)  # --device
    with pytest.raises(UsageError, match=message):
        DeviceChoice().configure({"device": device})  # session.device of the params tree


def test_the_command_line_device_wins_over_the_params():
    devices = DeviceChoice("cpu")  # --device cpu
    devices.configure({"device": "cuda:99"})  # overridden: not even checked
    assert devices.request == "cpu"
    devices = DeviceChoice()
    devices.configure({"device": "cpu"})
    assert devices.request == "cpu"
    devices = DeviceChoice()
    devices.configure({})
    assert devices.request == "auto"


def test_deterministic_mode_is_the_command_line_flag_or_the_params():
    assert DeviceChoice(deterministic=True).deterministic
    assert not DeviceChoice().deterministic
    assert requested_determinism(True, None) and requested_determinism(True, False)
    assert requested_determinism(False, True)
    assert not requested_determinism(False, None) and not requested_determinism(False, False)


@pytest.fixture
def restore_determinism():
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.benchmark = before[1]


def test_deterministic_mode_sets_torch_and_cublas(monkeypatch, restore_determinism):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    configure_determinism(False)
    assert not torch.are_deterministic_algorithms_enabled()
    configure_determinism(True)
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
