"""Servers digideep starts stop with it, whole trees included, and a taken port is refused in one line.

Real processes throughout: ``python -m digideep_stack.local_stack up`` (a Prefect server, a deployment run
and a worker) and ``digideep runs ui`` (``mlflow ui`` and its uvicorn worker) are started, sent
SIGTERM or SIGHUP, and every process they had started must be gone afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from tests.conftest import REPO
from tests.helpers import free_port


def environment(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_API"))}
    return {
        **env,
        "PYTHONPATH": str(REPO),
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }


def wait_until(condition, process: subprocess.Popen, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"{what} exited early with {process.returncode}"
        assert time.monotonic() < deadline, f"{what} not ready after {timeout:.0f} s"
        time.sleep(0.5)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def stop_and_check_tree(process: subprocess.Popen, signum: int) -> None:
    """Send ``signum``; the command must exit and leave none of the processes it had started."""
    children = psutil.Process(process.pid).children(recursive=True)
    assert children, "the command started no child process"
    process.send_signal(signum)
    process.wait(timeout=120)
    _, alive = psutil.wait_procs(children, timeout=10)
    survivors = [(p.pid, " ".join(p.cmdline()[:3])) for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for survivor in alive:  # leave nothing running, whatever the outcome
        survivor.kill()
    assert not survivors, f"still running after {signal.Signals(signum).name}: {survivors}"


def test_sigterm_to_local_stack_stops_server_worker_and_their_children(tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "digideep_stack.local_stack", "up", "--port", str(port)],
        cwd=REPO,
        env=environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ready = process.stdout.readline()  # the first line is printed once the worker runs
        assert ready.startswith("Prefect UI:"), ready + process.stdout.read()
        wait_until(lambda: len(psutil.Process(process.pid).children(recursive=True)) >= 2, process, "stack")
        stop_and_check_tree(process, signal.SIGTERM)
        assert not answers(f"http://127.0.0.1:{port}/api/health")
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGINT], ids=["SIGHUP", "Ctrl-C"])
def test_a_signal_to_runs_ui_stops_mlflow_ui_and_its_workers_without_a_traceback(tmp_path, signum):
    port = free_port()
    (tmp_path / "data").mkdir()
    output = tmp_path / "output.txt"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from digideep.main import cli; sys.exit(cli())",
             "runs", "ui", "--port", str(port)],
            cwd=tmp_path, env=environment(tmp_path), stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_until(lambda: answers(f"http://127.0.0.1:{port}/"), process, "mlflow ui")
            stop_and_check_tree(process, signum)
            assert not answers(f"http://127.0.0.1:{port}/")
        finally:
            if process.poll() is None:
                process.kill()
    assert "Traceback" not in output.read_text(errors="replace"), output.read_text(errors="replace")[-3000:]


@pytest.mark.parametrize(
    ("command", "prefix", "what"),
    [
        (["-m", "digideep_stack.local_stack", "up", "--port"], "local_stack: error: ", "the Prefect server"),
        (["-c", "import sys; from digideep.main import cli; sys.exit(cli())", "runs", "ui", "--port"], "digideep: error: ", "the MLflow UI"),
    ],
)  # fmt: skip
def test_a_taken_port_is_refused_in_one_line(tmp_path, command, prefix, what):
    with socket.socket() as server:  # stands in for a server left running
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = subprocess.run(
            [sys.executable, *command, str(port)],
            cwd=REPO,
            env=environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2
    assert result.stderr == (
        f"{prefix}cannot start {what}: port {port} on 127.0.0.1 is taken by process {os.getpid()} "
        f"({' '.join(psutil.Process().cmdline()[:4])[:80]}); "
        "stop that process (a server left running?) or choose another --port\n"
    )
