"""``digideep slurm tune``: an Optuna study whose trials are Slurm training jobs, driven from a login node.

The command runs the tune flow's study loop (:func:`digideep.pipeline.study.run_trials`) without a
Prefect server: each trial is one job of :mod:`digideep.slurm.job` (:mod:`digideep.slurm.tune`),
``--concurrency`` at a time, and the command waits for them and tells the study how each ended. Run
again with the same ``--study-name``, it continues the study: finished trials stay finished and the
jobs of running ones are waited on again. Every check runs before anything is submitted, each
failing in one line with exit status 2, as for ``digideep slurm benchmark``.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from digideep.cli.options import json_object
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
from digideep.slurm.job import job_script
from digideep.storage.location import Location, is_url

__all__ = ["add_tune_parser", "command_slurm_tune"]

log = logging.getLogger(__name__)


def add_tune_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``tune`` to the ``digideep slurm`` actions."""
    from digideep.tracking.trials import PRUNERS, SAMPLERS

    tune = sub.add_parser(
        "tune",
        help="run an Optuna study whose trials are training jobs, N at a time (see docs/slurm.md)",
        description="An Optuna study as the tune flow runs it (docs/tuning.md), each trial a training job "
        "requeued at its time limit like any other. The command waits for the jobs and tells the study how "
        "each ended; run it again with the same --study-name to continue the study after a stop. Exit "
        "status: 0 the study holds --n-trials finished trials, 1 it stopped after --n-trials trials failed "
        "in this run, 2 bad input.",
    )
    tune.add_argument(
        "--params", required=True, metavar="MODULE", help="parameter file with search_space(trial) -> dict"
    )
    tune.add_argument(
        "--n-trials", type=_positive, default=20, metavar="N", help="trials in the study (default: 20)"
    )
    tune.add_argument(
        "--concurrency", type=_positive, default=2, metavar="N", help="jobs at once (default: 2)"
    )
    tune.add_argument(
        "--study-name",
        metavar="NAME",
        help="the study, and the prefix of its trials' sessions and jobs (default: time and params name); "
        "the same name continues a study",
    )
    tune.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna RDB storage that every node reaches (default: sqlite:///<data>/optuna.db beside "
        "--session-path)",
    )
    tune.add_argument("--sampler", default="tpe", choices=SAMPLERS, help="default: tpe")
    tune.add_argument("--sampler-args", metavar="JSON", help="the sampler's keyword arguments")
    tune.add_argument("--pruner", default="median", choices=PRUNERS, help="default: median")
    tune.add_argument("--pruner-args", metavar="JSON", help="the pruner's keyword arguments")
    tune.add_argument("--seed", type=int, default=0, help="the sampler's seed (default: 0)")
    tune.add_argument(
        "--cpanel", metavar="JSON", help="cpanel overrides of every trial (the search space's win)"
    )
    tune.add_argument(
        "--max-trial-retries",
        type=int,
        default=2,
        metavar="N",
        help="submissions again of a trial's failed job, resuming its session, before the trial fails "
        "(default: 2)",
    )
    tune.add_argument(
        "--poll-seconds",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between looks at the jobs (default: 5)",
    )
    add_job_options(tune)
    tune.set_defaults(func=command_slurm_tune)
    return tune


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def command_slurm_tune(args: argparse.Namespace) -> int:
    """Check the params, the search space, the config and the cluster, then run the study: submit the
    trials' jobs, wait for them, tell the study; end its MLflow parent run with the best trial."""
    import optuna

    from digideep.pipeline import study as studies
    from digideep.pipeline.params import load_params_module, parse_cpanel, resolve_params
    from digideep.slurm import tune as trials_as_jobs
    from digideep.storage.session import check_session_root, default_session_name
    from digideep.tracking.naming import data_root_of, sqlite_path
    from digideep.tracking.trials import make_pruner, make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the command's own lines say what happens
    config = job_config(args)
    module = load_params_module(args.params)
    base = parse_cpanel(args.cpanel)
    keywords = "of keyword arguments"
    sampler_args = (
        json_object(args.sampler_args, "--sampler-args", keywords) if args.sampler_args is not None else {}
    )
    pruner_args = (
        json_object(args.pruner_args, "--pruner-args", keywords) if args.pruner_args is not None else {}
    )
    make_sampler(args.sampler, args.seed, sampler_args)  # an unknown argument, in one line
    make_pruner(args.pruner, pruner_args)
    example = trials_as_jobs.example_cpanel(module, base, args.seed)
    resolve_params(args.params, json.dumps(example), device=args.device)  # the whole tree of a trial
    name = args.study_name or default_session_name(module.__name__)
    trials_as_jobs.check_study_name(name)
    root = absolute_root(args.session_path)
    check_session_root(root)
    if args.storage is None and is_url(root):
        raise UsageError(
            "a study of sessions on object storage needs --storage, an RDB URL that every node reaches "
            "(e.g. postgresql://user:pass@host/optuna)"
        )
    storage = trials_as_jobs.storage_url(args.storage) if args.storage else None
    store = sqlite_path(storage) if storage else studies.default_storage_path(root)
    partition, log_dir = check_cluster(config, root, {"the study storage": store.parent} if store else {})

    def script(number: int, cpanel: dict[str, Any], trial: dict[str, Any]) -> str:
        job = training_job(
            args,
            root,
            trials_as_jobs.trial_session(name, number),
            log_dir,
            args.params,
            json.dumps(cpanel),
            f"trial {number} of study {name}",
            options=(trials_as_jobs.trial_option(trial, number),),
        )
        return job_script(job, config)

    draft = studies.trial_parameter(storage or f"sqlite:///{store}", name, args.pruner, pruner_args, None)
    check_script(trials_as_jobs.trial_session(name, 0), script(0, example, draft))
    if args.dry_run:
        print(script(0, example, draft), end="")
        print(f"# study {name}: each trial a job like this one, its cpanel from search_space(trial)")
        return 0

    url = storage or studies.default_storage(root)
    study = studies.open_study(name, url, args.sampler, sampler_args, args.pruner, pruner_args, args.seed)
    sessions = Location(root)
    if not study.trials and trials_as_jobs.session_exists(sessions, name, 0):
        raise UsageError(
            f"study {name} is new but the session of its trial 0 exists under {root}; choose another "
            "--study-name or move those sessions away"
        )
    tracking_uri = config.env.get("MLFLOW_TRACKING_URI")
    data_root = data_root_of(root)
    parent = trials_as_jobs.open_parent(study, module.__name__, base, data_root, tracking_uri)
    trial = studies.trial_parameter(url, name, args.pruner, pruner_args, parent)

    def submit(number: int, cpanel: dict[str, Any]) -> str:
        session = trials_as_jobs.trial_session(name, number)
        return slurm.submit(write_script(log_dir, session, script(number, cpanel, trial)))

    jobs = trials_as_jobs.TrialJobs(study, submit, sessions, args.max_trial_retries)
    print(
        f"study {name} ({url}): {args.n_trials} trials, {args.concurrency} at a time on partition "
        f"{partition}; MLflow parent run {parent}; job outputs {log_dir}/{name}-trial-<n>-<job>.out",
        flush=True,
    )
    in_flight = jobs.waited_on()
    try:
        complete = studies.run_trials(
            study,
            module,
            base,
            args.n_trials,
            args.concurrency,
            in_flight,
            start=jobs.start,
            ended=jobs.ended,
            run_attr=trials_as_jobs.JOB_ATTR,
            logger=log,
            poll_seconds=args.poll_seconds,
            max_failed=args.n_trials,
        )
    except KeyboardInterrupt:
        log.warning(
            "the trials' jobs %s keep running; run the command again with --study-name %s to wait on them",
            ", ".join(in_flight.values()) or "(none)",
            name,
        )
        raise
    summary = studies.summary(study)
    studies.finish_parent(parent, summary, data_root, tracking_uri)
    print(f"study {name}: {json.dumps(summary)}")
    if not complete:
        print(f"stopped: {args.n_trials} trials failed in this run; see their job outputs in {log_dir}")
    return 0 if complete else 1
