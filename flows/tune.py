"""The ``tune`` flow: an Optuna study whose trials are runs of a train deployment, N at a time.

Each trial samples cpanel overrides from ``search_space(trial)`` of the parameter file and runs as a
flow run of ``deployment`` (``run_deployment``), so trials spread over every worker of its pool. The
train run reports its deterministic test return at each test stage to its trial and stops (with a
checkpoint, its MLflow run KILLED and tagged ``pruned``) when the pruner says so
(:mod:`digideep.tracking.trials`). A trial's objective is its last reported test return (as the
RL Zoo's ``last_mean_reward``).

The study lives in Optuna's RDB storage (``sqlite:///<data>/optuna.db`` by default, a PostgreSQL URL
on the stack). A tune flow run that crashes and is retried keeps its flow-run id, hence its study
name: finished trials are not repeated, running trials are waited on again, and a trial whose train
run failed or crashed is retried as that same flow run (Prefect's Retry), which resumes from its own
checkpoint, up to ``max_trial_retries`` times before the trial counts as failed.

MLflow: one parent run per study (in the parameter file's experiment); every trial's run is nested
under it (``mlflow.parentRunId``) and tagged ``optuna.study`` / ``optuna.trial``; the best trial's
params (``best/<name>``), its return (``best_value``) and number end on the parent.

The study's side (asking, the trials' cpanels, telling, the parent run) is
:mod:`digideep.pipeline.study`, which ``digideep slurm tune`` shares; this flow starts and watches
the trials' train runs.

Example parameters (see docs/workflows.md, "Tuning and models")::

    {"params": "params.pendulum_sac", "deployment": "train/pendulum-sac", "n_trials": 20, "concurrency": 2}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run as flow_run_runtime

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from digideep.pipeline import study as studies
from digideep.pipeline.params import load_params_module
from digideep.tracking.naming import data_root_of
from flows.cells import ended_runs, launch


@flow(name="tune", persist_result=False)
def tune(
    params: str = "params.pendulum_sac",
    deployment: str = "train/pendulum-sac",
    n_trials: int = 20,
    concurrency: int = 2,
    study_name: str | None = None,
    storage: str | None = None,
    sampler: str = "tpe",
    sampler_args: dict[str, Any] | None = None,
    pruner: str = "median",
    pruner_args: dict[str, Any] | None = None,
    seed: int = 0,
    base_cpanel: dict[str, Any] | None = None,
    session_path: str = "data/sessions",
    max_trial_retries: int = 2,
    poll_seconds: float = 2.0,
) -> dict[str, Any]:
    """Run (or continue) a study of ``n_trials`` trials of ``deployment``, ``concurrency`` at a time.

    Args:
        params: the parameter file; its ``search_space(trial) -> dict`` gives each trial's cpanel.
        deployment: ``<flow>/<deployment>`` of a train deployment of the same parameter file.
        n_trials: trials in the study in all (finished ones of an earlier run count).
        concurrency: trials running at once.
        study_name: the study; default ``<flow-run name>-<first 8 of its id>`` (so a retry continues it).
        storage: Optuna RDB storage URL; default ``sqlite:///<data>/optuna.db`` beside ``session_path``.
        sampler: ``tpe`` (default) or ``random``; sampler_args: its keyword arguments.
        pruner: ``median`` (default), ``percentile``, ``threshold``, ``hyperband`` or ``none``;
            pruner_args: its keyword arguments.
        seed: the sampler's seed.
        base_cpanel: overrides shared by every trial (the search space's values win).
        session_path: where the train runs keep their sessions.
        max_trial_retries: retries of a trial's failed or crashed train run before it counts failed.
        poll_seconds: seconds between looks at the running trials.
    """
    import optuna

    logger = get_run_logger()
    module = load_params_module(params)
    studies.search_space_of(module)
    run_id = str(flow_run_runtime.id or "local")
    name = study_name or f"{flow_run_runtime.name or 'tune'}-{run_id[:8]}"
    url = storage or studies.default_storage(session_path)
    study = studies.open_study(name, url, sampler, sampler_args, pruner, pruner_args, seed)
    data_root = data_root_of(session_path)  # the trials' store: the one their sessions' tracker uses
    tags = {"prefect.flow_run_id": run_id}
    parent = studies.open_parent(study, module.__name__, base_cpanel or {}, data_root, tags)
    trial_base = studies.trial_parameter(url, name, pruner, pruner_args, parent)
    retries: dict[int, int] = {}
    in_flight: dict[int, str] = {}
    with get_client(sync_client=True) as client:
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            in_flight[trial.number] = _launch(  # relaunching returns the same flow run (idempotency key)
                client,
                deployment,
                params,
                name,
                trial.number,
                trial.user_attrs[studies.CPANEL_ATTR],
                trial_base,
                session_path,
            )
            logger.info("trial %d: continuing its train run %s", trial.number, in_flight[trial.number])
        studies.run_trials(
            study,
            module,
            base_cpanel or {},
            n_trials,
            concurrency,
            in_flight,
            start=lambda number, cpanel: _launch(
                client, deployment, params, name, number, cpanel, trial_base, session_path
            ),
            ended=lambda running: ended_runs(client, running, retries, max_trial_retries, "tune"),
            run_attr="flow_run_id",
            logger=logger,
            poll_seconds=poll_seconds,
        )
    summary = studies.summary(study)
    studies.finish_parent(parent, summary, data_root)
    logger.info("study %s (%s): %s", name, url, json.dumps(summary))
    return summary


def _launch(
    client: Any,
    deployment: str,
    params: str,
    study: str,
    number: int,
    cpanel: dict,
    trial: dict,
    session_path: str,
) -> str:
    parameters = {
        "params": params,
        "cpanel": cpanel,
        "session_path": session_path,
        "trial": {**trial, "number": number},
    }
    return launch(client, deployment, parameters, f"tune:{study}:trial-{number}")


if __name__ == "__main__":
    print("deploy it (prefect deploy --all) and run 'prefect deployment run tune/pendulum-sac'")
