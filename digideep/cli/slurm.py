"""``digideep slurm submit``, ``resume`` and ``benchmark``: a run, or each cell of a benchmark, as a
Slurm job that survives its time limit and preemption (:mod:`digideep.slurm.job`).

Every check runs before anything is submitted, each failing in one line with exit status 2: the
params and cpanel (a benchmark's whole matrix), the sessions' names and folder, the job config, the
cluster (reachable, the partition known, the session folder visible to its nodes) and the job itself
(``sbatch --test-only``: account, time limit, resources).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digideep.cli.options import split_session
from digideep.errors import UsageError
from digideep.pipeline.session import DEFAULT_ROOT
from digideep.slurm import cluster as slurm
from digideep.slurm.config import SlurmConfig, load_config
from digideep.slurm.job import TrainingJob, digideep_executable, job_script
from digideep.storage.location import Location, is_url

if TYPE_CHECKING:
    from digideep.benchmark.matrix import Cell

__all__ = ["add_slurm_parser", "command_slurm_benchmark", "command_slurm_resume", "command_slurm_submit"]


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
    from digideep.benchmark_cli import add_matrix_options

    benchmark = sub.add_parser(
        "benchmark",
        help="submit every cell of a benchmark matrix as a job of its own (see docs/slurm.md)",
        description="A benchmark matrix (as digideep benchmark takes it), one job per cell: each cell a "
        "session of its own, requeued at the time limit as a training job, tracked for digideep report.",
    )
    add_matrix_options(benchmark)
    _add_job_options(benchmark)
    benchmark.add_argument(
        "--wait",
        action="store_true",
        help="wait until every job has ended, then end the benchmark's MLflow parent run and print the "
        "cells' table (exit 1 unless every cell finished)",
    )
    benchmark.set_defaults(func=command_slurm_benchmark)
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

    config = _config(args)
    resolved = resolve_params(args.params, args.cpanel, device=args.device)
    name = args.session_name or default_session_name(resolved.module)
    check_session_name(name)
    root = _root(args.session_path)
    check_session_root(root)
    _check_new_session(Location(root), name)
    return _submit(args, config, root, name, args.params, args.cpanel, args.msg)


def _check_new_session(location: Location, name: str, option: str = "--session-name") -> None:
    """Refuse a new session that exists already under ``location`` (checked to be reachable);
    ``option`` names the option that chooses another name."""
    location.check()
    if (location / name).exists() if location.is_local else (location / name).is_dir():
        raise UsageError(
            f"session '{(location / name).url}' already exists; resume it with 'digideep slurm resume' "
            f"or choose another {option}"
        )


def command_slurm_resume(args: argparse.Namespace) -> int:
    """Check the session, the config and the cluster, then submit a job that resumes the session."""
    from digideep.pipeline.session import check_session_exists

    config = _config(args)
    root, name = split_session(args.session, args.session_path)
    root = _root(root)
    check_session_exists(root, name)
    return _submit(args, config, root, name, None, None, None)


def command_slurm_benchmark(args: argparse.Namespace) -> int:
    """Check the matrix, the config and the cluster, open the benchmark's MLflow parent run, submit
    a job per cell; with ``--wait``, wait for the jobs and end the parent run."""
    from digideep.benchmark_cli import plan_of
    from digideep.pipeline.session import check_session_name, check_session_root, default_session_name
    from digideep.slurm import benchmark as cells_as_jobs
    from digideep.tracking.naming import data_root_of

    config = _config(args)
    cells, protocol, parameters = plan_of(args)
    name = args.name or default_session_name("benchmark")
    sessions = cells_as_jobs.session_names(name, cells)
    root = _root(args.session_path)
    check_session_root(root)
    for session in sessions.values():
        check_session_name(session)
        _check_new_session(Location(root), session, "--name")
    partition, log_dir = _check_cluster(config, root)

    def script(cell: Cell, parent_run_id: str | None) -> str:
        option = cells_as_jobs.cell_option(cell, name, parent_run_id)
        job = _job(
            args, root, sessions[cell.key], log_dir, cell.algorithm, json.dumps(cell.cpanel), None, (option,)
        )
        return job_script(job, config)

    _test_script(sessions[cells[0].key], script(cells[0], None))  # one config: one test for all cells
    if args.dry_run:
        print(script(cells[0], None), end="")
        print("\n".join(f"# cell {cell.key}: session {root}/{sessions[cell.key]}" for cell in cells))
        return 0
    axes = {key: parameters[key] for key in ("algorithms", "envs", "seeds")}
    axes["variants"] = parameters["variants"] or {}
    client, parent = cells_as_jobs.open_benchmark(
        config.env.get("MLFLOW_TRACKING_URI"), data_root_of(root), name, protocol, axes
    )
    jobs: dict[str, str] = {}
    for cell in cells:
        jobs[cell.key] = slurm.submit(_write_script(log_dir, sessions[cell.key], script(cell, parent)))
        print(f"submitted job {jobs[cell.key]}: cell {cell.key}, session {root}/{sessions[cell.key]}")
    print(
        f"benchmark {name}: {len(jobs)} jobs (partition {partition}), MLflow parent run {parent}; outputs "
        f"{log_dir}/<session>-<job>.out; watch them with: squeue -j {','.join(jobs.values())}; "
        f"when they are done: digideep report --benchmark {name}",
        flush=True,
    )
    if not args.wait:
        return 0
    ended = slurm.wait_for_jobs(list(jobs.values()))
    states = {key: ended[job] for key, job in jobs.items()}
    status, table = cells_as_jobs.close_benchmark(client, name, parent, cells, states)
    print(f"{table}\nbenchmark {name} {status}")
    return 0 if status == "FINISHED" else 1


def _submit(
    args: argparse.Namespace,
    config: SlurmConfig,
    root: str,
    name: str,
    params: str | None,
    cpanel: str | None,
    description: str | None,
) -> int:
    partition, log_dir = _check_cluster(config, root)
    text = job_script(_job(args, root, name, log_dir, params, cpanel, description), config)
    _test_script(name, text)
    if args.dry_run:
        print(text, end="")
        return 0
    job_id = slurm.submit(_write_script(log_dir, name, text))
    print(
        f"submitted job {job_id} (partition {partition}): session {root}/{name}; "
        f"output {log_dir / f'{name}-{job_id}.out'}; watch it with: squeue -j {job_id}"
    )
    return 0


def _check_cluster(config: SlurmConfig, root: str) -> tuple[str, Path]:
    """The jobs' partition and log folder, checked against the cluster (one line each when not fit)."""
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
    return partition, log_dir


def _job(
    args: argparse.Namespace,
    root: str,
    name: str,
    log_dir: Path,
    params: str | None,
    cpanel: str | None,
    description: str | None,
    train_options: tuple[str, ...] = (),
) -> TrainingJob:
    """The job of session ``name``: a new run of ``params`` (None: resume only) with the command's
    ``--log-level`` and ``--device``."""
    options = [f"--log-level={args.log_level}"]
    if args.device:
        options.append(f"--device={args.device}")
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
        options=tuple(options),
        description=description,
        train_options=train_options,
    )


def _test_script(name: str, text: str) -> None:
    """``sbatch --test-only`` of the script ``text``, written to a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="digideep-slurm-") as scratch:
        draft = Path(scratch) / f"{name}.sbatch"
        draft.write_text(text)
        slurm.test_submission(draft)


def _write_script(log_dir: Path, name: str, text: str) -> Path:
    """Write the job script of session ``name`` beside its output file; its path."""
    log_dir.mkdir(parents=True, exist_ok=True)
    script = log_dir / f"{name}.sbatch"
    script.write_text(text)
    os.chmod(script, 0o755)
    return script
