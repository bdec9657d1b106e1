"""Two hosts in network namespaces: a host dies, its run is retried on the other one and resumes
from object storage, ending exactly as a run never interrupted.

Each host is a Prefect worker in its own network namespace (``digideep_stack.cluster``), with its
own hostname, working folder, ``PREFECT_HOME`` and ``data/``; the servers listen only on a bridge's
address. Sessions live in the S3 bucket. The default suite runs the scenario on the light servers
(Prefect on SQLite, moto, MLflow on sqlite, the crash check run by the test); the slow tests run it
on the full stack (PostgreSQL, auth, the stack's own crash watcher), with a sweep over both hosts.
The default suite also starts ``make demo-cluster`` itself, as the docs give it, and submits a run
to it through the Prefect profile it makes active.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import numpy as np
import pytest
import toml

from digideep.storage.location import Location
from tests.docs.test_commands import shown_commands
from tests.flows.test_train_flow import session_state
from tests.helpers import assert_same_training
from tests.pipeline.test_resume import assert_same_histories, metric_histories, train_command
from tests.stack.conftest import BIN, REPO, Cluster, user_env
from tests.stack.test_stack import assert_a_private_client_file, status

TINY = {"number_epochs": 24, "epoch_size": 1, "n_steps": 20, "learning_starts": 20, "batch_size": 32,
        "hidden_sizes": [32, 32], "save_interval": 1, "test_interval": 4, "test_episodes": 1,
        "buffer_size": 100}  # fmt: skip
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
HOSTS = ("host-a", "host-b")


def wait_for(predicate, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


def read_run(run_id):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id)


def state_of(run_id) -> str:
    run = read_run(run_id)
    return run.state.type.value if run.state is not None else "NONE"


def committed(bucket: str, prefix: str) -> int:
    # a fresh session: boto3's default one keeps the credentials it first read (another test's keys)
    listing = boto3.session.Session().client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sum(item["Key"].endswith("/commit.json") for item in listing.get("Contents", []))


def sessions_run_by(cluster: Cluster, host: str) -> set[str]:
    """The sessions whose local working folder is in ``host``'s own ``data/`` (so it ran them)."""
    cache = cluster.folder / host / "data" / "cache"
    return {path.name.rsplit("-", 1)[0] for path in cache.iterdir()} if cache.is_dir() else set()


