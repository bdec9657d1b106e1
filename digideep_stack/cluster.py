"""``make demo-cluster``: the production stack and two worker hosts, each in its own network namespace.

``python -m digideep_stack.cluster up`` (root; Linux ``ip netns``) builds a small network on this
machine and runs the stack on it:

- a bridge ``ddbr`` with the address 10.200.0.1/24, the only address the Prefect, MLflow and S3
  servers bind (PostgreSQL, which only the servers use, stays on 127.0.0.1);
- per host a network namespace ``dd-<name>`` joined to the bridge by a veth pair (the host's end
  ``dd<N>n`` with 10.200.0.<N+1> inside the namespace, the bridge's end ``dd<N>h``), so the host
  reaches the servers over the bridge address and nothing else;
- per host a Prefect worker inside its namespace, with its own hostname (``host-a``, ...; the
  session lease and Prefect name it), its own working folder, ``PREFECT_HOME`` and
  ``data/`` (the project's ``data/`` folder is bind-mounted over by the host's own, in the host's
  mount namespace): the two hosts share no local disk where runs write. Sessions go to the stack's
  bucket (``s3://digideep/sessions``), so a run retried on the other host resumes from there.

It prints the servers' lines and each host's address, makes the Prefect profile
``digideep-cluster`` (the server on the bridge, with its auth string) the active one as ``make
stack-up`` does (:meth:`Stack.prefect_profile <digideep_stack.stack.Stack.prefect_profile>`), so
that ``prefect deployment run`` in another shell reaches it, says how to submit runs, then waits.
Ctrl-C (SIGTERM, SIGHUP) stops the workers and their flow runs, deletes the namespaces, the veth
pairs and the bridge, makes the profile active before active again, and stops the stack. ``python -m digideep_stack.cluster clean`` removes what a killed
demo left (namespaces and links whose names start with the prefix).

The same pieces serve tests/stack/test_cluster.py: :class:`Network` (bridge, namespaces, cutting a
host's link) and :class:`ClusterHost` (a worker in a namespace that can be killed with its host).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from digideep.errors import UsageError
from digideep.utility.processes import stop_on_signals, stop_tree
from digideep_stack import postgres, profile
from digideep_stack.stack import POOL, ROOT, ServiceError, Stack, StackConfig

HOST_SHELL = 'hostname "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@"'
"""Run inside a host's namespaces: its hostname, its own folder over the project's ``data/``, then
the command (``ip netns exec`` gives it a private mount namespace, ``unshare --uts`` its hostname)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise UsageError(
            f"ip {' '.join(args)} failed: {result.stderr.strip()} (needs root and Linux ip netns)"
        )
    return result


@dataclass
class NetHost:
    """One host's place on the network: its namespace, its veth pair and its address."""

    name: str
    namespace: str
    outside: str  # the veth end on the bridge
    inside: str  # the veth end in the namespace
    address: str


