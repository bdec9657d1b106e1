"""Exact resume: a run killed with SIGKILL and resumed ends bit-identical to a run never stopped.

Every run here is a real subprocess (``python -m digideep.main``) training real agents on real
environments with the Zarr memory on disk, as a user would run it. The replay memory is small, so
its ring wraps before the kill, and the MLflow histories of both runs are compared key by key.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from digideep.memory import Memory
from digideep.storage.checkpoint import find_checkpoints, latest_checkpoint, load_checkpoint
from tests.conftest import REPO
from tests.helpers import assert_same_training, device_args

SMALL_SAC = {
    "number_epochs": 4,
    "epoch_size": 2,
    "n_steps": 25,
    "learning_starts": 25,
    "batch_size": 32,
    "hidden_sizes": [32, 32],
    "save_interval": 1,
    "test_interval": 2,
    "test_episodes": 1,
    "buffer_size": 70,  # frames: the ring wraps (and splits a chunk) before the kill
}
HALFCHEETAH = {**SMALL_SAC, "model_name": "HalfCheetah-v5", "n_steps": 20, "learning_starts": 20}


def train_command(root: Path, name: str, params: str, cpanel: dict, device: str = "cpu") -> list[str]:
    return [
        sys.executable, "-m", "digideep.main", "--params", params, "--no-prefect",
        "--session-path", str(root), "--session-name", name, "--cpanel", json.dumps(cpanel),
        *device_args(device),
    ]  # fmt: skip


def resume_command(root: Path, name: str, device: str = "cpu") -> list[str]:
    return [
        sys.executable,
        "-m",
        "digideep.main",
        "--resume",
        name,
        "--session-path",
        str(root),
        "--no-prefect",
        *device_args(device),
    ]


TIMING = ("time/", "system/", "charts/frames_per_second")  # differ between runs by nature


def run(command: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def kill_after_checkpoint(
    command: list[str], env: dict, checkpoints: Path, count: int, ready: Callable[[], bool] | None = None
) -> None:
    """Start training and SIGKILL it as soon as ``count`` checkpoints are committed (wherever it is then)
    and ``ready()`` holds, if given."""
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if (
            checkpoints.is_dir()
            and len(find_checkpoints(checkpoints)) >= count
            and (ready is None or ready())
        ):
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()


def metric_histories(client: MlflowClient, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """``{key: [(step, value), ...]}`` of every metric of the run, by step."""
    keys = client.get_run(run_id).data.metrics
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in keys}


def assert_same_histories(straight: dict, killed: dict) -> None:
    """Every metric at the same steps, once per step, with the same values (timings: present alike)."""
    logged = {step for step, _ in straight["charts/iteration"]}
    for name, runs in (("straight", straight), ("killed", killed)):
        for key, history in runs.items():
            steps = [step for step, _ in history]
            assert len(steps) == len(set(steps)), f"{name}: {key} has a step twice: {steps}"
            assert set(steps) <= logged, f"{name}: {key} at steps never logged: {set(steps) - logged}"
    exact = {key for key in straight if not key.startswith(TIMING)}
    assert exact == {key for key in killed if not key.startswith(TIMING)}
    for key in exact:
        assert killed[key] == straight[key], key
    for key in (k for k in straight if k.startswith(("time/", "charts/frames_per_second"))):
        assert key in killed, key
        assert [s for s, _ in killed[key]] == [s for s, _ in straight[key]], key


def final_state(root: Path, name: str) -> tuple[dict, dict]:
    session = root / name
    checkpoint = latest_checkpoint(session / "checkpoints")
    info, states = load_checkpoint(checkpoint.path)
    capacity = info["params"]["memory"]["train"]["args"]["capacity"]
    memory = Memory(session / "memory" / "train.zarr", num_workers=1, capacity=capacity)
    memory.load_state_dict(states["memories"]["train"])
    memory.load()
    contents = {key: np.array(memory[key]) for key in memory}
    return states, {"contents": contents, "pointers": memory.state_dict(), "iteration": info["iteration"]}


@pytest.mark.parametrize(
    ("params", "cpanel"),
    [
        pytest.param("params.pendulum_sac", SMALL_SAC, id="Pendulum-v1"),
        # compiled kernels differ from eager ones, so a compiled run resumes against a compiled run
        pytest.param(
            "params.pendulum_sac",
            {**SMALL_SAC, "update_mode": "compile"},
            id="Pendulum-v1 compiled",
            marks=pytest.mark.compile,
        ),
        # the device sampler (a GPU run's replay: drawn by a torch generator, gathered from the mirror)
        pytest.param(
            "params.pendulum_sac", {**SMALL_SAC, "replay_device": "device"}, id="Pendulum-v1 device replay"
        ),
        # slow: Pendulum covers the same code, and test_s3_resume.py runs HalfCheetah on S3 (also slow)
        pytest.param("params.mujoco_sac", HALFCHEETAH, id="HalfCheetah-v5", marks=pytest.mark.slow),
    ],
)
def test_kill_and_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, run_env, params, cpanel, device):
    run(train_command(tmp_path, "straight", params, cpanel, device), run_env)

    interrupted = train_command(tmp_path, "killed", params, cpanel, device)
    kill_after_checkpoint(interrupted, run_env, tmp_path / "killed" / "checkpoints", count=2)
    assert not (tmp_path / "killed" / "done.json").exists(), "the run finished before it could be killed"
    newest = latest_checkpoint(tmp_path / "killed" / "checkpoints")
    assert newest.iteration >= 4  # the second checkpoint (epoch_size 2), or one after it
    info = load_checkpoint(newest.path)[0]
    frames = info["counters"]["frames"]
    replay = cpanel.get("replay_device") or ("host" if device == "cpu" else "device")  # auto's choice
    assert info["resolved"]["agents/agent/resolved/replay_device"] == replay
    assert frames > cpanel["buffer_size"], "the ring did not wrap before the kill"
    resumed = run(resume_command(tmp_path, "killed", device), run_env)
    assert f"from {newest.path}" in resumed.stderr, resumed.stderr[-3000:]

    straight_states, straight_memory = final_state(tmp_path, "straight")
    killed_states, killed_memory = final_state(tmp_path, "killed")
    assert straight_memory["iteration"] == killed_memory["iteration"] == 8
    assert_same_training(straight_states, killed_states)
    assert straight_memory["pointers"] == killed_memory["pointers"]
    for key, values in straight_memory["contents"].items():
        np.testing.assert_array_equal(values, killed_memory["contents"][key], err_msg=key)

    # MLflow: the resumed session reopened its run, which holds each step once, like the straight run
    client = MlflowClient(run_env["MLFLOW_TRACKING_URI"])
    histories = {}
    for name in ("straight", "killed"):
        run_id = json.loads((tmp_path / name / "session.json").read_text())["mlflow_run_id"]
        assert client.get_run(run_id).info.status == "FINISHED"
        histories[name] = metric_histories(client, run_id)
    assert len(histories["killed"]["charts/iteration"]) == 4
    assert_same_histories(histories["straight"], histories["killed"])
    # every checkpoint's duration is in MLflow at its step, the one before the kill included
    checkpoint_steps = [step for step, _ in histories["killed"]["time/checkpoint"]]
    assert checkpoint_steps == [step for step, _ in histories["killed"]["charts/iteration"]]
