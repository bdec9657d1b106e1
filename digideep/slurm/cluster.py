"""Asking the Slurm cluster before submitting: is it reachable, does the partition exist, do its
nodes see the session's folder, would it accept the job; then ``sbatch`` itself.

Everything goes through Slurm's own commands (``sinfo``, ``sbatch``, ``squeue``), as a user on a
login node runs them; ``SLURM_CONF`` in the environment picks the cluster as it does for them. The
jobs submitted are watched the same way (:func:`job_states`, :func:`wait_for_jobs`); a job on hold
waits for a person, and :class:`HoldNotices` tells them once.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from digideep.errors import UsageError

__all__ = [
    "ENDED_STATES",
    "HELD_STATES",
    "LOCAL_FILESYSTEMS",
    "Cluster",
    "HoldNotices",
    "JobState",
    "check_partition",
    "check_time_limit",
    "check_visible",
    "filesystem_of",
    "job_states",
    "jobs_named",
    "probe_cluster",
    "seconds",
    "submit",
    "test_submission",
    "wait_for_jobs",
]

LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "vfat"}
)
"""Filesystems that only the host mounting them sees (network ones: nfs, lustre, gpfs, beegfs, cephfs...)."""

ENDED_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
     "BOOT_FAIL", "DEADLINE"}
)  # fmt: skip
"""Job states a job does not leave (a requeued job is PENDING again, not one of these)."""

HELD_STATES = frozenset({"REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD"})
"""Job states of a job that waits for a person's ``scontrol release`` (or ``scancel``)."""

_TIMEOUT = 30  # seconds: a controller that does not answer in this time counts as unreachable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cluster:
    """The partitions of the cluster ``sinfo`` reaches.

    Attributes:
        nodes: node count of each partition.
        default: the default partition's name (None when the cluster has none).
        max_seconds: each partition's longest time limit in seconds (None: unlimited).
    """

    nodes: dict[str, int]
    default: str | None
    max_seconds: dict[str, int | None]


@dataclass(frozen=True)
class JobState:
    """A job's state as ``squeue`` gives it, and why it is in it.

    Attributes:
        state: e.g. ``RUNNING``, ``PENDING``, ``COMPLETED``; ``PURGED`` for a job the controller has
            forgotten (``MinJobAge`` after it ended).
        reason: ``squeue``'s reason, e.g. ``None``, ``Priority``, ``JobHeldUser``.
    """

    state: str
    reason: str = ""

    @property
    def ended(self) -> bool:
        """Whether the job has ended (:data:`ENDED_STATES`, or purged)."""
        return self.state in ENDED_STATES or self.state == "PURGED"

    @property
    def held(self) -> bool:
        """Whether the job waits for a person to release it: a hold state (:data:`HELD_STATES`), or
        pending on a hold (``scontrol hold``, ``sbatch --hold``, ``scontrol requeuehold``)."""
        return self.state in HELD_STATES or (self.state == "PENDING" and "held" in self.reason.lower())

    @property
    def hold(self) -> str:
        """What holds the job, as Slurm says it: the state when it is one of :data:`HELD_STATES`, else
        the reason (e.g. ``JobHeldUser``)."""
        return self.state if self.state in HELD_STATES else self.reason


