"""A real production stack, started by ``make stack-up`` and stopped by ``make stack-down``.

One stack per module, as a user starts it: ``make stack-up`` with the user's defaults (one worker)
and ``STACK_ARGS`` pointing its data, logs and ``.env`` at a temporary folder and its servers at
free ports; a module that needs other options overrides :func:`stack_options` (the host-failure
tests run no worker of their own and start their "hosts", :func:`hosts`, so that a host can be
killed without the stack noticing a dead child and stopping). ``make stack-down`` with the same
``STACK_ARGS`` stops it; then no process it started may run and no port of it may be listened on.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import toml

from digideep.utility.processes import wait_for_http
from digideep_stack.secrets import read_env_file
from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MARK = "DIGIDEEP_STACK_TEST"  # in the stack's environment, so every process under it inherits it


def user_env() -> dict[str, str]:
    """This environment as a user's shell has it: no outer make's flags, no stack's client settings."""
    drop = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "PREFECT_API_", "MLFLOW_TRACKING_", "AWS_")
    return {key: value for key, value in os.environ.items() if not key.startswith(drop)}


def make(target: str, *variables: str) -> list[str]:
    """``make <target> VARIABLE=...`` in the repository, as a user types it.

    ``-o install`` leaves the install step out: the tests run in the installed environment (``make
    test`` has just made it), and a reinstall under running tests would change their packages.
    """
    return ["make", "--no-print-directory", "-o", "install", f"VENV={BIN.parent}", target, *variables]


@dataclass
class RunningStack:
    folder: Path
    process: subprocess.Popen  # make stack-up
    stack_args: str  # STACK_ARGS of make stack-up and make stack-down
    ports: dict[str, int]
    lines: list[str]
    secrets: dict[str, str] = field(repr=False)  # .env, the stack's own (kept out of failure reports)
    client_env: dict[str, str] = field(repr=False)  # data/client.env: what a worker or a user's shell sets

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def env_file(self) -> Path:
        return self.folder / ".env"

    @property
    def client_file(self) -> Path:
        return self.data / "client.env"

    @property
    def logs(self) -> Path:
        return self.data / "logs"

    @property
    def prefect_home(self) -> Path:
        """The ``PREFECT_HOME`` of the user who ran ``make stack-up`` (never the real ``~/.prefect``)."""
        return self.folder / "prefect-home"


