"""``digideep slurm submit`` and ``digideep slurm resume``: a run as a Slurm job that survives its
time limit and preemption (:mod:`digideep.slurm.job`).

Every check runs before anything is submitted, each failing in one line with exit status 2: the
params and cpanel, the session's name and folder, the job config, the cluster (reachable, the
partition known, the session folder visible to its nodes) and the job itself (``sbatch
--test-only``: account, time limit, resources).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from digideep.cli.options import split_session
from digideep.errors import UsageError
from digideep.pipeline.session import DEFAULT_ROOT
from digideep.slurm import cluster as slurm
from digideep.slurm.config import SlurmConfig, load_config
from digideep.slurm.job import TrainingJob, digideep_executable, job_script
from digideep.storage.location import is_url

__all__ = ["add_slurm_parser", "command_slurm_resume", "command_slurm_submit"]


def add_slurm_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``slurm`` (``submit``, ``resume``) to the ``digideep`` subcommands."""
    parser = subparsers.add_parser(
        "slurm",
        help="run a training as a Slurm job that checkpoints before its time limit and is requeued "
        "(see docs/slurm.md)",
        description="A training as a Slurm job: a warning before the time limit, a checkpoint, a requeue, "
        "and the requeued job resumes the session exactly.",
    )
    sub = parser.add_subparsers(dest="slurm_command", required=True, metavar="ACTION")
    submit = sub.add_parser("submit", help="submit a new training as a job")
    submit.add_argument(
        "--params", required=True, metavar="MODULE", help="parameter file, as for digideep train"
    )
    submit.add_argument("--cpanel", metavar="JSON", help="cpanel overrides as a JSON object")
    submit.add_argument("--session-name", metavar="NAME", help="session name (default: time and params name)")
    submit.add_argument("--msg", metavar="TEXT", help="the run's description")
    _add_job_options(submit)
    submit.set_defaults(func=command_slurm_submit)
    resume = sub.add_parser("resume", help="submit a job that resumes a session from its newest checkpoint")
    resume.add_argument("session", help="session name (under --session-path) or path")
    _add_job_options(resume)
    resume.set_defaults(func=command_slurm_resume)
    return parser


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session-path",
        default=str(DEFAULT_ROOT),
        metavar="PATH",
        help=f"folder of sessions that every node sees, or an s3:// URL (default: {DEFAULT_ROOT})",
    )
    parser.add_argument(
        "--slurm-config", metavar="FILE", help="the job's resources, a YAML file (docs/slurm.md)"
    )
    parser.add_argument("--partition", help="overrides the config's partition")
    parser.add_argument("--time", help="overrides the config's time limit, e.g. 60 or 24:00:00")
    parser.add_argument(
        "--signal-seconds", type=int, metavar="N", help="overrides the config's warning before the limit"
    )
    parser.add_argument("--device", metavar="DEVICE", help="auto, cpu, cuda or cuda:N, as for digideep train")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument(
        "--dry-run", action="store_true", help="check everything and print the job script; submit nothing"
    )


def _config(args: argparse.Namespace) -> SlurmConfig:
    return load_config(args.slurm_config).replace(
        partition=args.partition, time=args.time, signal_seconds=args.signal_seconds
    )


def _root(session_path: str) -> str:
    return session_path if is_url(session_path) else str(Path(session_path).expanduser().absolute())


def command_slurm_submit(args: argparse.Namespace) -> int:
    """Check the run, the config and the cluster, then submit the run's job."""
    from digideep.pipeline.params import resolve_params
    from digideep.pipeline.session import check_session_name, check_session_root, default_session_name
    from digideep.storage.location import Location

    config = _config(args)
    resolved = resolve_params(args.params, args.cpanel, device=args.device)
    name = args.session_name or default_session_name(resolved.module)
    check_session_name(name)
    root = _root(args.session_path)
    check_session_root(root)
    location = Location(root)
    location.check()
    if (location / name).exists() if location.is_local else (location / name).is_dir():
        raise UsageError(
            f"session '{(location / name).url}' already exists; resume it with 'digideep slurm resume' "
            "or choose another --session-name"
        )
    params = str(Path(args.params).absolute()) if args.params.endswith(".py") else args.params
    return _submit(args, config, root, name, params, args.cpanel, args.msg)


def command_slurm_resume(args: argparse.Namespace) -> int:
    """Check the session, the config and the cluster, then submit a job that resumes the session."""
    from digideep.pipeline.session import check_session_exists

    config = _config(args)
    root, name = split_session(args.session, args.session_path)
    root = _root(root)
    check_session_exists(root, name)
    return _submit(args, config, root, name, None, None, None)


def _submit(
    args: argparse.Namespace,
    config: SlurmConfig,
    root: str,
    name: str,
    params: str | None,
    cpanel: str | None,
    description: str | None,
) -> int:
    cluster = slurm.probe_cluster()
    partition = slurm.check_partition(cluster, config.partition)
    slurm.check_time_limit(cluster, partition, config.time, config.signal_seconds)
    if not is_url(root):
        slurm.check_visible(Path(root), "the session path", cluster, partition)
    if config.log_dir is not None:
        log_dir = Path(config.log_dir).expanduser().absolute()
    elif is_url(root):
        log_dir = Path("slurm").absolute()
    else:
        log_dir = Path(root) / "slurm"
    slurm.check_visible(log_dir, "the log folder", cluster, partition)
    options = [f"--log-level={args.log_level}"]
    if args.device:
        options.append(f"--device={args.device}")
    job = TrainingJob(
        session_root=root,
        session_name=name,
        params=params,
        cpanel=cpanel,
        workdir=str(Path.cwd()),
        output=str(log_dir / f"{name}-%j.out"),
        digideep=digideep_executable(),
        options=tuple(options),
        description=description,
    )
    text = job_script(job, config)
    with tempfile.TemporaryDirectory(prefix="digideep-slurm-") as scratch:
        draft = Path(scratch) / f"{name}.sbatch"
        draft.write_text(text)
        slurm.test_submission(draft)
    if args.dry_run:
        print(text, end="")
        return 0
    log_dir.mkdir(parents=True, exist_ok=True)
    script = log_dir / f"{name}.sbatch"
    script.write_text(text)
    os.chmod(script, 0o755)
    job_id = slurm.submit(script)
    print(
        f"submitted job {job_id} (partition {partition}): session {root}/{name}; "
        f"output {log_dir / f'{name}-{job_id}.out'}; watch it with: squeue -j {job_id}"
    )
    return 0
