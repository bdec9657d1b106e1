"""A run on ``s3://`` through an outage of the store: retried, or failed in one line and free at once.

Each run is a real subprocess (``python -m digideep.main``) against a real S3 server (moto on
127.0.0.1) reached through an endpoint of this test that goes down and comes back on the same port
(:class:`tests.s3.StoreOutage`: open connections reset, new ones refused), as the store's clients see
a restart. Before, a 20 s outage killed the run at its next request (a 209-line traceback) and its
lease blocked a resume on the same machine for about two minutes.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import boto3
import pytest

from digideep.storage.checkpoint import latest_checkpoint, load_checkpoint
from digideep.storage.lease_store import LEASE_FILE
from digideep.storage.location import Location
from digideep.storage.retry import RETRY_SECONDS_VARIABLE
from tests.conftest import REPO
from tests.helpers import assert_same_training
from tests.pipeline.test_resume import SMALL_SAC, resume_command, run, train_command
from tests.s3 import S3Server, StoreOutage

PARAMS = "params.pendulum_sac"


@pytest.fixture
def outage(s3_server: S3Server, s3_bucket: str) -> StoreOutage:
    endpoint = StoreOutage(s3_server)
    yield endpoint
    endpoint.close()


@pytest.fixture
def straight(tmp_path: Path, run_env: dict[str, str]) -> dict:
    """The final states of the same run on local disk, never interrupted."""
    run(train_command(tmp_path / "local", "straight", PARAMS, SMALL_SAC), run_env)
    return load_checkpoint(latest_checkpoint(tmp_path / "local" / "straight" / "checkpoints").path)[1]


def start_and_cut(
    command: list[str],
    env: dict,
    cwd: Path,
    server: S3Server,
    bucket: str,
    outage: StoreOutage,
    seconds: float,
) -> subprocess.CompletedProcess:
    """Start ``command``; once it committed its first checkpoint, take the store down for ``seconds``."""
    s3 = boto3.client("s3", endpoint_url=server.endpoint)  # straight to the server, never cut
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None:
            _, stderr = process.communicate()
            raise AssertionError(f"exit {process.returncode} before the first checkpoint: {stderr[-2000:]}")
        assert time.monotonic() < deadline, "no checkpoint before the outage"
        listing = s3.list_objects_v2(Bucket=bucket, Prefix="sessions/")
        if any(item["Key"].endswith("/commit.json") for item in listing.get("Contents", [])):
            break
        time.sleep(0.05)
    restart = outage.down_for(seconds)
    stdout, stderr = process.communicate(timeout=600)
    restart.join()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def lease_record(server: S3Server, bucket: str, name: str) -> bool:
    s3 = boto3.client("s3", endpoint_url=server.endpoint)
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=f"sessions/{name}/{LEASE_FILE}")
    return bool(listing.get("Contents"))


def assert_identical(url: str, straight: dict) -> None:
    info, states = load_checkpoint(latest_checkpoint(f"{url}/checkpoints").path)
    assert info["iteration"] == 8
    assert_same_training(straight, states)
    assert straight["memories"] == states["memories"]


def test_a_run_on_s3_rides_out_a_20_s_outage_and_ends_bit_identical(
    tmp_path, run_env, s3_server, s3_bucket, outage, straight
):
    env = {**run_env, **outage.env, "PYTHONPATH": str(REPO)}
    url = f"s3://{s3_bucket}/sessions"
    done = start_and_cut(
        train_command(url, "outage", PARAMS, SMALL_SAC), env, tmp_path, s3_server, s3_bucket, outage, 20.0
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "the object store failed to" in done.stderr and "retrying for up to 120 s" in done.stderr
    assert Location(f"{url}/outage/done.json").exists()
    assert_identical(f"{url}/outage", straight)
    assert not lease_record(s3_server, s3_bucket, "outage")


@pytest.mark.slow  # the 20 s outage above is the one end-to-end run of the suite
def test_a_run_whose_store_stays_down_fails_in_one_line_frees_its_lease_and_resumes_at_once(
    tmp_path, run_env, s3_server, s3_bucket, outage, straight
):
    env = {**run_env, **outage.env, "PYTHONPATH": str(REPO), RETRY_SECONDS_VARIABLE: "3"}
    url = f"s3://{s3_bucket}/sessions"
    failed = start_and_cut(
        train_command(url, "failed", PARAMS, SMALL_SAC), env, tmp_path, s3_server, s3_bucket, outage, 15.0
    )
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("digideep: error: the object store failed to ") and " for 3 s (" in last, last
    assert "resume it once the store answers" in last
    assert not lease_record(s3_server, s3_bucket, "failed"), "the failed run kept its lease"

    resumed = subprocess.run(
        resume_command(url, "failed"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "in use by" not in resumed.stderr
    assert_identical(f"{url}/failed", straight)