class HoldNotices:
    """Tells, once per hold, that a job waits for a person: a held job is neither resubmitted nor
    cancelled, and would otherwise be waited on in silence.

    Args:
        logger: gets the line, as a warning.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._told: set[str] = set()

    def look(self, what: str, job: str, state: JobState) -> None:
        """Log that ``job`` (of ``what``, e.g. ``trial 3``) is held, unless it was told since the job
        was last seen held; a job released and held again is told again."""
        if not state.held:
            self._told.discard(job)
            return
        if job in self._told:
            return
        self._told.add(job)
        self.logger.warning(
            "%s: job %s is held (%s): release it with 'scontrol release %s' or cancel it with 'scancel %s'",
            what,
            job,
            state.hold,
            job,
            job,
        )


def _command(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise UsageError(
            f"Slurm's {name} is not on PATH: run digideep slurm on a login node of the cluster "
            "(or install the Slurm clients, e.g. apt-get install slurm-client)"
        )
    return found


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def probe_cluster() -> Cluster:
    """Ask the controller for its partitions (one ``sinfo``).

    Raises:
        UsageError: ``sinfo`` is missing, or no controller answered within 30 s.
    """
    sinfo = _command("sinfo")
    try:
        result = subprocess.run(
            [sinfo, "-h", "-o", "%P %D %l"], capture_output=True, text=True, timeout=_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"no Slurm controller answered sinfo within {_TIMEOUT} s; check SLURM_CONF"
        ) from None
    if result.returncode != 0:
        raise UsageError(
            f"no Slurm controller answers ({_last_line(result.stderr)}); run this on a login node of the "
            "cluster, or point SLURM_CONF at its slurm.conf"
        )
    nodes: dict[str, int] = {}
    max_seconds: dict[str, int | None] = {}
    default = None
    for line in result.stdout.splitlines():
        name, count, limit = [*line.split(), "", ""][:3]
        if name.endswith("*"):
            name = default = name[:-1]
        nodes[name] = nodes.get(name, 0) + int(count or 0)
        max_seconds[name] = seconds(limit)
    return Cluster(nodes, default, max_seconds)


def seconds(limit: str) -> int | None:
    """A Slurm time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) in seconds; None when
    unlimited or unreadable."""
    days, _, rest = limit.rpartition("-") if "-" in limit else ("", "", limit)
    try:
        parts = [int(p) for p in rest.split(":")]
        whole_days = int(days) if days else 0
    except ValueError:
        return None
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        parts += [0] * (3 - len(parts))
        hours, minutes, secs = parts
    elif len(parts) == 1:
        hours, minutes, secs = 0, parts[0], 0
    elif len(parts) == 2:
        hours, minutes, secs = 0, *parts
    else:
        hours, minutes, secs = parts[-3:]
    return ((whole_days * 24 + hours) * 60 + minutes) * 60 + secs


def check_partition(cluster: Cluster, partition: str | None) -> str:
    """The partition a job lands in (``partition``, or the default).

    Raises:
        UsageError: the partition is unknown (naming those there are), or none was given and the
            cluster has no default.
    """
    known = ", ".join(sorted(cluster.nodes)) or "none"
    if partition is None:
        if cluster.default is None:
            raise UsageError(f"the cluster has no default partition; set 'partition' (one of: {known})")
        return cluster.default
    if partition not in cluster.nodes:
        raise UsageError(f"unknown Slurm partition '{partition}'; this cluster has: {known}")
    return partition


def check_time_limit(cluster: Cluster, partition: str, time: str | None, signal_seconds: int) -> None:
    """Refuse a time limit above the partition's (the job would wait forever, on most clusters) or
    one no longer than the warning before it.

    Raises:
        UsageError: naming both limits.
    """
    asked = seconds(time) if time is not None else None
    most = cluster.max_seconds.get(partition)
    if asked is not None and most is not None and asked > most:
        raise UsageError(
            f"time limit {time} is above the limit of partition '{partition}' ({most // 60} min); "
            "ask for less or choose another partition"
        )
    if asked is not None and asked <= signal_seconds:
        raise UsageError(
            f"time limit {time} leaves no training before the warning {signal_seconds} s ahead of it; "
            "lower signal_seconds or raise the time limit"
        )


def filesystem_of(path: Path) -> str:
    """The filesystem type (``/proc/mounts``) of ``path``, or of its nearest folder that exists."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def check_visible(path: Path, what: str, cluster: Cluster, partition: str) -> None:
    """Refuse a folder on this host's own disk when the partition's jobs may run on other nodes.

    Raises:
        UsageError: ``path`` is on a local filesystem (:data:`LOCAL_FILESYSTEMS`) and the partition
            has more than one node.
    """
    nodes = cluster.nodes.get(partition, 0)
    kind = filesystem_of(path)
    if nodes > 1 and kind in LOCAL_FILESYSTEMS:
        raise UsageError(
            f"{what} '{path}' is on a local {kind} filesystem of this host, which the {nodes} nodes of "
            f"partition '{partition}' cannot see; use a folder on shared storage (NFS, Lustre, GPFS...) "
            "or an s3:// URL"
        )


