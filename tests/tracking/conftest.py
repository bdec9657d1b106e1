"""Tracking stores for the tests: an embedded sqlite store and one real ``mlflow server`` per session.

The server is started once (it takes several seconds) on a free port of 127.0.0.1, with its own
sqlite database and artifact folder under a temporary directory, and is stopped at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from digideep.utility.processes import wait_for_http
from tests.helpers import free_port

SERVER_START_TIMEOUT = 180.0


@pytest.fixture(autouse=True)
def _clean_mlflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees no MLflow environment settings and leaves none behind."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An embedded store shared by the tests (its artifacts go to ``mlartifacts`` beside it)."""
    return "sqlite:///" + str(tmp_path_factory.mktemp("embedded") / "mlflow.db")


def start_mlflow_server(root: Path, port: int) -> subprocess.Popen:
    """Start ``mlflow server`` on 127.0.0.1:``port`` with its store under ``root``; wait until it answers.

    Raises:
        RuntimeError: the server exited or did not answer within ``SERVER_START_TIMEOUT`` seconds.
    """
    executable = Path(sys.executable).parent / "mlflow"
    command = [str(executable)] if executable.exists() else [sys.executable, "-m", "mlflow"]
    command += ["server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"]
    command += ["--artifacts-destination", str(root / "artifacts")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    log_path = root / f"server-{port}.log"
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True
        )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/health", process, "mlflow server", SERVER_START_TIMEOUT)
    except RuntimeError as error:
        stop_mlflow_server(process, kill=True)
        raise RuntimeError(f"{error}:\n{log_path.read_text()[-3000:]}") from None
    return process


def stop_mlflow_server(process: subprocess.Popen, kill: bool = False) -> None:
    """Stop a server of :func:`start_mlflow_server` (SIGKILL with ``kill``, as a crash would)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.wait(3)  # uvicorn may wait for idle keep-alive connections
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a real ``mlflow server`` on 127.0.0.1, started once for the test session."""
    port = free_port()
    try:
        process = start_mlflow_server(tmp_path_factory.mktemp("server"), port)
    except RuntimeError as error:
        pytest.fail(str(error))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_mlflow_server(process)


@pytest.fixture(params=["embedded", "server"])
def store(request: pytest.FixtureRequest) -> str:
    """The tracking URI of each kind of store: the embedded sqlite one and the local server."""
    if request.param == "embedded":
        return request.getfixturevalue("sqlite_uri")
    return request.getfixturevalue("mlflow_server")


@pytest.fixture
def unused_uri() -> str:
    """An http URI of 127.0.0.1 on which no server listens."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def make_params() -> Callable[..., tuple[dict, dict]]:
    """The factory of a params tree and cpanel, see :func:`params_and_cpanel`."""
    return params_and_cpanel


def params_and_cpanel(lr: float = 3e-4, seed: int = 0) -> tuple[dict, dict]:
    """A params tree shaped like a real one (nested args, lists, a class, a long value) and its cpanel."""
    params = {
        "agents": {
            "sac": {"type": "digideep.agents.sac.SAC", "args": {"lr": lr, "hidden": [256, 256], "seed": seed}}
        },
        "env": {"model_name": "HalfCheetah-v5", "wrappers": [{"name": "Normalize", "args": {"clip": 10.0}}]},
        "memory": {"train": {"class": dict, "capacity": 1_000_000}},
        "notes": "x" * 7000,
    }
    return params, {"lr": lr, "seed": seed, "num_workers": 1}


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    """A session folder with ``params.json``, a checkpoint of two files and a video."""
    import json

    import torch

    session = tmp_path / "sessions" / "20261121-120000-test"
    checkpoint = session / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (session / "videos").mkdir()
    params, cpanel = params_and_cpanel()
    (session / "params.json").write_text(json.dumps(params, default=str))
    (session / "cpanel.json").write_text(json.dumps(cpanel))
    (checkpoint / "runner.json").write_text(json.dumps({"iteration": 2}))
    torch.save({"w": torch.zeros(3)}, checkpoint / "states.pt")
    (session / "videos" / "episode-0.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42")
    return session