@contextlib.contextmanager
def client_of(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """This process as a client of the cluster's servers (Prefect, MLflow, S3); yields the environment."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    for key, value in cluster.client_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PREFECT_HOME", str(cluster.folder / "prefect-client"))
    settings = {PREFECT_API_URL: cluster.client_env["PREFECT_API_URL"]}
    if "PREFECT_API_AUTH_STRING" in cluster.client_env:
        settings[PREFECT_API_AUTH_STRING] = cluster.client_env["PREFECT_API_AUTH_STRING"]
    with temporary_settings(settings):
        yield {**os.environ}


def submit(parameters: dict) -> str:
    from prefect.deployments import run_deployment

    return str(run_deployment("train/pendulum-sac", parameters=parameters, timeout=0).id)


def retry(run_id: str, env: dict[str, str]) -> None:
    """What the UI's Retry does: ``prefect flow-run retry <id>``."""
    prefect = str(Path(sys.executable).with_name("prefect"))
    result = subprocess.run([prefect, "--no-prompt", "flow-run", "retry", run_id], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def mark_crashed_when_silent(run_id: str, bound: float | None) -> str:
    """Wait until the run is Crashed: by the stack's watcher (``bound``), or by one watcher pass here."""
    from digideep_stack.watcher import check_once

    seen = []

    def crashed():
        if bound is None:
            check_once(crash_after=3.0)  # nothing else is RUNNING now: a short bound is safe
        run = read_run(run_id)
        seen[:] = [run.state.type.value, run.state.message]
        return run.state.type.value == "CRASHED" and run.state.message

    try:
        return wait_for(crashed, 90 if bound is None else bound + 120, "Crashed", every=1.0)
    except AssertionError as error:
        raise AssertionError(f"{error}; the run is {seen}") from None


def wait_out_the_lease(url: str) -> None:
    """A dead host's lease frees its session ttl (+10 s of clock skew) after its last renewal."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    # a fresh boto3 session, not Location: fsspec reuses the S3 filesystem an earlier test made for
    # another server (its instance cache does not key on AWS_ENDPOINT_URL)
    body = boto3.session.Session().client("s3").get_object(Bucket=bucket, Key=f"{prefix}/.lease.json")["Body"]
    record = json.loads(body.read())
    time.sleep(max(0.0, float(record["expires"]) + 10.5 - time.time()))


def assert_tidied_after_the_kill(run_id: str, last_line: str) -> None:
    """No task run of the retried run is left Running, and the killed attempt's last line is in its logs.

    The line is there as Prefect got it from the killed attempt, or sent by the retry from ``log.txt``.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId

    from flows.recovery import KILLED_PREFIX, LOG_LINE

    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
    unfinished = [t.name for t in task_runs if t.state.type.value in ("RUNNING", "PENDING")]
    assert not unfinished, f"task runs left unfinished after the retry: {unfinished}"
    message = LOG_LINE.match(last_line).group(2)
    assert {message, f"{KILLED_PREFIX}{last_line}"} & {log.message for log in logs}, last_line


def dead_host_scenario(
    cluster: Cluster, env: dict[str, str], tmp_path: Path, kill: Callable[[str], None], while_running=None
) -> None:
    """A run starts on one host, which dies; Crashed, retried, resumed on the other host from S3.

    ``kill(host)`` kills a host; ``while_running()`` is called once the run is RUNNING.
    """
    sessions = f"s3://{cluster.bucket}/sessions"
    run_id = submit({"params": "params.pendulum_sac", "cpanel": TINY, "session_path": sessions})
    wait_for(lambda: state_of(run_id) == "RUNNING", 300, "a host starting the run")
    if while_running is not None:
        while_running()
    name = f"{read_run(run_id).name}-{run_id[:8]}"
    url = f"{sessions}/{name}"
    first = wait_for(lambda: next((h for h in HOSTS if name in sessions_run_by(cluster, h)), None), 120,
                     "the session's working folder on the host running it")  # fmt: skip
    other = next(h for h in HOSTS if h != first)
    wait_for(lambda: committed(cluster.bucket, f"sessions/{name}/checkpoints/") >= 2 or state_of(run_id) in FINAL,
             300, "two committed checkpoints", every=0.05)  # fmt: skip
    kill(first)  # SIGKILL to the worker and the flow process; its namespace is deleted
    assert not Location(f"{url}/done.json").exists(), "the run finished before its host died"

    # meanwhile, the same training never interrupted, outside Prefect, tracked by the same server
    straight = tmp_path / "straight"
    command = train_command(tmp_path, "straight", "params.pendulum_sac", TINY)
    outcome: dict = {}
    worker = threading.Thread(target=lambda: outcome.update(result=subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)))  # fmt: skip
    worker.start()

    message = mark_crashed_when_silent(run_id, cluster.watcher_bound)
    assert "heartbeat" in message
    last_line = Location(f"{url}/log.txt").read_text().splitlines()[-1]  # as the bucket has it
    wait_out_the_lease(url)
    retry(run_id, env)
    final = wait_for(lambda: (s := state_of(run_id)) in FINAL and s, 400, "the retried run's end")
    assert final == "COMPLETED", (cluster.folder / other / "worker.log").read_text()[-3000:]
    assert_tidied_after_the_kill(run_id, last_line)
    assert name in sessions_run_by(cluster, other)
    assert "resuming session" in Location(f"{url}/log.txt").read_text()
    worker.join()
    assert outcome["result"].returncode == 0, outcome["result"].stderr[-3000:]

    resumed_states, resumed_memory = session_state(url)
    straight_states, straight_memory = session_state(str(straight))
    assert resumed_memory["iteration"] == straight_memory["iteration"] == TINY["number_epochs"]
    assert_same_training(straight_states, resumed_states)  # weights, optimizers, counters
    assert resumed_memory["pointers"] == straight_memory["pointers"]
    for key, values in straight_memory["contents"].items():
        np.testing.assert_array_equal(values, resumed_memory["contents"][key], err_msg=key)

    from mlflow import MlflowClient

    client = MlflowClient()
    run_ids = {
        "straight": json.loads((straight / "session.json").read_text())["mlflow_run_id"],
        "resumed": Location(f"{url}/session.json").read_json()["mlflow_run_id"],
    }
    histories = {}
    for key, mlflow_run in run_ids.items():
        assert client.get_run(mlflow_run).info.status == "FINISHED"
        histories[key] = metric_histories(client, mlflow_run)
    assert_same_histories(histories["straight"], histories["resumed"])


def test_a_dead_hosts_run_is_retried_on_the_other_host_and_matches_an_uninterrupted_run(
    light_cluster: Cluster, monkeypatch, tmp_path
):
    """On the light servers (the default suite); the test runs the crash watcher's check."""
    cluster = light_cluster
    try:
        with client_of(cluster, monkeypatch) as env:
            cluster.start_host("host-a")
            dead_host_scenario(
                cluster, env, tmp_path, kill=lambda host: cluster.hosts[host].kill(),
                while_running=lambda: cluster.start_host("host-b"),  # idle until the run comes back
            )  # fmt: skip
    finally:
        cluster.stop_hosts()


def kill_with_ip_netns(cluster: Cluster) -> Callable[[str], None]:
    """Kill a host of ``make demo-cluster`` as its README says: every process in it, then its namespace."""

    def kill(host: str) -> None:
        namespace = f"{cluster.network.prefix}-{host}"
        subprocess.run(f"ip netns pids {namespace} | xargs -r kill -9", shell=True, check=True)
        subprocess.run(["ip", "netns", "del", namespace], check=True)

    return kill


@pytest.mark.slow
def test_make_demo_cluster_spreads_a_sweep_over_both_hosts_and_survives_a_dead_host(
    demo_cluster: Cluster, monkeypatch, tmp_path
):
    """The full stack of ``make demo-cluster``: PostgreSQL, auth, and its own crash watcher (60 s).

    The sweep's own flow runs here, in the test, so that both hosts' single slots go to its runs.
    """
    from mlflow import MlflowClient

    from flows.sweep import sweep

    cluster = demo_cluster
    with client_of(cluster, monkeypatch) as env:
        rows = sweep(deployment="train/pendulum-sac", grid={}, seeds=[0, 1, 2, 3],
                     base_cpanel={**TINY, "number_epochs": 2}, session_path=f"s3://{cluster.bucket}/sweep")  # fmt: skip
        assert [row["state"] for row in rows] == ["COMPLETED"] * 4, rows
        names = {f"{read_run(row['flow_run_id']).name}-{row['flow_run_id'][:8]}" for row in rows}
        for host in HOSTS:
            assert names & sessions_run_by(cluster, host), f"{host} ran none of the sweep's runs"
        client = MlflowClient()
        keys = [item["Key"] for item in boto3.session.Session().client("s3").list_objects_v2(
            Bucket=cluster.bucket, Prefix="mlartifacts/").get("Contents", [])]  # fmt: skip
        for name in names:
            mlflow_run = Location(f"s3://{cluster.bucket}/sweep/{name}/session.json").read_json()[
                "mlflow_run_id"
            ]
            assert client.get_run(mlflow_run).info.status == "FINISHED"
            assert any(mlflow_run in key and key.endswith("states.pt") for key in keys), name

        dead_host_scenario(cluster, env, tmp_path, kill=kill_with_ip_netns(cluster))


def test_make_demo_cluster_makes_its_prefect_profile_active_and_writes_a_private_client_file(
    demo_cluster: Cluster, tmp_path
):
    """The docs' run command in another shell with nothing exported reaches the cluster's server.

    Run outside the project (Prefect reads a ``.env`` of the current folder before the profile),
    scheduled an hour ahead so that no host picks it up. Ctrl-C making the profile active before
    active again is checked when the fixture stops the demo.
    """
    cluster = demo_cluster
    profiles = toml.loads((cluster.prefect_home / "profiles.toml").read_text())
    assert profiles["active"] == "digideep-cluster"
    assert (
        profiles["profiles"]["digideep-cluster"]["PREFECT_API_URL"] == cluster.client_env["PREFECT_API_URL"]
    )
    assert cluster.client_env["PREFECT_API_URL"].startswith(f"http://{cluster.network.address}:")

    (documented,) = [
        c for f, c in shown_commands() if f == "scaling-out.md" and "session_path=s3://digideep" in c
    ]
    env = {**user_env(), "PREFECT_HOME": str(cluster.prefect_home)}
    (tmp_path / ".venv").symlink_to(BIN.parent)
    result = subprocess.run(f"{documented} --start-in 'in 1 hour'", shell=True, cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", result.stdout).group(1)
    user, password = cluster.client_env["PREFECT_API_AUTH_STRING"].split(":", 1)
    assert status(f"{cluster.client_env['PREFECT_API_URL']}/flow_runs/{run_id}", user, password) == 200
    assert_a_private_client_file(cluster.folder / "stack" / "client.env", cluster.folder / ".env")
