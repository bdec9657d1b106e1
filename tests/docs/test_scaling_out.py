"""The "Scaling out" page's commands (docs/scaling-out.md), run as written against a real S3 server (moto on 127.0.0.1).

The ``export`` line is what the fixtures set (credentials and ``AWS_ENDPOINT_URL`` of the test
server); the bucket the page names is replaced by a fresh one. Training is capped to a few
iterations (``DIGIDEEP_MAX_ITERATIONS``), as for the other documented commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3

from tests.conftest import REPO
from tests.docs.test_commands import shown_commands

DOCS_BUCKET = "digideep-runs"


def scaling_out_commands() -> list[str]:
    return [
        c
        for f, c in shown_commands()
        if f == "scaling-out.md" and "s3://" in c and c.startswith(".venv/bin/digideep ")
    ]


def test_the_scaling_out_commands_train_and_resume_in_a_bucket(tmp_path, s3_env, s3_bucket, mlflow_uri):
    commands = scaling_out_commands()
    assert [c.split()[1] for c in commands] == ["train", "resume"]
    exported = next(c for f, c in shown_commands() if f == "scaling-out.md" and c.startswith("export AWS_"))
    assert {pair.split("=")[0] for pair in exported.split()[1:]} <= set(s3_env)
    for name in ("params", "flows"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])  # the venv running the tests
    env = {
        **os.environ,
        **s3_env,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),  # this checkout's digideep
        "MLFLOW_TRACKING_URI": mlflow_uri,
        "DIGIDEEP_MAX_ITERATIONS": "2",
        "PREFECT_HOME": str(tmp_path / "prefect"),
    }
    for command in commands:
        filled = command.replace(f"s3://{DOCS_BUCKET}/", f"s3://{s3_bucket}/")
        result = subprocess.run(
            filled, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"'{filled}' failed:\n{result.stderr[-3000:]}"
    s3 = boto3.client("s3")
    listing = s3.list_objects_v2(Bucket=s3_bucket, Prefix="sessions/pendulum-s3/")
    keys = {item["Key"] for item in listing.get("Contents", [])}
    assert "sessions/pendulum-s3/checkpoints/checkpoint-2/commit.json" in keys
    info = json.loads(s3.get_object(Bucket=s3_bucket, Key="sessions/pendulum-s3/session.json")["Body"].read())
    assert info["params_module"] == "params.pendulum_sac" and info["mlflow_run_id"]
