"""Servers digideep starts stop with it, whole trees included, and a taken port is refused in one line.

Real processes throughout: ``make prefect-up`` as the README gives it (``python -m
digideep_stack.local_stack up``: a Prefect server, a deployment run and a worker) and ``digideep runs ui`` (``mlflow ui`` and its uvicorn worker) are started, sent
SIGTERM or SIGHUP, and every process they had started must be gone afterwards. While the Prefect
stack runs, its profile is the active one of its ``PREFECT_HOME`` (a temporary folder: the user's
``~/.prefect`` is never touched), so ``prefect deployment run`` in a shell without
``PREFECT_API_URL`` reaches it; when it stops, the user's own profile is active again.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
import toml

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


def prefect(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``prefect <args>`` as a user types it in another shell (``env`` has no PREFECT_API_URL)."""
    command = [str(Path(sys.executable).with_name("prefect")), "--no-prompt", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_local_stack_is_the_active_prefect_profile_until_sigterm_stops_it_and_its_children(tmp_path):
    port = free_port()
    env = environment(tmp_path)
    profiles = Path(env["PREFECT_HOME"]) / "profiles.toml"
    profiles.parent.mkdir()
    mine = {"active": "mine", "profiles": {"mine": {"PREFECT_CLIENT_MAX_RETRIES": "4"}}}
    profiles.write_text(toml.dumps(mine))  # the user's own profile, active
    # make prefect-up, the installed venv as it is (-o install), on a free port; make passes the
    # SIGTERM below on to the recipe's process
    make = ["make", "--no-print-directory", "-o", "install", f"VENV={Path(sys.executable).parents[1]}"]
    process = subprocess.Popen(
        [*make, "prefect-up", f"PREFECT_PORT={port}"],
        cwd=REPO,
        env={k: v for k, v in env.items() if not k.startswith(("MAKEFLAGS", "MAKELEVEL", "MFLAGS"))},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        recipe = process.stdout.readline()  # make's echo of the command it runs
        assert f"-m digideep_stack.local_stack up --port {port}" in recipe, recipe
        ready = process.stdout.readline()  # the first line is printed once the worker runs
        assert ready.startswith("Prefect UI:"), ready + process.stdout.read()
        assert process.stdout.readline().startswith("Prefect profile 'digideep-local' is active")
        wait_until(lambda: len(psutil.Process(process.pid).children(recursive=True)) >= 2, process, "stack")

        # another shell, no PREFECT_API_URL: the profile takes the run to this server (scheduled
        # an hour ahead, so the worker leaves it alone)
        assert "PREFECT_API_URL" not in env
        created = prefect(env, "deployment", "run", "train/pendulum-sac", "--start-in", "in 1 hour")
        assert created.returncode == 0, created.stdout + created.stderr
        run_id = next(word for word in created.stdout.split() if is_uuid(word))
        assert answers(f"http://127.0.0.1:{port}/api/flow_runs/{run_id}")

        stop_and_check_tree(process, signal.SIGTERM)
        assert not answers(f"http://127.0.0.1:{port}/api/health")
        assert "Prefect profile: 'mine' is active again" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    written = toml.loads(profiles.read_text())
    assert written["active"] == "mine" and written["profiles"]["mine"] == mine["profiles"]["mine"]
    assert written["profiles"]["digideep-local"] == {"PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}

    # the profile of a stopped server fails instead of starting a throw-away server
    refused = prefect(env, "--profile", "digideep-local", "deployment", "run", "train/pendulum-sac")
    assert refused.returncode == 1 and "Created flow run" not in refused.stdout
    assert "All connection attempts failed" in refused.stdout + refused.stderr
    assert not answers(f"http://127.0.0.1:{port}/api/health")


def is_uuid(word: str) -> bool:
    try:
        uuid.UUID(word.strip("'\".,"))
    except ValueError:
        return False
    return True


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


def test_the_local_stacks_watcher_crashes_a_run_whose_process_is_gone_so_that_retry_can_resume_it(tmp_path):
    """After a reboot the flow runs of ``make prefect-up`` would stay RUNNING for ever (nothing is left
    to report their end): the stack's watcher marks such a run Crashed, where the UI offers Retry."""
    import datetime

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Running, Scheduled

    from digideep_stack.local_stack import LocalStack

    stack = LocalStack(port=free_port(), home=tmp_path / "prefect-home", crash_after=3.0)
    try:
        stack.up()
        assert stack.env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
        # the stack's server, named in the settings: with no API URL, get_client would start a server of its own
        with temporary_settings({PREFECT_API_URL: stack.api_url}), get_client(sync_client=True) as client:
            deployment = client.read_deployment_by_name("train/pendulum-sac")
            later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
            run = client.create_flow_run_from_deployment(deployment.id, state=Scheduled(scheduled_time=later))
            # a run whose process died with the machine: RUNNING, and no heartbeat ever comes
            client.set_flow_run_state(run.id, Running(), force=True)
            deadline = time.monotonic() + 60
            while (state := client.read_flow_run(run.id).state).type.value == "RUNNING":
                assert time.monotonic() < deadline, "the watcher left the dead run RUNNING"
                time.sleep(0.5)
        assert state.type.value == "CRASHED", state
        assert "heartbeat" in (state.message or ""), state.message
    finally:
        stack.stop()