def start_stack(folder: Path, workers: int = 1, args: tuple[str, ...] = ()) -> RunningStack:
    """``make stack-up WORKERS=workers STACK_ARGS=...``; wait for its "Stack up" line.

    The shell commands a user then runs (``set -a; . data/stack/client.env; set +a``) read the file
    this returns in ``client_env``.
    """
    ports = {name: free_port() for name in ("postgres", "prefect", "mlflow", "s3")}
    stack_args = shlex.join(
        ["--data", str(folder / "data"), "--env-file", str(folder / ".env"), *args]
        + [option for name, port in ports.items() for option in (f"--{name}-port", str(port))]
    )
    process = subprocess.Popen(
        make("stack-up", f"WORKERS={workers}", f"STACK_ARGS={stack_args}"),
        cwd=REPO, env={**user_env(), MARK: str(folder), "PREFECT_HOME": str(folder / "prefect-home")},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    for line in process.stdout:  # every service's start is bounded, so the stack ends or comes up
        lines.append(line.rstrip())
        if line.startswith("Stack up") or "error" in line:
            break
    if not lines or not lines[-1].startswith("Stack up"):
        running = RunningStack(folder, process, stack_args, ports, lines, {}, {})
        left = stop_stack(running)
        raise RuntimeError("the stack did not come up:\n" + "\n".join(lines) + (f"\n{left}" if left else ""))
    secrets = read_env_file(folder / ".env")
    client_env = read_env_file(folder / "data" / "client.env")
    return RunningStack(folder, process, stack_args, ports, lines, secrets, client_env)


def marked_processes(folder: Path) -> list[psutil.Process]:
    """Every process of this machine whose environment carries the stack's mark (daemons included)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARK) == str(folder) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def listeners(ports: dict[str, int]) -> list[str]:
    return [
        f"{c.laddr.ip}:{c.laddr.port} (pid {c.pid})"
        for c in psutil.net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port in ports.values()
    ]


def describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline()[:4])[:100]}"
    except psutil.Error:
        return str(process.pid)


def stop_stack(stack: RunningStack) -> str:
    """``make stack-down STACK_ARGS=...``, then what is left: '' when the stack stopped everything.

    Whatever is left is killed, so that a failing test leaves no server behind.
    """
    tree = []
    if stack.process.poll() is None:
        tree = [
            psutil.Process(stack.process.pid),
            *psutil.Process(stack.process.pid).children(recursive=True),
        ]
    down = subprocess.run(
        make("stack-down", f"STACK_ARGS={stack.stack_args}"),
        cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    problems = (
        [] if down.returncode == 0 else [f"make stack-down: {down.returncode}: {down.stdout}{down.stderr}"]
    )
    try:
        code = stack.process.wait(timeout=30)  # down waits until the stack's process has ended
    except subprocess.TimeoutExpired:
        code = "still running"
    if code != 0:
        problems.append(f"make stack-up ended with {code}")
    _, alive = psutil.wait_procs(tree, timeout=5)  # gone, or a zombie its parent is about to reap
    alive = {p.pid: p for p in [*alive, *marked_processes(stack.folder)]}
    open_ports = listeners(stack.ports)
    if alive or open_ports:
        problems.append(f"left running: {[describe(p) for p in alive.values()]}; listening: {open_ports}")
        for process in alive.values():
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(list(alive.values()), timeout=10)
    if stack.process.poll() is None:
        os.killpg(stack.process.pid, signal.SIGKILL)
        stack.process.wait()
    if stack.process.stdout is not None:
        stack.process.stdout.close()
    return "; ".join(problems)


@pytest.fixture(scope="module")
def stack_options() -> dict:
    """:func:`start_stack`'s options for the module's stack: a user's ``make stack-up`` (one worker).

    A module overrides this fixture to start its stack otherwise.
    """
    return {"workers": 1}


@pytest.fixture(scope="module")
def stack(stack_options: dict) -> Iterator[RunningStack]:
    """``make stack-up`` for the module; ``make stack-down`` after it must leave nothing running."""
    # PostgreSQL runs as the postgres user, who cannot enter pytest's private temporary folders.
    folder = Path(tempfile.mkdtemp(prefix="digideep-stack-test-"))
    folder.chmod(0o755)
    try:
        running = start_stack(folder, **stack_options)
        try:
            yield running
        finally:
            if running.process.poll() is None:  # not stopped by a test already
                left = stop_stack(running)
                assert not left, left
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


# -- two hosts in network namespaces (tests/stack/test_cluster.py) ---------------------------------


@dataclass
class Cluster:
    """Servers bound to a bridge's address and hosts that reach them from their own namespaces."""

    network: object  # digideep_stack.cluster.Network
    folder: Path
    bucket: str
    client_env: dict[str, str] = field(repr=False)  # a host's (and this test process's) client variables
    hosts: dict[str, object] = field(default_factory=dict)  # name -> digideep_stack.cluster.ClusterHost
    watcher_bound: float | None = None  # the crash watcher's bound when the stack runs one; None: tests check
    prefect_home: Path | None = None  # PREFECT_HOME of the user who ran make demo-cluster (its profile)

    def start_host(self, name: str):
        from digideep_stack.cluster import ClusterHost

        net = self.network.add_host(name)
        host = ClusterHost(self.network, net, self.folder / name, self.client_env, project=REPO)
        self.hosts[name] = host
        return host

    def stop_hosts(self) -> None:
        for name, host in list(self.hosts.items()):
            host.stop()
            self.network.remove_host(name)
        self.hosts.clear()


HOST_ENV = {
    "PYTHONPATH": str(REPO),
    "PYTHONHASHSEED": "0",
    "PREFECT_WORKER_QUERY_SECONDS": "1",
    "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "digideep",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DIGIDEEP_LEASE_TTL": "30",  # a dead host's session is free 30 s (+10 s clock skew) after it died
}


def _spawn(folder: Path, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
    log = open(folder / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True)


@pytest.fixture(scope="module")
def light_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The light servers on a bridge: Prefect on SQLite, moto S3 with keys checked, MLflow on sqlite.

    No PostgreSQL and no auth on Prefect and MLflow (the full stack, with both, is the slow
    variant): this keeps one host-failure case in the default suite. Hosts are started by the tests.
    """
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    from digideep_stack.cluster import Network
    from digideep_stack.stack import POOL

    folder = tmp_path_factory.mktemp("cluster")
    network = Network(prefix=f"dt{os.getpid() % 1000}", subnet=f"10.201.{os.getpid() % 250}")
    processes: list[subprocess.Popen] = []
    cluster = None
    try:
        network.up()
        address, bin_dir = network.address, Path(sys.executable).parent
        ports = {name: str(free_port()) for name in ("prefect", "mlflow", "s3")}
        s3 = {"AWS_ACCESS_KEY_ID": "cluster-test", "AWS_SECRET_ACCESS_KEY": "cluster-test-secret",
              "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{address}:{ports['s3']}",
              "MLFLOW_S3_ENDPOINT_URL": f"http://{address}:{ports['s3']}"}  # fmt: skip
        base = {**os.environ, **HOST_ENV, **s3}
        servers = {
            "s3": [sys.executable, "-m", "digideep_stack.object_store", "--host", address, "--port", ports["s3"]],
            "prefect-server": [str(bin_dir / "prefect"), "server", "start", "--host", address, "--port",
                               ports["prefect"]],
            "mlflow-server": [str(bin_dir / "mlflow"), "server", "--host", address, "--port", ports["mlflow"],
                              "--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
                              "--artifacts-destination", "s3://digideep/mlartifacts"],
        }  # fmt: skip
        env = {**base, "PREFECT_HOME": str(folder / "prefect-server")}
        started = {name: _spawn(folder, name, command, env) for name, command in servers.items()}
        processes.extend(started.values())
        wait_for_http(f"{s3['AWS_ENDPOINT_URL']}/moto-api/", started["s3"], "the S3 server")
        import boto3

        boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT_URL"], region_name="us-east-1",
                     aws_access_key_id=s3["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=s3["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket="digideep")  # fmt: skip
        api = f"http://{address}:{ports['prefect']}/api"
        wait_for_http(f"{api}/health", started["prefect-server"], "the Prefect server")
        client_env = {**HOST_ENV, **s3, "PREFECT_API_URL": api,
                      "MLFLOW_TRACKING_URI": f"http://{address}:{ports['mlflow']}"}  # fmt: skip
        cli = {**os.environ, **client_env, "PWD": str(REPO), "PREFECT_HOME": str(folder / "prefect-client")}
        prefect = [str(bin_dir / "prefect"), "--no-prompt"]
        for args in (["work-pool", "create", POOL, "--type", "process"], ["deploy", "--all"]):
            result = subprocess.run([*prefect, *args], cwd=REPO, env=cli, capture_output=True, text=True)
            assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        wait_for_http(
            f"{client_env['MLFLOW_TRACKING_URI']}/health", started["mlflow-server"], "the MLflow server"
        )
        cluster = Cluster(network, folder, "digideep", client_env)
        yield cluster
    finally:
        from digideep.utility.processes import stop_tree

        if cluster is not None:
            cluster.stop_hosts()
        for process in reversed(processes):
            stop_tree(process, grace=10)
        network.down()


@pytest.fixture(scope="module")
def demo_cluster() -> Iterator[Cluster]:
    """``make demo-cluster`` with two hosts, as a user runs it (root), in its own ``PREFECT_HOME``.

    The full stack (PostgreSQL, auth, the crash watcher with a 60 s bound) on a bridge, each host a
    worker running one flow run at a time. At the end it gets Ctrl-C (SIGINT, to its process group
    as a terminal sends it) and must have removed its namespaces and links, stopped every process it
    started and made Prefect's default profile, active before it, active again.
    """
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    from digideep_stack.cluster import Network

    folder = Path(tempfile.mkdtemp(prefix="digideep-cluster-test-"))
    folder.chmod(0o755)  # PostgreSQL runs as the postgres user
    prefix, subnet = f"dc{os.getpid() % 1000}", f"10.202.{os.getpid() % 250}"
    args = ["--data", str(folder), "--env-file", str(folder / ".env"), "--prefix", prefix, "--subnet", subnet,
            "--crash-after", "60", "--worker-limit", "1"]  # fmt: skip
    for name in ("postgres", "prefect", "mlflow", "s3"):
        args += [f"--{name}-port", str(free_port())]
    prefect_home = folder / "prefect-home"
    env = {**user_env(), **HOST_ENV, "PREFECT_HOME": str(prefect_home)}
    process = subprocess.Popen(make("demo-cluster", "HOSTS=2", f"CLUSTER_ARGS={shlex.join(args)}"), cwd=REPO,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        lines = []
        for line in process.stdout:
            lines.append(line.rstrip())
            if line.startswith("Cluster up") or "error" in line:
                break
        assert lines and lines[-1].startswith("Cluster up"), "\n".join(lines)
        client_env = {**HOST_ENV, **read_env_file(folder / "stack" / "client.env")}
        yield Cluster(Network(prefix, subnet), folder, "digideep", client_env, watcher_bound=60.0,
                      prefect_home=prefect_home)  # fmt: skip
    finally:
        tree = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
        try:
            code = process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
        output = process.stdout.read()
        process.stdout.close()
        _, alive = psutil.wait_procs(tree, timeout=30)
        for survivor in alive:
            survivor.kill()
        left = [line for line in subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
                .splitlines() if f" {prefix}" in line]  # fmt: skip
        namespaces = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
                      .split() if n.startswith(f"{prefix}-")]  # fmt: skip
        from digideep_stack.cluster import clean

        clean(prefix)
        profiles = toml.loads((prefect_home / "profiles.toml").read_text())
        shutil.rmtree(folder, ignore_errors=True)
        # make, sent the Ctrl-C too, ends by that signal once its recipe has ended (code 0 or -SIGINT);
        # the recipe's own failure would be an "error" line in the output
        left_over = (code, [describe(p) for p in alive], left, namespaces, output)
        assert code in (0, -signal.SIGINT) and "error" not in output.lower(), left_over
        assert not alive and not left and not namespaces, left_over
        assert profiles["active"] == "ephemeral", (profiles["active"], output)  # Prefect's default, as before
        assert "Prefect profile: 'ephemeral' is active again" in output, output
