"""A one-node Slurm cluster on 127.0.0.1, from Debian's packages (``slurm-wlm``, ``munge``).

``python -m digideep_stack.slurm up --folder data/slurm`` starts munged, slurmctld and slurmd with a
configuration written into that folder (nothing under ``/etc`` is read or changed), prints the
``export SLURM_CONF=...`` line that points ``sbatch``, ``squeue`` and ``digideep slurm`` at it, and
runs until Ctrl-C, SIGTERM or SIGHUP, which cancel its jobs and stop the daemons. The tests start the
same cluster through :class:`LocalSlurm`.

The cluster has one node with :attr:`LocalSlurm.cpus` CPUs (more than the machine has, so that a few
small jobs run side by side) and four partitions: ``debug`` (the default, no time limit), ``short``
(at most 1 minute a job), ``preemptible`` and ``urgent`` (no time limit). A job of ``urgent`` that
needs the CPUs of jobs of ``preemptible`` preempts them, and Slurm requeues them
(``PreemptMode=REQUEUE``); jobs of ``debug`` and ``short`` are never preempted. Its job credentials
live 5 s (``cred_expire``), so that a requeued job starts again seconds later; a real cluster's
default is 120 s. The controller forgets an ended job after 600 s (``MinJobAge``, ``min_job_age``); it
keeps no accounting (``sacct`` answers that accounting storage is disabled). Only root can run it:
slurmd starts each job as its user.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from digideep.utility.processes import free_port, signals_ignored, stop_on_signals, stop_tree

__all__ = ["DAEMONS", "LocalSlurm", "SlurmUnavailableError", "main", "missing"]

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
NODE = "dd-node"


class SlurmUnavailableError(RuntimeError):
    """Slurm or munge is not installed here, or the cluster did not come up; the message says which."""


def missing() -> str | None:
    """Why a :class:`LocalSlurm` cannot run here (one line), or None when it can."""
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root (slurmd starts each job as its user)"
    absent = [name for name in (*DAEMONS, *CLIENTS) if _which(name) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge"
    return None


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name) if p.exists()), None
    )


SLURM_CONF = """\
# A one-node cluster on 127.0.0.1 written by digideep_stack.slurm; every path is under {folder}.
ClusterName=digideep
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket,cred_expire={cred_expire}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
MailProg=/bin/true
# no cgroups in a container: processes are tracked through their parents
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
# a job that became eligible (a requeued one, after cred_expire) starts within a second
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait={kill_wait}
# how long the controller keeps an ended job's record (squeue, scontrol show job) before purging it
MinJobAge={min_job_age}
# preemption by partition: a job of urgent (the higher PriorityTier) that needs the CPUs of jobs of
# preemptible preempts them, and Slurm requeues them (SIGTERM to all their processes, KillWait,
# SIGKILL); jobs of debug and short are never preempted. No GraceTime: when a grace time starts, Slurm
# signals a job's steps but not its batch script, in which digideep runs; it would only put off the
# SIGTERM.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={hostname} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=UNLIMITED PreemptMode=OFF State=UP
PartitionName=short Nodes={node} MaxTime=1 PreemptMode=OFF State=UP
PartitionName=preemptible Nodes={node} MaxTime=UNLIMITED PriorityTier=1 PreemptMode=REQUEUE State=UP
PartitionName=urgent Nodes={node} MaxTime=UNLIMITED PriorityTier=10 PreemptMode=OFF State=UP
"""


class LocalSlurm:
    """munged, slurmctld and slurmd of a one-node cluster whose files are all under ``folder``.

    Use it as a context manager (or :meth:`start` and :meth:`stop`); :attr:`env` is the environment
    in which ``sbatch`` and the other clients reach it (``SLURM_CONF``).

    Args:
        folder: where the configuration, munge key, state, spool and daemon logs go (made if absent).
        cpus: CPUs the node offers to jobs.
        memory_mb: memory the node offers to jobs, in MiB.
        cred_expire: lifetime of job credentials in seconds; also how long a requeued job waits.
        kill_wait: seconds between SIGTERM and SIGKILL when a job reaches its time limit, is
            cancelled or is preempted.
        min_job_age: seconds the controller keeps an ended job's record (``MinJobAge``) before it
            forgets the job, as ``squeue`` and ``scontrol show job`` see it.
    """

    def __init__(
        self,
        folder: Path,
        cpus: int = 4,
        memory_mb: int = 8000,
        cred_expire: int = 5,
        kill_wait: int = 30,
        min_job_age: int = 600,
    ) -> None:
        self.folder = Path(folder).resolve()
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.cred_expire = cred_expire
        self.kill_wait = kill_wait
        self.min_job_age = min_job_age
        self.conf = self.folder / "slurm.conf"
        self._processes: dict[str, subprocess.Popen] = {}

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF`` pointing at the cluster's configuration."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        """Write ``slurm.conf`` and a fresh munge key into the folder (free ports chosen now)."""
        reason = missing()
        if reason is not None:
            raise SlurmUnavailableError(reason)
        for sub in ("state", "spool"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses a socket folder others may write, and a key others may read
        os.chmod(self.folder, 0o755)
        key = self.folder / "munge.key"
        with contextlib.suppress(FileNotFoundError):
            key.unlink()
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        self.conf.write_text(
            SLURM_CONF.format(
                folder=self.folder,
                ctld_port=free_port(),
                slurmd_port=free_port(),
                cred_expire=self.cred_expire,
                kill_wait=self.kill_wait,
                min_job_age=self.min_job_age,
                node=NODE,
                hostname=socket.gethostname(),
                cpus=self.cpus,
                memory_mb=self.memory_mb,
            )
        )

    def start(self, timeout: float = 60.0) -> None:
        """Start the three daemons and wait until the node takes jobs.

        Raises:
            SlurmUnavailableError: Slurm is not installed, or the node was not idle within ``timeout``
                seconds (the message ends with the daemons' last log lines).
        """
        self.write_config()
        folder = self.folder
        commands = {
            "munged": [_which("munged"), "--foreground", "--force", f"--socket={folder}/munge.socket",
                       f"--key-file={folder}/munge.key", f"--log-file={folder}/munged.log",
                       f"--pid-file={folder}/munged.pid", f"--seed-file={folder}/munged.seed"],
            "slurmctld": [_which("slurmctld"), "-D", "-c", "-f", str(self.conf)],
            "slurmd": [_which("slurmd"), "-D", "-N", NODE, "-f", str(self.conf)],
        }  # fmt: skip
        try:
            for name, command in commands.items():
                with open(folder / f"{name}.out", "ab") as output:
                    self._processes[name] = subprocess.Popen(
                        command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
                    )
                if name == "munged":
                    self._wait_for(lambda: (folder / "munge.socket").exists(), 10, "munged made no socket")
            self._wait_for(self._node_idle, timeout, "the Slurm node did not become idle")
        except BaseException:
            self.stop()
            raise

    def _node_idle(self) -> bool:
        for name, process in self._processes.items():
            if process.poll() is not None:
                raise SlurmUnavailableError(f"{name} exited with {process.returncode}{self._log_tail()}")
        result = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%t"], env=self.env, capture_output=True, text=True, timeout=10
        )
        states = set(result.stdout.split())  # one line a partition
        return result.returncode == 0 and states == {"idle"}

    def _wait_for(self, ready: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise SlurmUnavailableError(f"{what} within {timeout:.0f} s{self._log_tail()}")
            time.sleep(0.2)

    def _log_tail(self) -> str:
        lines = []
        for name in DAEMONS:
            path = self.folder / f"{name}.out"
            if path.exists():
                lines += [f"{name}: {line}" for line in path.read_text(errors="replace").splitlines()[-3:]]
        return ("; " + " | ".join(lines)) if lines else ""

    def stop(self) -> None:
        """Cancel every job, wait for them to end (up to 20 s), and stop the daemons.

        Stop signals are ignored until every daemon has stopped (:func:`signals_ignored`): a second
        Ctrl-C cannot leave munged or slurmd running, and the daemons stop even when cancelling the
        jobs failed.
        """
        with signals_ignored():
            try:
                if "slurmctld" in self._processes and self._processes["slurmctld"].poll() is None:
                    subprocess.run(
                        ["scancel", "--user", str(os.getuid())], env=self.env, capture_output=True, timeout=20
                    )
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline and self.jobs():
                        time.sleep(0.5)
            finally:
                for name in reversed(DAEMONS):
                    process = self._processes.pop(name, None)
                    if process is not None:
                        stop_tree(process, grace=10, first=15)

    def jobs(self) -> list[str]:
        """The ids of the jobs the controller still knows as pending, running or completing."""
        result = subprocess.run(
            ["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True, text=True, timeout=20
        )
        return result.stdout.split() if result.returncode == 0 else []

    def __enter__(self) -> LocalSlurm:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m digideep_stack.slurm up [--folder F] [--cpus N]``: run the cluster until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m digideep_stack.slurm", description=__doc__.splitlines()[0]
    )
    parser.add_argument("action", choices=["up"])
    parser.add_argument(
        "--folder", default="data/slurm", help="configuration, state and logs (default: data/slurm)"
    )
    parser.add_argument("--cpus", type=int, default=4, help="CPUs the node offers to jobs (default: 4)")
    args = parser.parse_args(argv)
    cluster = LocalSlurm(Path(args.folder), cpus=args.cpus)
    try:
        with stop_on_signals():
            cluster.start()
            print(f"Slurm is up on 127.0.0.1: export SLURM_CONF={cluster.conf}; Ctrl-C stops it", flush=True)
            while all(p.poll() is None for p in cluster._processes.values()):
                time.sleep(1)
            print("a Slurm daemon exited; stopping the cluster", file=sys.stderr)
            return 1
    except SlurmUnavailableError as error:
        print(f"digideep_stack.slurm: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
