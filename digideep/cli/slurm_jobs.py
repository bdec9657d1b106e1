"""The job options and helpers that every ``digideep slurm`` action shares: the job config, the
cluster checks, the job of a session, and its script checked (``sbatch --test-only``) and written."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from digideep.slurm import cluster as slurm
from digideep.slurm.config import SlurmConfig, load_config
from digideep.slurm.job import TrainingJob, digideep_executable
from digideep.storage.location import DEFAULT_ROOT, is_url

__all__ = [
    "absolute_root",
    "add_job_options",
    "check_cluster",
    "check_script",
    "job_config",
    "training_job",
    "write_script",
]


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The options of every job: the sessions' folder, the job config and its overrides, ``--device``,
    ``--log-level`` and ``--dry-run``."""
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


def job_config(args: argparse.Namespace) -> SlurmConfig:
    """The ``--slurm-config`` file with the command line's overrides."""
    return load_config(args.slurm_config).replace(
        partition=args.partition, time=args.time, signal_seconds=args.signal_seconds
    )


def absolute_root(session_path: str) -> str:
    """``--session-path`` made absolute (a URL stays as it is): the jobs start in another folder."""
    return session_path if is_url(session_path) else str(Path(session_path).expanduser().absolute())


def check_cluster(config: SlurmConfig, root: str, shared: dict[str, Path] | None = None) -> tuple[str, Path]:
    """The jobs' partition and log folder, checked against the cluster (one line each when not fit).

    ``shared``: further folders that the partition's nodes must see, by what they are.
    """
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
    for what, folder in (shared or {}).items():
        slurm.check_visible(folder, what, cluster, partition)
    return partition, log_dir


def training_job(
    args: argparse.Namespace,
    root: str,
    name: str,
    log_dir: Path,
    params: str | None,
    cpanel: str | None,
    description: str | None,
    train_options: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
) -> TrainingJob:
    """The job of session ``name``: a new run of ``params`` (None: resume only) with the command's
    ``--log-level`` and ``--device``; ``train_options`` go to ``train`` only, ``options`` to ``train``
    and ``resume``."""
    common = [f"--log-level={args.log_level}"]
    if args.device:
        common.append(f"--device={args.device}")
    common += options
    if params is not None and params.endswith(".py"):
        params = str(Path(params).absolute())
    return TrainingJob(
        session_root=root,
        session_name=name,
        params=params,
        cpanel=cpanel,
        workdir=str(Path.cwd()),
        output=str(log_dir / f"{name}-%j.out"),
        digideep=digideep_executable(),
        options=tuple(common),
        description=description,
        train_options=train_options,
    )


def check_script(name: str, text: str) -> None:
    """``sbatch --test-only`` of the script ``text``, written to a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="digideep-slurm-") as scratch:
        draft = Path(scratch) / f"{name}.sbatch"
        draft.write_text(text)
        slurm.test_submission(draft)


def write_script(log_dir: Path, name: str, text: str) -> Path:
    """Write the job script of session ``name`` beside its output file; its path."""
    log_dir.mkdir(parents=True, exist_ok=True)
    script = log_dir / f"{name}.sbatch"
    script.write_text(text)
    os.chmod(script, 0o755)
    return script
