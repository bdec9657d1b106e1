"""Starting, stopping and killing real ``digideep`` processes, on the plain loop or the Prefect path."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.pipeline.test_resume import resume_command, train_command

REPO = Path(__file__).resolve().parents[2]
PARAMS = "params.pendulum_sac"
DIGIDEEP = str(Path(sys.executable).with_name("digideep"))
TIMEOUT = 600.0
"""Seconds one command may take before the benchmark gives up on it (a hang is a DIFFERENT trial)."""


@dataclass(frozen=True)
class Driver:
    """The commands of one path: the plain loop (``--no-prefect``) or the CLI's Prefect flow with its
    temporary server (no ``PREFECT_API_URL``, a ``PREFECT_HOME`` of the benchmark's own)."""

    flow: bool
    prefect_home: Path

    def train(self, root: Path | str, name: str, cpanel: dict) -> list[str]:
        command = train_command(root, name, PARAMS, cpanel)
        if not self.flow:
            return command
        return [DIGIDEEP, "train", *(arg for arg in command[3:] if arg != "--no-prefect")]

    def resume(self, root: Path | str, name: str) -> list[str]:
        if not self.flow:
            return resume_command(root, name)
        return [DIGIDEEP, "resume", name, "--session-path", str(root), "--device", "cpu"]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        if not self.flow:
            return base
        env = {key: value for key, value in base.items() if key != "PREFECT_API_URL"}
        return {**env, "PREFECT_HOME": str(self.prefect_home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


@dataclass
class Ended:
    """How one command ended: its exit status, its stderr, and processes it left running."""

    code: int
    stderr: str
    orphans: int = 0

    @property
    def one_line_refusal(self) -> bool:
        """Non-zero, exactly one ``digideep: error:`` line and no traceback."""
        errors = [line for line in self.stderr.splitlines() if line.startswith("digideep: error:")]
        return self.code != 0 and len(errors) == 1 and "Traceback" not in self.stderr

    def last_line(self) -> str:
        lines = self.stderr.strip().splitlines()
        return lines[-1][:300] if lines else f"exit {self.code}, nothing on stderr"


RUNNING: set[Process] = set()
"""The commands started and not yet waited for: :func:`stop_all` kills them when the benchmark stops."""


def stop_all() -> None:
    """SIGKILL every command still running (an interrupted benchmark leaves none behind)."""
    for process in list(RUNNING):
        process.kill()


class Process:
    """A command in a process group of its own (as a shell starts a job), stderr kept in a file."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path, cwd: Path = REPO) -> None:
        self.log = log
        with open(log, "wb") as stderr:
            self.popen = subprocess.Popen(
                command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
            )
        self.started = time.monotonic()
        RUNNING.add(self)

    def running(self) -> bool:
        return self.popen.poll() is None

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.popen.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> Ended:
        """SIGKILL the command's process group; processes it started in sessions of their own (the
        Prefect path's temporary server) survive it, are counted as orphans, then stopped."""
        children = self.descendants()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        RUNNING.discard(self)
        return Ended(self.popen.returncode, self.log.read_text(errors="replace"), _reap(children))

    def signal_group(self, signum: int) -> None:
        """What a terminal's Ctrl-C (SIGINT) or a scheduler (SIGTERM) sends: the whole group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)

    def wait(self, timeout: float = TIMEOUT) -> Ended:
        """Its end; a command still running after ``timeout`` is killed and reported as hung."""
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            ended = self.kill()
            ended.stderr += f"\n[bench] no exit after {timeout:.0f} s: killed"
            return ended
        RUNNING.discard(self)
        return Ended(self.popen.returncode, self.log.read_text(errors="replace"))

    def kill_when(self, condition: Callable[[], bool], deadline: float = TIMEOUT) -> Ended | None:
        """SIGKILL as soon as ``condition()`` holds; None when the command ended first."""
        end = time.monotonic() + deadline
        while self.running() and time.monotonic() < end:
            if condition():
                return self.kill()
            time.sleep(0.002)
        self.wait(timeout=1)
        return None


ORPHAN_GRACE = 10.0
"""Seconds a process the command started may take to exit on its own after the command's SIGKILL.
The temporary Prefect server gets SIGTERM from the kernel when digideep dies (``PR_SET_PDEATHSIG``)
and takes 0.05 to 0.2 s to shut down: counted at once, it looked orphaned in 2 of 4 trials."""


def _reap(processes: list[psutil.Process]) -> int:
    """Stop those of ``processes`` still alive ``ORPHAN_GRACE`` s after their parent's kill; return
    how many were."""
    _, alive = psutil.wait_procs(processes, timeout=ORPHAN_GRACE)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=10)
    return len(alive)


def run_to_end(command: list[str], env: dict[str, str], log: Path, cwd: Path = REPO) -> Ended:
    return Process(command, env, log, cwd).wait()


def journal_records(session: Path) -> int:
    journal = session / "metrics.jsonl"
    return journal.read_bytes().count(b"\n") if journal.exists() else 0


def run_id_of(session_json: str) -> str:
    return json.loads(session_json)["mlflow_run_id"]
