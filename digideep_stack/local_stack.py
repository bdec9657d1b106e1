"""A Prefect server and a process worker on one machine, bound to 127.0.0.1.

``python -m digideep_stack.local_stack up`` (``make prefect-up``) starts the server, creates the process work
pool, deploys everything in ``prefect.yaml``, starts the crash watcher (:mod:`digideep_stack.watcher`:
a flow run whose process died with the machine is marked Crashed, so that Retry resumes it), makes the
Prefect profile ``digideep-local`` (this server) the active one, so that ``prefect`` in any other shell reaches it (:mod:`digideep_stack.profile`),
and runs a worker until Ctrl-C, SIGTERM or SIGHUP, which make the profile active before active again
and stop the server, the worker and everything they started (:mod:`digideep.utility.processes`). A
port taken by a server left running is refused in one line. The tests start the same stack through
:class:`LocalStack` (which leaves profiles alone: only :func:`main` switches them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from digideep.errors import UsageError
from digideep.utility.processes import check_port_free, stop_on_signals, stop_tree, wait_for_http
from digideep_stack import profile

ROOT = Path(__file__).resolve().parents[1]
POOL = "digideep-local"


def executable(name: str) -> str:
    """The ``name`` command of this Python's environment, else the one on PATH."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else shutil.which(name) or name


def run_prefect(
    args: tuple[str, ...],
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    error: type[Exception] = RuntimeError,
) -> subprocess.CompletedProcess:
    """Run a ``prefect`` CLI command; raise ``error`` with its output when it fails."""
    result = subprocess.run(
        [executable("prefect"), "--no-prompt", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise error(f"prefect {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


class LocalStack:
    """Server and worker processes of one Prefect installation.

    Args:
        port: the server's port on 127.0.0.1.
        home: ``PREFECT_HOME`` (database, logs); ``~/.prefect`` when None.
        project: the folder holding ``prefect.yaml``, ``flows/`` and ``params/``.
        log_folder: where the server's and worker's output go (``home`` when None).
        extra_env: more environment variables for the server, the worker and its flow runs.
        crash_after: seconds without a heartbeat before the watcher marks a RUNNING flow run Crashed
            (the flow runs beat every 30 s); None: no watcher, no heartbeats.
        crash_retries: crashed runs the watcher puts back in the queue, per run.
    """

    def __init__(
        self,
        port: int = 4200,
        home: Path | None = None,
        project: Path = ROOT,
        log_folder: Path | None = None,
        extra_env: dict[str, str] | None = None,
        crash_after: float | None = None,
        crash_retries: int = 0,
    ):
        self.port = port
        self.crash_after, self.crash_retries = crash_after, crash_retries
        self.project = project
        self.api_url = f"http://127.0.0.1:{port}/api"
        self.env = {
            **os.environ,
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(port),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_EXTRA_LOGGERS": "digideep",
            "PWD": str(project),
            **({"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"} if crash_after is not None else {}),
            **(extra_env or {}),
        }
        if home is not None:
            self.env["PREFECT_HOME"] = str(home)
        self.log_folder = log_folder or home or Path.home() / ".prefect"
        self.log_folder.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen] = []

    def _spawn(self, name: str, *args: str, program: tuple[str, ...] = ()) -> subprocess.Popen:
        output = open(self.log_folder / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(
            [*(program or (executable("prefect"),)), *args],
            cwd=self.project,
            env=self.env,
            stdout=output,
            stderr=output,
            start_new_session=True,  # its own process group: stop() ends the whole tree
        )
        self.processes.append(process)
        return process

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run a ``prefect`` CLI command against this server; raise with its output on failure."""
        return run_prefect(args, self.project, self.env, timeout)

    def start_server(self, timeout: float = 120) -> None:
        check_port_free(self.port, "the Prefect server")
        server = self._spawn("server", "server", "start", "--host", "127.0.0.1", "--port", str(self.port))
        log = self.log_folder / "server.log"
        wait_for_http(f"{self.api_url}/health", server, "the Prefect server", timeout, log=log)

    def create_pool(self) -> None:
        result = subprocess.run(
            [executable("prefect"), "--no-prompt", "work-pool", "inspect", POOL],
            cwd=self.project,
            env=self.env,
            capture_output=True,
        )
        if result.returncode != 0:
            self.run("work-pool", "create", POOL, "--type", "process")

    def deploy_all(self) -> None:
        self.run("deploy", "--all")

    def start_worker(self) -> subprocess.Popen:
        return self._spawn("worker", "worker", "start", "--pool", POOL, "--type", "process")

    def start_watcher(self) -> subprocess.Popen:
        """The crash watcher (:mod:`digideep_stack.watcher`) with this stack's bound and retries."""
        arguments = ("--crash-after", str(self.crash_after), "--retries", str(self.crash_retries))
        return self._spawn("watcher", *arguments, program=(sys.executable, "-m", "digideep_stack.watcher"))

    def up(self) -> None:
        self.start_server()
        self.create_pool()
        self.deploy_all()
        self.start_worker()
        if self.crash_after is not None:
            self.start_watcher()

    def prefect_profile(
        self, announce: Callable[[str], None]
    ) -> AbstractContextManager[profile.ProfileSwitch]:
        """:data:`~digideep_stack.profile.LOCAL`, pointing at this server, as the active profile in the block.

        The profile is written to this stack's ``PREFECT_HOME`` (the user's, for ``make prefect-up``).
        """
        return profile.active(
            profile.LOCAL, {"PREFECT_API_URL": self.api_url}, self.env, announce, "this server"
        )

    def stop(self) -> None:
        """Stop the worker, then the server, each with every process it started."""
        for process in reversed(self.processes):
            stop_tree(process)
        self.processes.clear()


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Start a Prefect server and worker for digideep on 127.0.0.1."
    )
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument(
        "--crash-after",
        type=float,
        default=120.0,
        help="seconds without a heartbeat before a RUNNING flow run is marked Crashed (0: no watcher)",
    )
    parser.add_argument(
        "--crash-retries",
        type=int,
        default=0,
        help="crashed runs the watcher puts back in the queue, per run",
    )
    arguments = parser.parse_args()
    home = os.environ.get("PREFECT_HOME")
    stack = LocalStack(
        port=arguments.port,
        home=Path(home) if home else None,
        crash_after=arguments.crash_after or None,
        crash_retries=arguments.crash_retries,
    )
    announce = lambda line: print(line, flush=True)  # noqa: E731
    with stop_on_signals():
        try:
            stack.up()
            announce(
                f"Prefect UI: http://127.0.0.1:{arguments.port}  (API {stack.api_url}); worker on pool '{POOL}'. "
                "Ctrl-C stops them."
            )
            with stack.prefect_profile(announce):
                while all(p.poll() is None for p in stack.processes):
                    time.sleep(1)
        except UsageError as error:
            print(f"local_stack: error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            pass
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
