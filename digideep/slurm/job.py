"""The batch script of a run's Slurm job: train the session, or resume it when it exists.

The script is plain bash with ``#SBATCH`` lines, written beside the job's output file so that a
user can read it, and resubmit it (``sbatch <script>``) whatever became of the job. What it does:

1. asks Slurm for SIGUSR1 to its shell ``signal_seconds`` before the time limit
   (``--signal=B:USR1@N``: the warning) and to be requeued on node failure or preemption
   (``--requeue``);
2. runs ``digideep resume`` when the session holds ``params.json`` (a requeued job, or a job
   submitted again), else ``digideep train`` of a new session, in the background;
3. passes the warning on to digideep as SIGTERM, as it passes on the SIGTERM of a cancel, a
   preemption or the time limit itself: digideep finishes its iteration, writes a checkpoint and
   exits 143;
4. when the warning stopped digideep, requeues itself (``scontrol requeue``): the job runs again,
   resuming the session from that checkpoint. A job cancelled with ``scancel`` (SIGTERM without the
   warning) stops with its checkpoint and stays stopped. A preempted job (SIGTERM without the warning
   too) stops the same way; Slurm itself requeues it where the partition's ``PreemptMode`` is
   ``REQUEUE``, and it resumes.

A job killed without warning (a node that died, the OOM killer) resumes the same way once requeued
(Slurm requeues a job of a failed node itself; ``scontrol requeue JOB`` requeues any) or submitted
again (``digideep slurm resume``).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from digideep.slurm.config import SlurmConfig

__all__ = ["TrainingJob", "digideep_executable", "job_script"]


@dataclass(frozen=True)
class TrainingJob:
    """One run as one Slurm job.

    Attributes:
        session_root: the folder (absolute) or URL that holds the session.
        session_name: the session's name under it.
        params: the parameter file of a new run (module name or absolute path); None: resume only.
        cpanel: the ``--cpanel`` JSON of a new run.
        workdir: the job's working folder (where the user's ``params/`` and agents import from).
        output: the job's output file; ``%j`` becomes the job id (one file across its requeues).
        digideep: the ``digideep`` command the job runs.
        options: further options of ``train`` and ``resume`` (``--device``, ``--log-level``...).
        description: a new run's ``--msg``.
        train_options: further options of ``train`` only (a benchmark cell's ``--benchmark``).
    """

    session_root: str
    session_name: str
    params: str | None
    cpanel: str | None
    workdir: str
    output: str
    digideep: str
    options: tuple[str, ...] = ()
    description: str | None = None
    train_options: tuple[str, ...] = ()


def digideep_executable() -> str:
    """The ``digideep`` command of this Python's environment (which the job must see too)."""
    beside = Path(sys.executable).with_name("digideep")
    if beside.exists():
        return str(beside.absolute())
    return shutil.which("digideep") or "digideep"


def job_script(job: TrainingJob, config: SlurmConfig) -> str:
    """The batch script that trains ``job`` under ``config``, resuming it after every requeue."""
    q = shlex.quote
    directives = [
        f"--job-name={job.session_name}",
        *config.sbatch_options(),
        f"--chdir={job.workdir}",
        f"--output={job.output}",
        "--open-mode=append",  # every run of a requeued job appends to one file
        f"--signal=B:USR1@{config.signal_seconds}",
        "--requeue" if config.requeue else "--no-requeue",
    ]
    common = [f"--session-path={job.session_root}", *job.options]
    if not config.prefect:
        common.append("--no-prefect")
    resume = [job.digideep, "resume", job.session_name, *common]
    lines = [
        "#!/bin/bash",
        f"# The Slurm job of digideep session {job.session_root}/{job.session_name}, written by digideep slurm.",
        *(f"#SBATCH {option}" for option in directives),
        "",
        "set -u",
    ]
    if config.setup:
        lines += ["", config.setup.rstrip()]
    lines += [f"export {name}={q(str(value))}" for name, value in config.env.items()]
    session = f"{job.session_root}/{job.session_name}"
    if job.params is None:
        exists = "true"  # a job that resumes a session that exists
    elif "://" in job.session_root:
        exists = 'test "${SLURM_RESTART_COUNT:-0}" -gt 0'  # a bucket is not a file to test: restarts resume
    else:
        exists = f"test -f {q(session + '/params.json')}"
    lines += [
        "",
        "# the warning before the time limit (USR1), or a cancel, preemption or the limit itself (TERM):",
        "# passed on to digideep, which finishes its iteration, writes a checkpoint and exits 143",
        "child=",
        "warned=0",
        "trap 'warned=1; kill -TERM $child 2>/dev/null' USR1",
        "trap 'kill -TERM $child 2>/dev/null' TERM",
        'echo "digideep-slurm: job $SLURM_JOB_ID run ${SLURM_RESTART_COUNT:-0} starts on $(hostname) '
        'at $(date +%s.%N)"',
        f"if {exists}; then",
        f"    {shlex.join(resume)} &",
    ]
    if job.params is not None:
        train = [
            job.digideep,
            "train",
            f"--params={job.params}",
            f"--session-name={job.session_name}",
            *common,
        ]
        if job.cpanel:
            train.append(f"--cpanel={job.cpanel}")
        if job.description:
            train.append(f"--msg={job.description}")
        train += job.train_options
        lines += ["else", f"    {shlex.join(train)} &"]
    lines += [
        "fi",
        "child=$!",
        'if [ "$warned" = 1 ]; then kill -TERM "$child"; fi  # the warning came as digideep started',
        'wait "$child"',
        "status=$?",
        'while kill -0 "$child" 2>/dev/null; do  # wait ended early for the trap: wait for digideep itself',
        '    wait "$child"',
        "    status=$?",
        "done",
        'echo "digideep-slurm: digideep exited with $status at $(date +%s.%N)"',
    ]
    if config.requeue:
        # a signal can also come after training finished, as digideep exits: nothing to resume then
        finished = "true" if "://" in job.session_root else f"test ! -f {q(session + '/done.json')}"
        lines += [
            "# stopped by the warning after its checkpoint (143), unless the run finished as the warning came",
            'if [ "$warned" = 1 ] && [ "$status" -eq 143 ] \\',
            f"    && {finished}; then",
            '    echo "digideep-slurm: requeueing job $SLURM_JOB_ID to resume the session"',
            '    scontrol requeue "$SLURM_JOB_ID"',
            "fi",
        ]
    lines.append('exit "$status"')
    return "\n".join(lines) + "\n"
