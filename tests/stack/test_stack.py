"""``make stack-up`` for real: PostgreSQL, the Prefect and MLflow servers with auth, S3, crash watcher.

Slow (the stack takes a minute or two to come up on 2 cores, and the crash cases wait out the
watcher's bound), so these run with ``make test-slow``; tests/stack/test_secrets.py keeps the
stack's refusals in the default suite.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest

from tests.stack.conftest import REPO, RunningStack

pytestmark = pytest.mark.slow

TINY = {"number_epochs": 3, "epoch_size": 1, "n_steps": 20, "learning_starts": 20, "batch_size": 32,
        "hidden_sizes": [32, 32], "save_interval": 1, "test_interval": 3, "test_episodes": 1,
        "buffer_size": 1000}  # fmt: skip
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def status(url: str, user: str | None = None, password: str | None = None) -> int:
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_every_server_answers_with_auth_and_refuses_a_wrong_password(stack: RunningStack):
    env = stack.client_env
    assert any(line.startswith("PostgreSQL") for line in stack.lines)
    user, password = env["PREFECT_API_AUTH_STRING"].split(":", 1)
    assert status(f"{env['PREFECT_API_URL']}/admin/version", user, password) == 200
    assert status(f"{env['PREFECT_API_URL']}/admin/version", user, "wrong") == 401
    assert status(f"{env['PREFECT_API_URL']}/admin/version") == 401
    experiments = f"{env['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/experiments/search?max_results=1"
    assert status(experiments, env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"]) == 200
    assert status(experiments, env["MLFLOW_TRACKING_USERNAME"], "wrong") == 401
    assert status(experiments) == 401
    s3 = dict(endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    good = boto3.client("s3", aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], **s3)  # fmt: skip
    assert "digideep" in {bucket["Name"] for bucket in good.list_buckets()["Buckets"]}
    bad = boto3.client("s3", aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key="wrong", **s3)
    with pytest.raises(Exception, match="SignatureDoesNotMatch"):
        bad.list_objects_v2(Bucket="digideep")


@pytest.mark.parametrize(
    ("variable", "command", "server"),
    [
        ("MLFLOW_TRACKING_PASSWORD", ["train", "--no-prefect", "--params", "params.pendulum_sac", "--cpanel",
                                      json.dumps(TINY)], "MLflow"),
        ("PREFECT_API_AUTH_STRING", ["train", "--params", "params.pendulum_sac", "--cpanel", json.dumps(TINY)],
         "Prefect"),
    ],
)  # fmt: skip
def test_a_wrong_password_gets_one_line_from_the_cli(
    stack: RunningStack, tmp_path, variable, command, server
):
    env = {**os.environ, **stack.client_env, "PYTHONPATH": str(REPO), variable: "digideep:wrong"}
    result = subprocess.run(
        [sys.executable, "-c", "from digideep.main import cli; raise SystemExit(cli())", *command, *(["--session-path", str(tmp_path)] if command[0] == "train" else [])],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("digideep: error:")]
    assert len(errors) == 1 and f"the {server} server" in errors[0] and "401" in errors[0], result.stderr[
        -2000:
    ]
    assert "Traceback" not in result.stderr
    assert "wrong" not in errors[0]


def flow_run_state(env: dict[str, str], run_id) -> tuple[str, str]:
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


def test_train_deployment_is_tracked_in_mlflow_with_artifacts_in_s3_and_no_secret_anywhere(
    stack: RunningStack, client_env, hosts, tmp_path
):
    import mlflow

    hosts("host-a", "host-a")
    run_id = submit(
        "host-a", {"params": "params.pendulum_sac", "cpanel": TINY, "session_path": str(tmp_path)}
    )
    state = wait_for(
        lambda: (s := flow_run_state(client_env, run_id))[0] in FINAL and s, 600, "the run's end"
    )
    assert state[0] == "COMPLETED", state

    client = mlflow.MlflowClient()
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    run = next(r for r in runs if r.data.tags.get("prefect.flow_run_id", str(run_id)) == str(run_id))
    assert run.info.status == "FINISHED" and run.data.metrics
    s3 = boto3.session.Session().client("s3")  # a fresh session reads this stack's keys
    keys = [
        o["Key"] for o in s3.list_objects_v2(Bucket="digideep", Prefix="mlartifacts/").get("Contents", [])
    ]
    assert any(key.endswith("states.pt") and run.info.run_id in key for key in keys)

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as prefect_client:
        flow_run = prefect_client.read_flow_run(run_id)
    secrets = [value.split(":", 1)[-1] for key, value in stack.secrets.items() if key != "MLFLOW_TRACKING_USERNAME"
               and key != "AWS_ACCESS_KEY_ID"]  # fmt: skip
    visible = json.dumps([flow_run.parameters, run.data.params, run.data.tags])
    texts = [visible] + [path.read_text(errors="replace") for folder in (stack.logs, stack.folder, tmp_path)
                         for path in Path(folder).rglob("*.log")]  # fmt: skip
    texts += [
        path.read_text(errors="replace")
        for path in tmp_path.rglob("*")
        if path.suffix in (".json", ".txt", ".log")
    ]
    for secret in secrets:
        assert not any(secret in text for text in texts), "a secret leaked into a log, a param or a tag"


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
    assert flow_run_state(client_env, dying_run)[0] == "RUNNING"
    dying.kill()  # the worker and the flow process die together; nothing reports the crash

    state, message = wait_for(
        lambda: (s := flow_run_state(client_env, dying_run))[0] == "CRASHED" and s, 240, "Crashed"
    )
    assert "heartbeat" in message
    state, _ = wait_for(lambda: (s := flow_run_state(client_env, busy_run))[0] in FINAL and s, 600, "the end")
    assert state == "COMPLETED"
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        history = client.read_flow_run_states(busy_run)
    assert "CRASHED" not in {s.type.value for s in history}
    assert busy.process.poll() is None
