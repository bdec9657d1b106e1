"""``digideep slurm submit``, ``resume`` and ``benchmark``: a run, or each cell of a benchmark, as a
Slurm job that survives its time limit and preemption (:mod:`digideep.slurm.job`); ``digideep slurm
tune`` (:mod:`digideep.cli.slurm_tune`): each trial of an Optuna study as such a job.

Every check runs before anything is submitted, each failing in one line with exit status 2: the
params and cpanel (a benchmark's whole matrix), the sessions' names and folder, the job config, the
cluster (reachable, the partition known, the session folder visible to its nodes) and the job itself
(``sbatch --test-only``: account, time limit, resources).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from digideep.cli.options import split_session
from digideep.cli.slurm_jobs import (
    absolute_root,
    add_job_options,
    check_cluster,
    check_script,
    job_config,
    training_job,
    write_script,
)
from digideep.errors import UsageError
from digideep.slurm import cluster as slurm
from digideep.slurm.config import SlurmConfig
from digideep.slurm.job import job_script
from digideep.storage.location import Location

if TYPE_CHECKING:
    from digideep.benchmark.matrix import Cell

__all__ = ["add_slurm_parser", "command_slurm_benchmark", "command_slurm_resume", "command_slurm_submit"]


def add_slurm_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``slurm`` (``submit``, ``resume``, ``benchmark``, ``tune``) to the ``digideep`` subcommands."""
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
    add_job_options(submit)
    submit.set_defaults(func=command_slurm_submit)
    resume = sub.add_parser("resume", help="submit a job that resumes a session from its newest checkpoint")
    resume.add_argument("session", help="session name (under --session-path) or path")
    add_job_options(resume)
    resume.set_defaults(func=command_slurm_resume)
    from digideep.benchmark_cli import add_matrix_options

    benchmark = sub.add_parser(
        "benchmark",
        help="submit every cell of a benchmark matrix as a job of its own (see docs/slurm.md)",
        description="A benchmark matrix (as digideep benchmark takes it), one job per cell: each cell a "
        "session of its own, requeued at the time limit as a training job, tracked for digideep report.",
    )
    add_matrix_options(benchmark)
    add_job_options(benchmark)
    benchmark.add_argument(
        "--wait",
        action="store_true",
        help="wait until every job has ended, then end the benchmark's MLflow parent run and print the "
        "cells' table (exit 1 unless every cell finished)",
    )
    benchmark.set_defaults(func=command_slurm_benchmark)
    from digideep.cli.slurm_tune import add_tune_parser

    add_tune_parser(sub)
    return parser


def command_slurm_submit(args: argparse.Namespace) -> int:
    """Check the run, the config and the cluster, then submit the run's job."""
    from digideep.pipeline.params import resolve_params
    from digideep.storage.session import check_session_name, check_session_root, default_session_name

    config = job_config(args)
    resolved = resolve_params(args.params, args.cpanel, device=args.device)
    name = args.session_name or default_session_name(resolved.module)
    check_session_name(name)
    root = absolute_root(args.session_path)
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
    from digideep.storage.session import check_session_exists

    config = job_config(args)
    root, name = split_session(args.session, args.session_path)
    root = absolute_root(root)
    check_session_exists(root, name)
    return _submit(args, config, root, name, None, None, None)


def command_slurm_benchmark(args: argparse.Namespace) -> int:
    """Check the matrix, the config and the cluster, open the benchmark's MLflow parent run, submit
    a job per cell; with ``--wait``, wait for the jobs and end the parent run."""
    from digideep.benchmark_cli import plan_of
    from digideep.slurm import benchmark as cells_as_jobs
    from digideep.storage.session import check_session_name, check_session_root, default_session_name
    from digideep.tracking.naming import data_root_of

    config = job_config(args)
    cells, protocol, parameters = plan_of(args)
    name = args.name or default_session_name("benchmark")
    sessions = cells_as_jobs.session_names(name, cells)
    root = absolute_root(args.session_path)
    check_session_root(root)
    for session in sessions.values():
        check_session_name(session)
        _check_new_session(Location(root), session, "--name")
    partition, log_dir = check_cluster(config, root)

    def script(cell: Cell, parent_run_id: str | None) -> str:
        option = cells_as_jobs.cell_option(cell, name, parent_run_id)
        job = training_job(
            args, root, sessions[cell.key], log_dir, cell.algorithm, json.dumps(cell.cpanel), None, (option,)
        )
        return job_script(job, config)

    check_script(sessions[cells[0].key], script(cells[0], None))  # one config: one test for all cells
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
        jobs[cell.key] = slurm.submit(write_script(log_dir, sessions[cell.key], script(cell, parent)))
        print(f"submitted job {jobs[cell.key]}: cell {cell.key}, session {root}/{sessions[cell.key]}")
    print(
        f"benchmark {name}: {len(jobs)} jobs (partition {partition}), MLflow parent run {parent}; outputs "
        f"{log_dir}/<session>-<job>.out; watch them with: squeue -j {','.join(jobs.values())}; "
        f"when they are done: digideep report --benchmark {name}",
        flush=True,
    )
    if not args.wait:
        return 0
    ended = slurm.wait_for_jobs({f"cell {key}": job for key, job in jobs.items()})
    states = {key: ended[f"cell {key}"] for key in jobs}
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
    partition, log_dir = check_cluster(config, root)
    text = job_script(training_job(args, root, name, log_dir, params, cpanel, description), config)
    check_script(name, text)
    if args.dry_run:
        print(text, end="")
        return 0
    job_id = slurm.submit(write_script(log_dir, name, text))
    print(
        f"submitted job {job_id} (partition {partition}): session {root}/{name}; "
        f"output {log_dir / f'{name}-{job_id}.out'}; watch it with: squeue -j {job_id}"
    )
    return 0
