"""``make stack-up`` as the README gives it: PostgreSQL, the Prefect and MLflow servers with auth, S3,
a worker and the crash watcher, probed and used, then stopped by ``make stack-down``.

Default suite (about 2 minutes on 2 cores): the stack comes up (a typo in ``Stack.up`` fails every
test here), every server refuses a missing or wrong password, the CLI names a wrong one in one
line, the client file (``data/stack/client.env``, mode 0600) holds the client settings and no
server-only secret, the docs' client commands (a deployment run through the stack's profile, then
``digideep runs`` with the client file loaded) complete on the stack's worker with its artifacts in
S3 and no secret in any log, param or tag, and ``make stack-down`` leaves no process and no
listening port. While the stack runs, its Prefect profile is the active one of the
(temporary) ``PREFECT_HOME`` it was started with, so ``prefect`` with nothing exported reaches it;
after ``make stack-down`` the profile active before is active again. The host-failure cases wait
out the watcher's bound: tests/stack/test_stack_crash.py (slow).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest
import toml

from digideep_stack.secrets import SERVER_ONLY, read_env_file
from tests.docs.test_commands import shown_commands
from tests.stack.conftest import BIN, REPO, RunningStack, listeners, marked_processes, stop_stack, user_env

TINY = {"number_epochs": 3, "epoch_size": 1, "n_steps": 20, "learning_starts": 20, "batch_size": 32,
        "hidden_sizes": [32, 32], "save_interval": 1, "test_interval": 3, "test_episodes": 1,
        "buffer_size": 1000}  # fmt: skip


CLIENT_SETTINGS = {
    "PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_LOGGING_EXTRA_LOGGERS",
    "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_S3_ENDPOINT_URL",
    "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
}  # fmt: skip
"""What a client (a user's shell, a worker on another machine) gets: addresses and client secrets."""


def assert_a_private_client_file(client_file: Path, env_file: Path) -> None:
    """The client file holds exactly :data:`CLIENT_SETTINGS`, owner-only, and no server-only secret."""
    assert stat.S_IMODE(os.stat(client_file).st_mode) == 0o600
    client, secrets = read_env_file(client_file), read_env_file(env_file)
    assert set(client) == CLIENT_SETTINGS
    for key in ("PREFECT_API_AUTH_STRING", "MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
        assert client[key] == secrets[key]  # the servers' own
    text = client_file.read_text()
    for key in SERVER_ONLY:
        assert len(secrets[key]) >= 24 and secrets[key] not in text, f"{key} is in the client file"


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
    announced = [line.split()[0] for line in stack.lines if line.strip()]
    for service in ("PostgreSQL", "S3", "Prefect", "MLflow", "Deployments", "Workers", "Stack"):
        assert service in announced, stack.lines
    env = stack.client_env
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
    env = {**user_env(), **stack.client_env, variable: "digideep:wrong"}
    result = subprocess.run(
        [str(BIN / "digideep"), *command, "--session-path", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("digideep: error:")]
    assert len(errors) == 1 and f"the {server} server" in errors[0] and "401" in errors[0], result.stderr[
        -2000:
    ]
    assert "Traceback" not in result.stderr
    assert "wrong" not in errors[0]


def test_the_client_file_holds_the_client_settings_and_no_server_secret(stack: RunningStack):
    assert_a_private_client_file(stack.client_file, stack.env_file)
    assert stack.client_env["PREFECT_API_URL"] == f"http://127.0.0.1:{stack.ports['prefect']}/api"
    assert stack.client_env["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{stack.ports['s3']}"


def documented_client_commands() -> list[str]:
    """The "Use the stack from a shell" block of docs/scaling-out.md, its commands in order."""
    (block,) = [
        block
        for block in re.findall(r"```bash\n(.*?)```", (REPO / "docs" / "scaling-out.md").read_text(), re.S)
        if "data/stack/client.env" in block
    ]
    return [c for f, c in shown_commands() if f == "scaling-out.md" and c in " ".join(block.split())]


def test_the_documented_client_commands_run_a_deployment_with_its_artifacts_in_s3_and_no_secret_anywhere(
    stack: RunningStack, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    """The docs' lines in a shell with nothing exported: ``prefect deployment run`` through the
    stack's profile, then the client file loaded and ``digideep runs`` listing the run.

    In a scratch folder holding ``.venv`` and ``data/stack/client.env`` (the stack's), not the
    project: Prefect reads a ``.env`` of the current folder, and the project's is another stack's
    here. The run's cpanel is a tiny one, its sessions go to a temporary folder and it is watched.
    """
    import mlflow

    commands = documented_client_commands()
    assert [c.split()[0] for c in commands] == [".venv/bin/prefect", "set", ".venv/bin/digideep"], commands
    run, load, listing = commands
    assert "--param cpanel='{\"seed\": 1}'" in run and load == "set -a; . data/stack/client.env; set +a"
    run = run.replace(
        "--param cpanel='{\"seed\": 1}'",
        f"--param cpanel={shlex.quote(json.dumps(TINY))} --param session_path={shlex.quote(json.dumps(str(tmp_path)))} "
        "--watch --watch-timeout 400",
    )
    folder = tmp_path / "shell"
    (folder / "data" / "stack").mkdir(parents=True)
    (folder / ".venv").symlink_to(BIN.parent)
    (folder / "data" / "stack" / "client.env").symlink_to(stack.client_file)
    env = {**user_env(), "PREFECT_HOME": str(stack.prefect_home)}
    result = subprocess.run(["bash", "-c", f"set -e\n{run}\n{load}\n{listing}"], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Flow run finished successfully in 'Completed'" in output, output[
        -3000:
    ]
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", output).group(1)

    for key, value in stack.client_env.items():
        monkeypatch.setenv(key, value)
    client = mlflow.MlflowClient()
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        f"tags.`digideep.prefect.flow_run_id` = '{run_id}'",
    )
    assert len(runs) == 1 and runs[0].info.status == "FINISHED" and runs[0].data.metrics, runs
    run = runs[0]
    assert run.info.run_id in result.stdout, result.stdout[-3000:]  # listed by digideep runs
    s3 = boto3.session.Session().client("s3")  # a fresh session reads this stack's keys
    keys = [
        o["Key"] for o in s3.list_objects_v2(Bucket="digideep", Prefix="mlartifacts/").get("Contents", [])
    ]
    assert any(key.endswith("states.pt") and run.info.run_id in key for key in keys), keys

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    # explicit settings: a worker process of the suite may hold a Prefect settings context of its own
    api = {PREFECT_API_URL: stack.client_env["PREFECT_API_URL"]}
    api[PREFECT_API_AUTH_STRING] = stack.client_env["PREFECT_API_AUTH_STRING"]
    with temporary_settings(updates=api), get_client(sync_client=True) as prefect_client:
        flow_run = prefect_client.read_flow_run(run_id)
    secrets = [value.split(":", 1)[-1] for key, value in stack.secrets.items() if key != "MLFLOW_TRACKING_USERNAME"
               and key != "AWS_ACCESS_KEY_ID"]  # fmt: skip
    texts = [json.dumps([flow_run.parameters, run.data.params, run.data.tags]), output]
    texts += [path.read_text(errors="replace") for path in Path(stack.folder).rglob("*.log")]  # worker-1.log
    texts += [
        path.read_text(errors="replace")
        for path in tmp_path.rglob("*")
        if path.suffix in (".json", ".txt", ".log")
    ]
    assert len(texts) > 5
    for secret in secrets:
        assert not any(secret in text for text in texts), "a secret leaked into a log, a param or a tag"


def test_prefect_in_a_shell_with_nothing_exported_reaches_the_stack_through_its_profile(
    stack: RunningStack, tmp_path
):
    """``prefect deployment run`` with no PREFECT_API_URL or auth string in the environment.

    Run outside the project: Prefect reads a ``.env`` of the current folder before the profile, and
    the project's ``.env`` is another stack's here (a user's holds the same auth string as the profile).
    """
    env = {**user_env(), "PREFECT_HOME": str(stack.prefect_home)}
    assert not [key for key in env if key.startswith("PREFECT_API")]
    result = subprocess.run(  # an hour ahead: the stack's worker leaves it alone
        [str(BIN / "prefect"), "--no-prompt", "deployment", "run", "train/pendulum-sac", "--start-in", "in 1 hour"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", result.stdout).group(1)
    user, password = stack.client_env["PREFECT_API_AUTH_STRING"].split(":", 1)
    assert status(f"{stack.client_env['PREFECT_API_URL']}/flow_runs/{run_id}", user, password) == 200
    profiles = stack.prefect_home / "profiles.toml"
    assert profiles.stat().st_mode & 0o777 == 0o600  # it holds the auth string


def test_make_stack_down_stops_every_process_and_frees_every_port(stack: RunningStack):
    running = marked_processes(stack.folder)
    commands = " ".join(" ".join(process.cmdline()) for process in running)
    for started in (
        "postgres -D",
        "object_store",
        "prefect server",
        "mlflow server",
        "worker start",
        "watcher",
    ):
        assert started in commands, f"{started} is not running"  # the check below sees what the stack started
    assert len(listeners(stack.ports)) >= len(stack.ports)

    left = stop_stack(stack)
    assert not left, left
    assert not (stack.data / "stack.pid").exists()
    profiles = toml.loads((stack.prefect_home / "profiles.toml").read_text())
    assert profiles["active"] == "ephemeral"  # Prefect's default, active before make stack-up
    assert profiles["profiles"]["digideep-stack"]["PREFECT_API_URL"] == stack.client_env["PREFECT_API_URL"]
