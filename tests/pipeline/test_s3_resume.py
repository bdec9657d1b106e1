"""Exact resume from object storage: a run on ``s3://`` SIGKILLed after its second checkpoint and
resumed from another working folder (another PREFECT_HOME, nothing of the first one's local disk)
ends bit-identical to a run never stopped, and its MLflow run holds each metric step once.

Every run is a real subprocess (``python -m digideep.main``) against a real S3 server (moto on
127.0.0.1); only the MLflow store is shared between the two processes, as a tracking server is.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
from mlflow import MlflowClient

from digideep.storage.checkpoint import latest_checkpoint, load_checkpoint
from digideep.storage.lease_store import LEASE_FILE
from digideep.storage.location import Location
from digideep.storage.session_lock import LEASE_TTL_VARIABLE
from tests.conftest import REPO
from tests.helpers import assert_same_training
from tests.pipeline.test_resume import (
    HALFCHEETAH,
    SMALL_SAC,
    assert_same_histories,
    metric_histories,
    resume_command,
    run,
    train_command,
)


def kill_after_s3_checkpoints(
    command: list[str], env: dict, cwd: Path, bucket: str, prefix: str, count: int
) -> None:
    """Start training and SIGKILL it as soon as ``count`` checkpoints are committed in the bucket."""
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        listing = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
        if sum(item["Key"].endswith("/commit.json") for item in listing.get("Contents", [])) >= count:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()


@pytest.mark.parametrize(
    ("params", "cpanel", "fresh_folder"),
    [
        # the same working folder is the easier case of the next one: slow, to keep the suite short
        pytest.param("params.pendulum_sac", SMALL_SAC, False, marks=pytest.mark.slow),
        pytest.param("params.pendulum_sac", SMALL_SAC, True),
        pytest.param("params.mujoco_sac", HALFCHEETAH, True, marks=pytest.mark.slow),
    ],
    ids=["Pendulum-v1-same-folder", "Pendulum-v1-another-folder", "HalfCheetah-v5-another-folder"],
)
def test_a_run_on_s3_killed_and_resumed_elsewhere_is_bit_identical(
    tmp_path, run_env, s3_env, s3_bucket, params, cpanel, fresh_folder
):
    run(train_command(tmp_path / "local", "straight", params, cpanel), run_env)

    url = f"s3://{s3_bucket}/sessions"
    first = tmp_path / "first"
    first.mkdir()
    base = {**run_env, **s3_env, "PYTHONPATH": str(REPO), LEASE_TTL_VARIABLE: "30"}  # the shortest allowed
    command = train_command(url, "killed", params, cpanel)
    env = {**base, "PREFECT_HOME": str(first / "prefect")}
    kill_after_s3_checkpoints(command, env, first, s3_bucket, "sessions/killed/checkpoints/", count=2)
    assert not Location(f"{url}/killed/done.json").exists(), "the run finished before it could be killed"
    newest = latest_checkpoint(f"{url}/killed/checkpoints")
    assert newest.iteration >= 4
    assert load_checkpoint(newest.path)[0]["counters"]["frames"] > cpanel["buffer_size"], (
        "the ring did not wrap"
    )

    second = first
    if fresh_folder:  # another machine: nothing of the first one's disk, its own PREFECT_HOME
        shutil.rmtree(first)
        second = tmp_path / "second"
        second.mkdir()
    env = {**base, "PREFECT_HOME": str(second / "prefect")}
    dead = Location(f"{url}/killed/{LEASE_FILE}").read_json()  # the killed process's lease, not expired
    resumed = subprocess.run(  # right away: the killed holder is proven dead on this machine
        resume_command(url, "killed"), cwd=second, env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    took_over = (
        f"took over the session lease {url}/killed/{LEASE_FILE} of host {dead['host']} (flow run none, "
        f"pid {dead['pid']}): that process no longer runs on this machine"
    )
    assert took_over in resumed.stderr, resumed.stderr[-3000:]
    assert f"from {newest.path}" in resumed.stderr, resumed.stderr[-3000:]
    assert Location(f"{url}/killed/done.json").exists()

    straight_info, straight = load_checkpoint(
        latest_checkpoint(tmp_path / "local" / "straight" / "checkpoints").path
    )
    killed_info, killed = load_checkpoint(latest_checkpoint(f"{url}/killed/checkpoints").path)
    assert straight_info["iteration"] == killed_info["iteration"] == 8
    assert_same_training(straight, killed)
    assert straight["memories"] == killed["memories"]

    client = MlflowClient(run_env["MLFLOW_TRACKING_URI"])
    run_ids = {
        "straight": json.loads((tmp_path / "local" / "straight" / "session.json").read_text())[
            "mlflow_run_id"
        ],
        "killed": Location(f"{url}/killed/session.json").read_json()["mlflow_run_id"],
    }
    histories = {}
    for name, run_id in run_ids.items():
        assert client.get_run(run_id).info.status == "FINISHED"
        histories[name] = metric_histories(client, run_id)
    assert_same_histories(histories["straight"], histories["killed"])  # each step once, same values
    checkpoint_steps = [step for step, _ in histories["killed"]["time/checkpoint"]]
    assert checkpoint_steps == [step for step, _ in histories["killed"]["charts/iteration"]]

    # the finished session plays from the bucket, on a machine that never had its files
    final = latest_checkpoint(f"{url}/killed/checkpoints").path
    played = subprocess.run(
        [
            sys.executable,
            "-c",
            "from digideep.main import cli; raise SystemExit(cli())",
            "play",
            str(final),
            "--episodes",
            "1",
        ],
        cwd=second,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert played.returncode == 0, played.stderr[-3000:]
    assert "return" in played.stdout + played.stderr


def test_a_run_on_s3_killed_before_its_first_checkpoint_starts_over_and_matches_a_straight_run(
    tmp_path, run_env, s3_env, s3_bucket
):
    """Its memory in the bucket was flushed by no checkpoint: the resume deletes it and trains anew
    (it failed with 'already holds a digideep memory', as a Prefect retry of such a run did)."""
    cpanel = {**SMALL_SAC, "save_interval": 100}  # no checkpoint before the end of the run
    run(train_command(tmp_path / "local", "straight", "params.pendulum_sac", cpanel), run_env)

    url = f"s3://{s3_bucket}/sessions"
    base = {**run_env, **s3_env, "PYTHONPATH": str(REPO), LEASE_TTL_VARIABLE: "30"}
    s3 = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    process = subprocess.Popen(
        train_command(url, "early", "params.pendulum_sac", cpanel),
        cwd=tmp_path, env=base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    chunk = "sessions/early/memory/train.zarr/"
    while time.monotonic() < deadline and process.poll() is None:  # memory rows in the bucket
        keys = [
            item["Key"] for item in s3.list_objects_v2(Bucket=s3_bucket, Prefix=chunk).get("Contents", [])
        ]
        if any("/c/" in key for key in keys):
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert latest_checkpoint(f"{url}/early/checkpoints") is None, "a checkpoint was committed before the kill"
    assert any(
        "/c/" in item["Key"] for item in s3.list_objects_v2(Bucket=s3_bucket, Prefix=chunk)["Contents"]
    )

    resumed = subprocess.run(
        resume_command(url, "early"), cwd=tmp_path, env=base, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "has no checkpoint yet: starting its training from the beginning" in resumed.stderr
    assert Location(f"{url}/early/done.json").exists()
    _, straight = load_checkpoint(latest_checkpoint(tmp_path / "local" / "straight" / "checkpoints").path)
    _, early = load_checkpoint(latest_checkpoint(f"{url}/early/checkpoints").path)
    assert_same_training(straight, early)
    assert straight["memories"] == early["memories"]
