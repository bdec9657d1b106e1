"""The stack's crash watcher, on a ``make stack-up`` stack with no worker of its own (slow).

Each test's "hosts" are workers it starts (tests/stack/conftest.py, :class:`Host`), so that a host
can die without the stack noticing. The watcher's bound is 60 s here and the cases wait it out,
hence ``slow`` (``make test-slow``); tests/stack/test_stack.py keeps the stack itself in the
default suite.
"""

from __future__ import annotations

import time

import pytest

from tests.stack.conftest import RunningStack

pytestmark = pytest.mark.slow

FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


@pytest.fixture(scope="module")
def stack_options() -> dict:
    return {"workers": 0, "args": ("--crash-after", "60")}


def flow_run_state(run_id) -> tuple[str, str]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
        return run.state.type.value, run.state.message or ""


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


@pytest.fixture
def client_env(stack: RunningStack, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key, value in stack.client_env.items():
        monkeypatch.setenv(key, value)
    return stack.client_env


def submit(queue: str, parameters: dict):
    from prefect.deployments import run_deployment

    return run_deployment("train/pendulum-sac", parameters=parameters, timeout=0, work_queue_name=queue).id


def test_a_dead_host_is_crashed_within_the_bound_and_a_busy_run_is_not(
    stack: RunningStack, client_env, hosts, tmp_path
):
    """The watcher's bound is 60 s here; the busy run sleeps 100 s inside an update stage."""
    dying, busy = hosts("host-dying", "host-dying"), hosts("host-busy", "host-busy")
    dying_marker, busy_marker = tmp_path / "dying.pid", tmp_path / "busy.pid"
    common = {"params": "tests.stack.sleepy", "session_path": str(tmp_path)}
    dying_run = submit(
        "host-dying", {**common, "cpanel": {"sleep_seconds": 3600, "marker": str(dying_marker)}}
    )
    busy_run = submit("host-busy", {**common, "cpanel": {"sleep_seconds": 100, "marker": str(busy_marker)}})
    wait_for(dying_marker.exists, 600, "the first run's long update")
    wait_for(busy_marker.exists, 600, "the second run's long update")
    assert flow_run_state(dying_run)[0] == "RUNNING"
    dying.kill()  # the worker and the flow process die together; nothing reports the crash

    state, message = wait_for(lambda: (s := flow_run_state(dying_run))[0] == "CRASHED" and s, 240, "Crashed")
    assert "heartbeat" in message
    state, _ = wait_for(lambda: (s := flow_run_state(busy_run))[0] in FINAL and s, 600, "the end")
    assert state == "COMPLETED"
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        history = client.read_flow_run_states(busy_run)
    assert "CRASHED" not in {s.type.value for s in history}
    assert busy.process.poll() is None
