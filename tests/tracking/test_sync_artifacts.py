"""``digideep runs sync`` after an MLflow outage: the checkpoints and models it lost reach the run.

A real training run (Pendulum SAC, a few iterations) tracks to a real ``mlflow server`` that is
killed after the run's first checkpoint and comes back after the run ended. The metrics wait in the
journal, but the checkpoints committed meanwhile and the final and best models were uploads that
failed and were only logged. Before, ``runs sync`` sent the metrics and ended the run FINISHED
without them; now it sends every checkpoint and model the run lacks first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient

from digideep.storage.checkpoint import find_checkpoints
from digideep.tracking.sender import CHECKPOINT_FILES, missing_artifacts
from tests.conftest import REPO
from tests.helpers import free_port
from tests.pipeline.test_resume import SMALL_SAC, train_command
from tests.tracking.conftest import start_mlflow_server, stop_mlflow_server

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.slow,  # two server starts and a training run: about 3 minutes on 2 shared cores
]


def sync(sessions: Path, name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    cli = "from digideep.main import cli; raise SystemExit(cli())"
    command = [sys.executable, "-c", cli, "runs", "sync", name, "--session-path", str(sessions)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_runs_sync_sends_the_checkpoints_and_models_an_mlflow_outage_lost(tmp_path: Path) -> None:
    store = tmp_path / "mlflow"
    store.mkdir()
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = start_mlflow_server(store, port)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONHASHSEED": "0"}
    env |= {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}
    sessions = tmp_path / "sessions"
    checkpoints = sessions / "outage" / "checkpoints"
    try:
        training = subprocess.Popen(
            train_command(sessions, "outage", "params.pendulum_sac", SMALL_SAC),
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 300
        while not (checkpoints.is_dir() and find_checkpoints(checkpoints)):
            assert training.poll() is None and time.monotonic() < deadline, "no checkpoint before the outage"
            time.sleep(0.05)
        stop_mlflow_server(server, kill=True)  # the server crashes after the first checkpoint
        _, stderr = training.communicate(timeout=300)
        assert training.returncode == 0, stderr[-3000:]
        assert (sessions / "outage" / "done.json").exists()

        server = start_mlflow_server(store, port)  # and comes back on the same address
        run_id = json.loads((sessions / "outage" / "session.json").read_text())["mlflow_run_id"]
        client = MlflowClient(uri)
        lost = {item.artifact for item in missing_artifacts(client, run_id, checkpoints, done=True)}
        assert {"model", "best_model"} <= lost and any(a.startswith("checkpoints/") for a in lost)

        synced = sync(sessions, "outage", env)
        assert synced.returncode == 0, synced.stderr[-3000:]
        assert "ended FINISHED" in synced.stdout
        assert all(artifact in synced.stdout for artifact in lost), synced.stdout

        assert client.get_run(run_id).info.status == "FINISHED"
        for checkpoint in find_checkpoints(checkpoints):
            logged = {
                f.path for f in client.list_artifacts(run_id, f"checkpoints/{checkpoint.location.name}")
            }
            assert {f"checkpoints/{checkpoint.location.name}/{name}" for name in CHECKPOINT_FILES} <= logged
        assert missing_artifacts(client, run_id, checkpoints, done=True) == []  # the models among them
        previous = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(uri)
        try:
            policy = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")  # what a user of the run loads
        finally:
            mlflow.set_tracking_uri(previous)
        assert policy.predict(np.zeros((2, 3), dtype=np.float32)).shape == (2, 1)  # Pendulum: 3 -> 1

        again = sync(sessions, "outage", env)
        assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout + again.stderr
    finally:
        stop_mlflow_server(server)