class Network:
    """A bridge and one network namespace per host, on this machine; :meth:`down` removes them all.

    Args:
        prefix: the start of every name this network creates (namespaces, links); short, since a
            link name holds at most 15 characters.
        subnet: the first three numbers of its /24; the bridge is ``<subnet>.1``.
    """

    def __init__(self, prefix: str = "dd", subnet: str = "10.200.0"):
        self.prefix = prefix
        self.subnet = subnet
        self.bridge = f"{prefix}br"
        self.address = f"{subnet}.1"
        self.hosts: dict[str, NetHost] = {}
        self.created = False  # the bridge is ours to delete

    def up(self) -> None:
        """Create the bridge; refuse in one line when it exists (another demo, or one killed)."""
        if os.geteuid() != 0:
            raise UsageError("the cluster demo needs root (it creates network namespaces); run it with sudo")
        if shutil.which("ip") is None:
            raise UsageError("the cluster demo needs the 'ip' command (iproute2)")
        if _ip("link", "show", self.bridge, check=False).returncode == 0:
            raise UsageError(
                f"the bridge {self.bridge} exists: another cluster demo runs, or one was killed; "
                f"'python -m digideep_stack.cluster clean --prefix {self.prefix}' removes what it left"
            )
        _ip("link", "add", self.bridge, "type", "bridge")
        self.created = True
        try:
            _ip("addr", "add", f"{self.address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.down()
            raise

    def add_host(self, name: str) -> NetHost:
        """A namespace ``<prefix>-<name>`` on the bridge with the next free address."""
        index = len(self.hosts) + 1
        host = NetHost(
            name=name,
            namespace=f"{self.prefix}-{name}",
            outside=f"{self.prefix}{index}h",
            inside=f"{self.prefix}{index}n",
            address=f"{self.subnet}.{index + 1}",
        )
        self.hosts[name] = host
        _ip("netns", "add", host.namespace)
        _ip("link", "add", host.outside, "type", "veth", "peer", "name", host.inside)
        _ip("link", "set", host.inside, "netns", host.namespace)
        _ip("link", "set", host.outside, "master", self.bridge)
        _ip("link", "set", host.outside, "up")
        _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.inside)
        _ip("-n", host.namespace, "link", "set", host.inside, "up")
        _ip("-n", host.namespace, "link", "set", "lo", "up")
        return host

    def cut(self, name: str) -> None:
        """Take the host's link down: its processes live on but reach no server."""
        _ip("link", "set", self.hosts[name].outside, "down")

    def reconnect(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].outside, "up")

    def remove_host(self, name: str) -> None:
        """Kill every process in the host's namespace and delete it (its veth pair goes with it)."""
        host = self.hosts.pop(name, None)
        if host is None:
            return
        kill_namespace(host.namespace)
        _ip("link", "del", host.outside, check=False)

    def down(self) -> None:
        """Remove every host and the bridge; safe to call twice."""
        for name in list(self.hosts):
            self.remove_host(name)
        if self.created:
            _ip("link", "del", self.bridge, check=False)
            self.created = False


def kill_namespace(namespace: str) -> None:
    """SIGKILL the processes in ``namespace``, then delete it."""
    pids = _ip("netns", "pids", namespace, check=False).stdout.split()
    processes = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, ValueError):
            processes.append(psutil.Process(int(pid)))
            processes[-1].kill()
    psutil.wait_procs(processes, timeout=10)
    _ip("netns", "del", namespace, check=False)


