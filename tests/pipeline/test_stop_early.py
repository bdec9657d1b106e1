"""A stop signal at any moment of ``digideep train``, not only mid-training (tests/pipeline/test_stop.py).

Real ``digideep`` processes in a session of their own, signalled with ``os.killpg`` at a moment the
test recognises from outside: while digideep still imports (it already catches the signal: its
``/proc`` status says so), while the CLI's temporary Prefect server starts, as soon as the session
exists, and while a finished run closes. A Ctrl-C 2.4 s into ``digideep train`` was once lost (the
run trained to its end), a SIGTERM while a finished plain-loop run closed killed it with no line.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient

from digideep.storage.checkpoint import latest_checkpoint
from tests.conftest import REPO
from tests.pipeline.test_stop import DIGIDEEP, cli_command, driver_env, signal_and_wait, wait_until


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (the ``SigCgt`` mask of its /proc status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signum - 1) & 1)


def temporary_servers(pid: int) -> list[psutil.Process]:
    """The ``prefect server start`` processes under ``pid``."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if "server" in child.cmdline() and "start" in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def start(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``command`` in a process group of its own, as a shell starts a job."""
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def own_mlflow(env: dict[str, str], root: Path) -> dict[str, str]:
    """``env`` with an MLflow store of the test's own, so that "no MLflow run" can be checked."""
    return {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}


@pytest.mark.parametrize(
    ("driver", "signum", "moment"),
    [
        # as soon as digideep catches SIGTERM: while it still imports torch, MLflow and Prefect
        pytest.param("plain", signal.SIGTERM, "imports", id="plain-SIGTERM-importing"),
        # the temporary Prefect server runs but the flow has not begun
        pytest.param("prefect", signal.SIGINT, "server", id="prefect-Ctrl-C-server-starting"),
    ],
)
def test_a_signal_before_the_session_exists_ends_digideep_in_one_line_leaving_nothing(
    tmp_path, run_env, driver, signum, moment
):
    env = own_mlflow(driver_env(run_env, tmp_path, driver), tmp_path)
    process = start(cli_command(tmp_path, driver), env)
    if moment == "imports":
        wait_until(process, lambda: catches(process.pid, signum))
    else:
        wait_until(process, lambda: temporary_servers(process.pid))
    servers = temporary_servers(process.pid)
    assert process.poll() is None and (servers or moment == "imports")
    code, stderr = signal_and_wait(process, signum)

    name = signal.Signals(signum).name
    assert code == 128 + signum, stderr[-3000:]
    assert stderr.endswith(f"digideep: stopped by {name} before the run began; nothing was written\n"), (
        stderr[-3000:]
    )
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not (tmp_path / "s").exists()  # no session folder
    if (tmp_path / "mlflow.db").exists():  # no MLflow run
        assert not MlflowClient(env["MLFLOW_TRACKING_URI"]).search_runs(search_all_experiments=True)
    _, alive = psutil.wait_procs(servers, timeout=30)  # no server left running
    assert not alive


@pytest.mark.parametrize(
    ("driver", "signum"),
    [
        # Prefect's engine had its own SIGTERM handler there: the flow run crashed, the session went
        pytest.param("prefect", signal.SIGTERM, id="prefect-SIGTERM"),
        # the plain loop had none before training: Ctrl-C discarded the session
        pytest.param("plain", signal.SIGINT, id="plain-Ctrl-C"),
    ],
)
def test_a_signal_once_the_session_exists_stops_at_the_first_boundary_with_a_checkpoint(
    tmp_path, run_env, driver, signum
):
    env = driver_env(run_env, tmp_path, driver)
    process = start(cli_command(tmp_path, driver), env)
    session = tmp_path / "s"
    wait_until(process, lambda: (session / "params.json").exists())  # the Runner is being built
    assert process.poll() is None
    code, stderr = signal_and_wait(process, signum)

    assert code == 128 + signum, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    newest = latest_checkpoint(session / "checkpoints")
    resume = f"digideep resume s --session-path {tmp_path}"
    name = signal.Signals(signum).name
    line = f"digideep: stopped by {name} at iteration {newest.iteration}, checkpoint written; resume with: {resume}\n"
    assert stderr.endswith(line), stderr[-3000:]
    run_id = json.loads((session / "session.json").read_text())["mlflow_run_id"]
    assert MlflowClient(env["MLFLOW_TRACKING_URI"]).get_run(run_id).info.status == "KILLED"

    resumed = subprocess.run(
        [DIGIDEEP, *resume.split()[1:], "--no-prefect"], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (session / "done.json").exists()


def test_a_sigterm_while_a_finished_run_closes_lets_it_end_finished_with_a_line(tmp_path, run_env):
    """After the last checkpoint the run has nothing to stop: it closes as it would have, exit 0."""
    env = driver_env(run_env, tmp_path, "plain")
    process = start(cli_command(tmp_path, "plain"), env)
    session = tmp_path / "s"
    wait_until(process, lambda: (session / "done.json").exists())  # the MLflow run is being ended
    assert process.poll() is None
    code, stderr = signal_and_wait(process, signal.SIGTERM)

    assert code == 0, stderr[-3000:]
    assert "SIGTERM received after training had ended: the run closed as it would have (finished)" in stderr
    assert "Traceback" not in stderr, stderr[-3000:]
    run_id = json.loads((session / "session.json").read_text())["mlflow_run_id"]
    assert MlflowClient(env["MLFLOW_TRACKING_URI"]).get_run(run_id).info.status == "FINISHED"
