"""Servers that digideep starts (``mlflow ui``, the Prefect server and worker) and how they stop.

Each child runs in its own session (``start_new_session=True``), so a terminal's Ctrl-C reaches only
digideep, which then stops every child and everything the child started: SIGINT to the child's
process group, a grace period, then SIGKILL to whatever of the tree is left (descendants that
moved to a group of their own included, found through psutil). While :func:`stop_on_signals` is
active, SIGTERM and SIGHUP interrupt digideep like Ctrl-C does, so its cleanup runs for them too.
A process a worker started in a session of its own keeps its niceness there with
:func:`autogroup_follows_nice`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil

from digideep.errors import UsageError

__all__ = [
    "autogroup_follows_nice",
    "check_port_free",
    "free_port",
    "ignoring_sigint",
    "signals_ignored",
    "stop_on_signals",
    "stop_tree",
    "terminated_with_parent",
    "wait_for_http",
]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While active, SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt (so ``finally`` blocks run).

    Only the first signal interrupts: later ones are ignored so that they cannot cut the cleanup
    short (:func:`stop_tree` ends in SIGKILL after a bounded grace period).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def interrupt(signum: int, frame: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """While active, SIGINT, SIGTERM and SIGHUP are ignored: for a stop that must finish once begun
    (every daemon stopped), however often Ctrl-C is pressed meanwhile. Their handlers come back after.

    Only the main thread can set handlers; elsewhere it changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def autogroup_follows_nice(pid: int = 0) -> bool:
    """Give the scheduling group of a session-leading process the process's own niceness (Linux).

    Where Linux groups processes by session (``/proc/sys/kernel/sched_autogroup_enabled`` is 1), a
    process's niceness orders it only within its session's group, and the groups share the cores by
    their own niceness. A Prefect worker starts each flow run in a session of its own: a new group at
    niceness 0, so a flow run of a stack started with ``nice -n 19`` would take as large a share of
    the cores as an interactive shell. Called at the start of a flow, this lowers the group's weight
    to the process's niceness.

    Only a session leader's group is changed (its group is its session's, which a process that shares
    the session of a shell does not own), and only upward: a lower niceness would raise the group's
    share and needs a privilege. Where any of it is unavailable (no autogroups, another system, no
    permission), nothing changes.

    Args:
        pid: the process; 0 for this one.

    Returns:
        Whether the group's niceness was changed.
    """
    pid = pid or os.getpid()
    try:
        if os.getsid(pid) != pid:
            return False
        if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1":
            return False
        group = Path(f"/proc/{pid}/autogroup")
        group_nice = int(group.read_text().split()[-1])  # "/autogroup-12 nice 0"
        nice = os.getpriority(os.PRIO_PROCESS, pid)
        if nice <= group_nice:
            return False
        group.write_text(f"{nice}\n")
    except (OSError, ValueError, IndexError):
        return False
    return True


def ignoring_sigint(make: Callable[[], T]) -> Callable[[], T]:
    """``make``, called in a process that from then on ignores SIGINT.

    For what a subprocess worker calls first (the environment constructors of Gymnasium's
    ``AsyncVectorEnv``): a terminal's Ctrl-C reaches every process of its group, and a worker that
    dies of it breaks the run that is finishing its iteration to checkpoint. The run closes its
    workers itself once it has. Picklable, as a worker's constructor must be.
    """
    return functools.partial(_call_ignoring_sigint, make)


def _call_ignoring_sigint(make: Callable[[], T]) -> T:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return make()


def stop_tree(process: subprocess.Popen, grace: float = 20.0, first: int = signal.SIGINT) -> None:
    """Stop ``process`` (started with ``start_new_session=True``) and every process it started.

    ``first`` (SIGINT by default: servers shut down cleanly on it) goes to its process group; whatever
    of the tree still runs after ``grace`` seconds is killed. Uvicorn servers (MLflow's) take SIGTERM:
    after a clean shutdown on SIGINT they raise it again and print a KeyboardInterrupt traceback.
    """
    try:
        leader = psutil.Process(process.pid)
        tree = [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, first)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for member in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(tree, timeout=10)
    process.wait()


def terminated_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send the child SIGTERM when digideep dies, even by SIGKILL.

    A child in a session of its own outlives a ``kill -9`` of its parent, whose cleanup never runs:
    a helper server left behind that way would run on, unowned. ``PR_SET_PDEATHSIG`` (Linux) closes
    that gap; a child whose parent died before the call exits at once. None elsewhere (no such
    guarantee there). libc is loaded here, in the parent, so the forked child only makes the call.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_parent_death_signal() -> None:
        prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)

    return set_parent_death_signal


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port of ``host`` that nothing listens on right now (the system picks it)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def check_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Refuse to start ``what`` on a port something already listens on (a server left running).

    Raises:
        UsageError: one line naming the port and, where this user may see it, the process on it.
    """
    with socket.socket() as probe:
        if probe.connect_ex((host, port)) != 0:
            return
    holder = ""
    with contextlib.suppress(psutil.Error, OSError):
        for connection in psutil.net_connections("tcp"):
            if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port and connection.pid:
                process = psutil.Process(connection.pid)
                holder = f" by process {process.pid} ({' '.join(process.cmdline()[:4])[:80]})"
                break
    raise UsageError(
        f"cannot start {what}: port {port} on {host} is taken{holder}; "
        "stop that process (a server left running?) or choose another --port"
    )


def wait_for_http(
    url: str,
    process: subprocess.Popen,
    what: str,
    timeout: float = 180.0,
    log: Path | None = None,
    error: type[Exception] = RuntimeError,
    check: Callable[[], None] | None = None,
) -> None:
    """Wait until ``url`` answers with a success status, while the server ``process`` that should
    answer it keeps running.

    Args:
        url: polled every 0.5 s (a refused connection or an HTTP error status means not yet).
        process: the server; its exit ends the wait at once.
        what: names the server in the message.
        timeout: seconds before giving up.
        log: the server's log file, named in the message.
        error: the exception type raised.
        check: called before every poll; what it raises ends the wait (e.g. a stop signal came).

    Raises:
        error: the server exited, or did not answer within ``timeout``.
    """
    see = f"; see {log}" if log is not None else ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check is not None:
            check()
        if process.poll() is not None:
            raise error(f"{what} exited while starting{see}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:  # refused, reset, timed out, or an HTTPError status
            time.sleep(0.5)
    raise error(f"{what} did not answer on {url} within {timeout:.0f} s{see}")