def clean(prefix: str = "dd") -> list[str]:
    """Remove the namespaces and links whose names start with ``prefix`` (left by a killed demo)."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        namespace = line.split()[0] if line.strip() else ""
        if namespace.startswith(f"{prefix}-"):
            kill_namespace(namespace)
            removed.append(namespace)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        link = line.split(":")[1].strip().split("@")[0]
        if link == f"{prefix}br" or (link.startswith(prefix) and link[len(prefix) :].rstrip("hn").isdigit()):
            _ip("link", "del", link, check=False)
            removed.append(link)
    return removed


class ClusterHost:
    """A Prefect worker on one host: in its namespace, with its own folder, PREFECT_HOME and data/.

    Args:
        network: the network holding the host's namespace.
        net: the host (from :meth:`Network.add_host`).
        folder: the host's working folder (``prefect/``, ``data/`` and ``worker.log`` go there).
        env: the worker's environment (the stack's client variables: addresses and secrets).
        project: the project folder (``prefect.yaml`` runs flows there); its ``data/`` is the host's own.
        queue: the work queue it polls (all of the pool's when None).
        limit: flow runs it runs at once (``prefect worker start --limit``; no limit when None).
    """

    def __init__(
        self,
        network: Network,
        net: NetHost,
        folder: Path,
        env: dict[str, str],
        project: Path = ROOT,
        queue: str | None = None,
        limit: int | None = None,
    ):
        self.network = network
        self.net = net
        self.folder = folder
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "prefect").mkdir(exist_ok=True)
        (project / "data").mkdir(exist_ok=True)
        self.env = {**env, "PREFECT_HOME": str(folder / "prefect")}
        prefect = str(Path(sys.executable).with_name("prefect"))
        worker = [prefect, "worker", "start", "--pool", POOL, "--type", "process", "--name", net.name]
        if queue is not None:
            worker += ["--work-queue", queue]
        if limit is not None:
            worker += ["--limit", str(limit)]
        command = ["ip", "netns", "exec", net.namespace, "unshare", "--uts", "sh", "-c", HOST_SHELL, "sh",
                   net.name, str(folder / "data"), str(project / "data"), *worker]  # fmt: skip
        self.log = open(folder / "worker.log", "ab")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(
            command, cwd=folder, env=self.env, stdout=self.log, stderr=self.log, start_new_session=True
        )

    def kill(self) -> None:
        """The host dies: SIGKILL to the worker and every process in the namespace, then delete it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.network.remove_host(self.net.name)
        self.process.wait()
        self.log.close()

    def stop(self) -> None:
        """Stop the worker and its flow runs (SIGINT, then SIGKILL after a grace period)."""
        if self.process.poll() is None:
            stop_tree(self.process, grace=15)
        self.log.close()


class ClusterStack(Stack):
    """The stack with its servers on the bridge's address and PostgreSQL kept on 127.0.0.1."""

    profile_name = profile.CLUSTER

    def __init__(self, config: StackConfig, announce=print):
        super().__init__(config, announce)
        if config.postgres_url is None:
            self.postgres_base = f"postgresql://{postgres.USER}@127.0.0.1:{config.postgres_port}/postgres"

    def start_postgres(self) -> None:
        bridge, self.config.host = self.config.host, "127.0.0.1"
        try:
            super().start_postgres()
        finally:
            self.config.host = bridge


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m digideep_stack.cluster", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=["up", "clean"])
    parser.add_argument("--hosts", type=int, default=2, help="worker hosts, each in its own namespace (2)")
    parser.add_argument(
        "--worker-limit", type=int, default=None, help="flow runs per host at once (no limit)"
    )
    parser.add_argument("--prefix", default="dd", help="start of the namespaces' and links' names (dd)")
    parser.add_argument("--subnet", default="10.200.0", help="the network's /24, first three numbers")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "cluster", help="logs and host folders")
    parser.add_argument("--env-file", type=Path, default=ROOT / ".env", help="the secrets file (.env)")
    parser.add_argument("--crash-after", type=float, default=120.0, help="the crash watcher's bound (s)")
    defaults = StackConfig()
    for name in ("postgres", "prefect", "mlflow", "s3"):
        parser.add_argument(f"--{name}-port", type=int, default=getattr(defaults, f"{name}_port"))
    arguments = parser.parse_args(argv)
    if arguments.command == "clean":
        removed = clean(arguments.prefix)
        print(f"cluster: removed {', '.join(removed) if removed else 'nothing'}")
        return 0
    network = Network(arguments.prefix, arguments.subnet)
    stack: ClusterStack | None = None
    hosts: list[ClusterHost] = []
    announce = lambda line: print(line, flush=True)  # noqa: E731
    with stop_on_signals():
        try:
            network.up()
            announce(f"Network     bridge {network.bridge} {network.address}/24")
            ports = {
                f"{name}_port": getattr(arguments, f"{name}_port")
                for name in ("postgres", "prefect", "mlflow", "s3")
            }
            config = StackConfig(data=arguments.data / "stack", env_file=arguments.env_file, host=network.address,
                                 workers=0, crash_after=arguments.crash_after, **ports)  # fmt: skip
            stack = ClusterStack(config, announce=announce)
            stack.up()
            env = stack.base_env() | stack.client_env()
            for index in range(arguments.hosts):
                name = f"host-{chr(ord('a') + index)}"
                net = network.add_host(name)
                hosts.append(
                    ClusterHost(network, net, arguments.data / name, env, limit=arguments.worker_limit)
                )
                announce(
                    f"Host        {name}: namespace {net.namespace}, address {net.address}, "
                    f"folder {arguments.data / name}, worker log {arguments.data / name / 'worker.log'}"
                )
            with stack.prefect_profile(announce):
                announce(
                    "Cluster up. Submit runs from another shell (prefect needs nothing: the profile), e.g. "
                    ".venv/bin/prefect deployment run 'train/pendulum-sac' --param "
                    f"session_path=s3://digideep/sessions; digideep and mlflow: set -a; . {stack.client_file}; set +a"
                )
                announce(
                    f"Kill a host: ip netns pids {hosts[0].net.namespace} | xargs -r kill -9; "
                    f"ip netns del {hosts[0].net.namespace}. Ctrl-C stops everything."
                )
                while stack.dead() is None:
                    time.sleep(1)
            print(f"cluster: error: {stack.dead()} exited; stopping", file=sys.stderr)
            return 1
        except (UsageError, ServiceError) as error:
            print(f"cluster: error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 0
        finally:
            for host in hosts:
                host.stop()
            network.down()
            if stack is not None:
                stack.stop()


if __name__ == "__main__":
    sys.exit(main())
