"""A real production stack (``python -m digideep_stack up``) for the tests of this folder.

One stack per module on free ports, its data, logs and ``.env`` under a temporary folder. It runs
no worker of its own (``--workers 0``): tests start their "hosts" (:func:`start_host`), so that a
host can be killed without the stack noticing a dead child and stopping. At the end the stack gets
SIGTERM, as ``make stack-down`` sends it, and every process it started must be gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from digideep_stack.secrets import read_env_file

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RunningStack:
    folder: Path
    lines: list[str]
    secrets: dict[str, str] = field(repr=False)  # kept out of pytest's failure reports
    client_env: dict[str, str] = field(repr=False)  # what a worker or a user's shell sets (secrets included)

    @property
    def logs(self) -> Path:
        return self.folder / "data" / "logs"


def start_stack(folder: Path, *extra: str, timeout: float = 600) -> tuple[subprocess.Popen, RunningStack]:
    """Start ``python -m digideep_stack up`` and wait for its "Stack up" line."""
    ports = {name: str(free_port()) for name in ("postgres", "prefect", "mlflow", "s3")}
    command = [sys.executable, "-m", "digideep_stack", "up", "--data", str(folder / "data"),
               "--env-file", str(folder / ".env"), "--workers", "0", *extra]  # fmt: skip
    for name, port in ports.items():
        command += [f"--{name}-port", port]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        lines.append(line.rstrip())
        if line.startswith("Stack up") or "error" in line or time.monotonic() > deadline:
            break
    if not lines or not lines[-1].startswith("Stack up"):
        stop_stack(process)
        raise RuntimeError("the stack did not come up:\n" + "\n".join(lines))
    secrets = read_env_file(folder / ".env")
    addresses = read_env_file(folder / "data" / "client.env")
    client_env = {
        **addresses,
        "MLFLOW_S3_ENDPOINT_URL": addresses["AWS_ENDPOINT_URL"],
        "AWS_DEFAULT_REGION": "us-east-1",
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
        **{
            key: value
            for key, value in secrets.items()
            if not key.startswith(("DIGIDEEP_STACK", "MLFLOW_FLASK"))
        },
    }
    return process, RunningStack(folder, lines, secrets, client_env)


def stop_stack(process: subprocess.Popen) -> None:
    """SIGTERM to the stack, then check that nothing it started still runs."""
    tree = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    _, alive = psutil.wait_procs(tree, timeout=30)
    for survivor in alive:
        survivor.kill()
    assert not alive, f"processes left running by the stack: {[p.pid for p in alive]}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    # PostgreSQL runs as the postgres user, who cannot enter pytest's private temporary folders.
    folder = Path(tempfile.mkdtemp(prefix="digideep-stack-test-"))
    folder.chmod(0o755)
    try:
        process, running = start_stack(folder, "--crash-after", "60")
        try:
            yield running
        finally:
            stop_stack(process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Host:
    """A worker process standing for one machine: it polls one work queue of the stack's pool."""

    def __init__(self, stack: RunningStack, queue: str, name: str):
        self.log = open(stack.folder / f"{name}.log", "ab")  # noqa: SIM115
        env = {**os.environ, **stack.client_env, "PYTHONPATH": str(REPO), "PWD": str(REPO)}
        prefect = str(Path(sys.executable).with_name("prefect"))
        subprocess.run([prefect, "--no-prompt", "work-queue", "create", queue, "--pool", "digideep-local"],
                       cwd=REPO, env=env, capture_output=True)  # fmt: skip
        self.process = subprocess.Popen(
            [prefect, "worker", "start", "--pool", "digideep-local", "--work-queue", queue, "--name", name],
            cwd=REPO, env=env, stdout=self.log, stderr=self.log, start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        """The host dies: SIGKILL to the worker and every process under it, flow runs included."""
        try:
            tree = [
                psutil.Process(self.process.pid),
                *psutil.Process(self.process.pid).children(recursive=True),
            ]
        except psutil.NoSuchProcess:
            tree = []
        for member in tree:
            member.kill()
        psutil.wait_procs(tree, timeout=10)
        self.process.wait()
        self.log.close()

    def stop(self) -> None:
        from digideep.utility.processes import stop_tree

        if self.process.poll() is None:
            stop_tree(self.process)
        self.log.close()


@pytest.fixture
def hosts(stack: RunningStack) -> Iterator[callable]:
    started: list[Host] = []

    def start(queue: str, name: str) -> Host:
        host = Host(stack, queue, name)
        started.append(host)
        return host

    yield start
    for host in started:
        if host.process.poll() is None:
            host.stop()
