"""The stack's secrets file and its refusals, without starting a server (default suite)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest

from digideep_stack.secrets import SERVER_ONLY, load_secrets, read_env_file, write_client_file
from tests.stack.conftest import REPO


def test_env_file_is_created_private_with_random_values_and_then_kept(tmp_path, monkeypatch):
    for key in ("PREFECT_API_AUTH_STRING", "MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    first = load_secrets(tmp_path / "a" / ".env")
    assert stat.S_IMODE(os.stat(tmp_path / "a" / ".env").st_mode) == 0o600
    assert load_secrets(tmp_path / "a" / ".env") == first  # the servers' databases remember them
    other = load_secrets(tmp_path / "b" / ".env")
    for key in ("DIGIDEEP_STACK_PG_PASSWORD", "MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
        assert len(first[key]) >= 24 and first[key] != other[key]
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "from-a-vault")
    assert load_secrets(tmp_path / "a" / ".env")["MLFLOW_TRACKING_PASSWORD"] == "from-a-vault"
    assert (
        read_env_file(tmp_path / "a" / ".env")["MLFLOW_TRACKING_PASSWORD"]
        == first["MLFLOW_TRACKING_PASSWORD"]
    )


def test_env_file_is_git_ignored():
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=REPO)
    assert ignored.returncode == 0


def test_a_taken_port_is_named_in_one_line_and_nothing_starts(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "digideep_stack", "up", "--data", str(tmp_path / "data"),
             "--env-file", str(tmp_path / ".env"), "--prefect-port", str(port)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "the Prefect server" in lines[0] and str(port) in lines[0]
    assert not (tmp_path / "data" / "pg").exists()


def test_a_client_file_is_private_and_refuses_a_server_only_secret(tmp_path):
    settings = {"PREFECT_API_URL": "http://127.0.0.1:4200/api", "PREFECT_API_AUTH_STRING": "digideep:pw"}
    write_client_file(tmp_path / "stack" / "client.env", settings)
    assert stat.S_IMODE(os.stat(tmp_path / "stack" / "client.env").st_mode) == 0o600
    assert read_env_file(tmp_path / "stack" / "client.env") == settings
    for key in SERVER_ONLY:
        with pytest.raises(ValueError, match=key):
            write_client_file(tmp_path / "leak.env", {**settings, key: "secret"})
    assert not (tmp_path / "leak.env").exists()
