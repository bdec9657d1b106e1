"""A deployment's flow run on a real process worker, stopped by SIGTERM as a scheduler stops a job.

It must checkpoint and end Cancelled (a Completed run would read as finished), with the command
that resumes it as the state's message; the UI's Retry (the request its button sends) must then
resume it from that checkpoint to the end.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State, StateType
from prefect.client.schemas.responses import SetStateStatus

from digideep.storage.checkpoint import find_checkpoints, latest_checkpoint
from tests.flows.test_train_flow import TINY, flow_run_name, start, wait


def flow_run_process(flow_run_id: str, timeout: float = 120) -> psutil.Process:
    """The process running the flow run (the worker records its pid on the run)."""
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            pid = client.read_flow_run(flow_run_id).infrastructure_pid
            if pid:
                return psutil.Process(int(str(pid).rpartition(":")[2]))
            time.sleep(0.2)
    raise AssertionError(f"flow run {flow_run_id} got no process in {timeout} s")


def retry_as_the_ui_does(flow_run_id: str) -> None:
    """What the UI's Retry button sends: AwaitingRetry, not forced (the server's rules apply)."""
    retry = State(type=StateType.SCHEDULED, name="AwaitingRetry", message="Retry from the UI")
    with get_client(sync_client=True) as client:
        result = client.set_flow_run_state(flow_run_id, retry, force=False)
    assert result.status == SetStateStatus.ACCEPT, result.details


def test_a_sigtermed_deployment_run_ends_cancelled_and_the_uis_retry_resumes_it(stack, tmp_path):
    sessions = tmp_path / "sessions"
    cpanel = {**TINY, "number_epochs": 15}
    flow_run_id = start("train/pendulum-sac", {"params": "params.pendulum_sac", "cpanel": cpanel,
                                               "session_path": str(sessions)})  # fmt: skip
    process = flow_run_process(flow_run_id)
    session = sessions / f"{flow_run_name(flow_run_id)}-{flow_run_id[:8]}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not find_checkpoints(session / "checkpoints"):
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGTERM)

    assert wait(flow_run_id, stack, timeout=120) == "CANCELLED"
    newest = latest_checkpoint(session / "checkpoints")
    assert 1 <= newest.iteration < 15 and not (session / "done.json").exists()
    with get_client(sync_client=True) as client:
        message = client.read_flow_run(flow_run_id).state.message
    assert message == (
        f"stopped by SIGTERM at iteration {newest.iteration}, checkpoint written; resume with: "
        f"digideep resume {session.name} --session-path {sessions}, or Retry this flow run"
    )

    retry_as_the_ui_does(flow_run_id)
    assert wait(flow_run_id, stack, timeout=400, states={"COMPLETED", "FAILED", "CRASHED"}) == "COMPLETED"
    assert (session / "done.json").exists()
    assert f"resuming session {session}" in (session / "log.txt").read_text()
