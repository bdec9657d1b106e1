import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading

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
    auto_device,
    available_devices,
    configure_determinism,
    requested_determinism,
)
from digideep.pipeline.run_logging import RunLog
from digideep.pipeline.session import Session
from tests.helpers import CUDA


def test_new_session_creates_its_layout_and_files(tmp_path):
    with (
        Session(root=tmp_path, name="s1", params_name="params.demo") as session,
        RunLog(session.log_path),
    ):
        session.write_params("params.demo", {"seed": 0}, {"runner": {"seed": 0}})
        logging.getLogger("digideep.test").warning("hello log file")
        assert (session.path / "checkpoints").is_dir() and session.videos_path.is_dir()
        assert session.memory_location("train").local == tmp_path / "s1" / "memory" / "train.zarr"
        assert json.loads((session.path / "params.json").read_text()) == {"runner": {"seed": 0}}
        assert session.info()["params_module"] == "params.demo"
        assert session.device_request == "auto"
        assert session.device.type == ("cuda" if CUDA else "cpu")
    assert "hello log file" in (tmp_path / "s1" / "log.txt").read_text()
    with Session(root=tmp_path, name="s1", resume=True):  # closing released the lock
        pass


def test_generated_name_has_time_and_params_name(tmp_path):
    with Session(root=tmp_path, params_name="params.pendulum_sac") as session:
        assert session.name.endswith("-pendulum_sac")


def test_existing_session_is_not_overwritten(tmp_path):
    Session(root=tmp_path, name="s").close()
    with pytest.raises(UsageError, match="already exists"):
        Session(root=tmp_path, name="s")


def test_resume_of_a_missing_session_is_refused(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        Session(root=tmp_path, name="missing", resume=True)
    assert not (tmp_path / "missing").exists()


def test_second_process_is_refused_while_the_first_holds_the_lock(tmp_path):
    with Session(root=tmp_path, name="s"):
        code = (
            "import sys\nfrom digideep.pipeline.session import Session\nfrom digideep.errors import UsageError\n"
            f"try:\n    Session(root={str(tmp_path)!r}, name='s', resume=True)\n"
            "except UsageError as e:\n    print(e); sys.exit(2)\n"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == (
        f"session '{tmp_path / 's'}' is in use by process {os.getpid()} on {socket.gethostname()}; "
        "wait for it to finish or stop it\n"
    )


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    code = f"from digideep.pipeline.session import Session\nSession(root={str(tmp_path)!r}, name='s')\nimport os\nos._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert (tmp_path / "s" / ".lock.json").exists()  # the dead process never cleaned up
    with Session(root=tmp_path, name="s", resume=True) as session:
        assert session.path.is_dir()


def test_done_marker(tmp_path):
    with Session(root=tmp_path, name="s") as session:
        assert not session.is_done
        session.mark_done(iterations=3)
        assert session.is_done


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


def test_each_agent_logs_its_device_and_why(tmp_path, caplog):
    with (
        caplog.at_level(logging.INFO, logger="digideep.pipeline.devices"),
        Session(root=tmp_path, name="s", device="auto") as session,
    ):
        sac = SAC("agent", session, VECTOR, ACTIONS)
        ppo = PPO("other", session, VECTOR, ACTIONS)
    assert sac.device.type == ("cuda" if CUDA else "cpu") and ppo.device.type == "cpu"
    assert next(p.device for p in ppo.policy.parameters()).type == "cpu"
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"agent 'agent' (SAC) on {sac.device}: auto: ") for line in lines), lines
    assert any(line.startswith("agent 'other' (PPO) on cpu: auto: ") for line in lines), lines


def test_an_explicit_device_puts_every_agent_there(tmp_path):
    with Session(root=tmp_path, name="s", device="cpu") as session:
        assert SAC("agent", session, VECTOR, ACTIONS).device == torch.device("cpu")


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
def test_a_device_that_does_not_exist_is_refused_before_anything_is_written(tmp_path, device, message):
    with pytest.raises(UsageError, match=message):
        Session(root=tmp_path, name="s", device=device)
    assert not (tmp_path / "s").exists()
    with Session(root=tmp_path, name="t") as session, pytest.raises(UsageError, match=message):
        session.configure_device(device)  # session.device of the params tree


def test_the_command_line_device_wins_over_the_params(tmp_path):
    with Session(root=tmp_path, name="s", device="cpu") as session:  # --device cpu
        session.configure_device("cuda:99")  # overridden: not even checked
        assert session.device_request == "cpu"
    with Session(root=tmp_path, name="t") as session:
        session.configure_device("cpu")
        assert session.device_request == "cpu"
    with Session(root=tmp_path, name="u") as session:
        session.configure_device(None)
        assert session.device_request == "auto"


def test_deterministic_mode_is_the_command_line_flag_or_the_params(tmp_path):
    with Session(root=tmp_path, name="s", deterministic=True) as session:
        assert session.deterministic
    with Session(root=tmp_path, name="t") as session:
        assert not session.deterministic
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


def test_reading_a_session_in_use_leaves_its_lock_alone(tmp_path):
    with Session(root=tmp_path, name="s") as holder:
        with Session(root=tmp_path, name="s", resume=True, lock=False) as reader:  # play a checkpoint
            assert reader.path == holder.path
        with pytest.raises(UsageError, match="is in use by process"):
            Session(root=tmp_path, name="s", resume=True)


def test_a_session_closed_by_another_thread_is_released(tmp_path):
    session = Session(root=tmp_path, name="s")
    closer = threading.Thread(target=session.close)  # Prefect runs task bodies in worker threads
    closer.start()
    closer.join()
    with Session(root=tmp_path, name="s", resume=True):
        pass


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "."])
def test_a_new_session_is_one_folder_under_its_root(tmp_path, name):
    with pytest.raises(UsageError, match=f"session name '{re.escape(name)}' must be one folder name"):
        Session(root=tmp_path / "sessions", name=name)
    assert list(tmp_path.iterdir()) == []


def test_a_root_that_is_a_file_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "file").write_text("kept")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        Session(root=tmp_path / "file", name="s")
    with pytest.raises(UsageError, match=r"lies below '.*file', which is a file"):
        Session(root=tmp_path / "file" / "sessions", name="s")
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and (tmp_path / "file").read_text() == "kept"


def test_discard_deletes_a_new_session_and_the_empty_folders_made_for_it(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("")
    session = Session(root=tmp_path / "data" / "sessions" / "more", name="s")
    session.write_params("params.demo", {"seed": 0}, {"runner": {"seed": 0}})
    session.discard()
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["keep.txt"]
    Session(root=tmp_path / "data" / "sessions" / "more", name="s").close()  # the name is free again