def test_submission(script: Path) -> None:
    """Have the controller check the job without submitting it (``sbatch --test-only``).

    Raises:
        UsageError: Slurm would refuse the job (an unknown account, a time above the partition's
            limit, resources no node has), with Slurm's reason.
    """
    result = subprocess.run(
        [_command("sbatch"), "--test-only", str(script)], capture_output=True, text=True, timeout=_TIMEOUT
    )
    if result.returncode != 0:
        reason = _last_line(result.stderr).removeprefix("sbatch: error: ")
        raise UsageError(f"Slurm refuses the job: {reason}; check the Slurm config ({script})")


def submit(script: Path, *extra: str) -> str:
    """Submit the job script (``sbatch --parsable``) and return the job's id.

    Raises:
        UsageError: ``sbatch`` failed, with Slurm's reason.
    """
    result = subprocess.run(
        [_command("sbatch"), "--parsable", *extra, str(script)],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
    )
    if result.returncode != 0:
        raise UsageError(
            f"sbatch refused {script}: {_last_line(result.stderr).removeprefix('sbatch: error: ')}"
        )
    return result.stdout.strip().split(";")[0]


def job_states(job_ids: Sequence[str]) -> dict[str, JobState]:
    """The state of each job the controller still knows (``squeue -t all``), with its reason.

    A job missing from the answer has ended and been purged (``MinJobAge``). Empty when the
    controller did not answer.
    """
    try:
        result = subprocess.run(
            [_command("squeue"), "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i %T %r"],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return {}
    if result.returncode != 0:
        purged = "invalid job id" in result.stderr.lower()  # every job of the list is gone
        return {job: JobState("PURGED") for job in job_ids} if purged else {}
    states = {}
    for line in result.stdout.splitlines():
        fields = line.split(maxsplit=2)  # a reason may hold spaces: "job requeued in held state"
        if len(fields) >= 2:
            states[fields[0]] = JobState(fields[1], fields[2] if len(fields) == 3 else "")
    return {job: states.get(job, JobState("PURGED")) for job in job_ids}


def jobs_named(name: str) -> list[str]:
    """The ids of this user's jobs named ``name`` that the controller still knows, oldest first.

    Raises:
        UsageError: ``squeue`` is missing or the controller did not answer.
    """
    try:
        result = subprocess.run(
            [_command("squeue"), "-h", "--me", "-t", "all", "-n", name, "-o", "%i"],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"no Slurm controller answered squeue within {_TIMEOUT} s; check SLURM_CONF"
        ) from None
    if result.returncode != 0:
        raise UsageError(f"squeue cannot list the jobs named {name}: {_last_line(result.stderr)}")
    return sorted(result.stdout.split(), key=lambda job: (len(job), job))  # numeric order of plain ids


def wait_for_jobs(jobs: Mapping[str, str], poll_seconds: float = 5.0) -> dict[str, str]:
    """Wait until every job has ended (:data:`ENDED_STATES`, or purged); each one's final state.

    ``jobs``: job ids by what each job runs (e.g. ``cell seed-0``), as the lines about a job name
    it; the final states come by the same keys. A requeued job is pending again, not ended: it
    is waited for through all its runs. A held job is waited for too, and said once to be held
    (:class:`HoldNotices`). A look at the queue that gets no answer is made again at the next poll.
    """
    holds = HoldNotices(log)
    while True:
        states = job_states(list(jobs.values()))
        for what, job in jobs.items():
            if job in states:
                holds.look(what, job, states[job])
        if states and all(state.ended for state in states.values()):
            return {what: states[job].state for what, job in jobs.items()}
        time.sleep(poll_seconds)
