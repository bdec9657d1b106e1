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

Example parameters (see docs/workflows.md, "Tuning and models")::

    {"params": "params.pendulum_sac", "deployment": "train/pendulum-sac", "n_trials": 20, "concurrency": 2}
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run as flow_run_runtime

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from digideep.errors import UsageError
from digideep.pipeline.params import apply_cpanel, load_params_module
from digideep.tracking.naming import data_root_of
from digideep.tracking.trials import PRUNED_ATTR, make_pruner, make_sampler, open_storage
from flows.cells import ended_runs, experiment_id, launch

PARENT_ATTR = "mlflow_parent_run_id"


def default_storage(session_path: str) -> str:
    """``sqlite:///<abs data folder>/optuna.db``: beside the sessions folder, absolute for the workers.

    A missing store is created whole (built in a temporary file, renamed into place under a lock, see
    :mod:`digideep.tracking.stores`), as MLflow's is: Optuna creates its tables in several statements,
    and a kill between them must not leave a store that only looks whole.
    """
    from digideep.tracking.stores import create_optuna_store

    store = Path(session_path).resolve().parent / "optuna.db"
    create_optuna_store(store)
    return f"sqlite:///{store}"


def trial_cpanel(module: Any, base: dict[str, Any], overrides: Any) -> dict[str, Any]:
    """The cpanel overrides of a trial, checked against the parameter file's cpanel.

    Raises:
        UsageError: ``search_space`` returned something else than a dict, or an unknown key or type.
    """
    if not isinstance(overrides, dict):
        raise UsageError(
            f"search_space() of '{module.__name__}' returned {type(overrides).__name__}; it must return "
            "a dict of cpanel overrides"
        )
    cpanel = {**base, **overrides}
    try:
        apply_cpanel(module.cpanel, cpanel)
    except UsageError as error:
        raise UsageError(f"search_space() of '{module.__name__}': {error}") from None
    return cpanel


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
    space = getattr(module, "search_space", None)
    if not callable(space):
        raise UsageError(f"params module '{module.__name__}' has no search_space(trial) function to tune")
    run_id = str(flow_run_runtime.id or "local")
    name = study_name or f"{flow_run_runtime.name or 'tune'}-{run_id[:8]}"
    url = storage or default_storage(session_path)
    study = optuna.create_study(
        study_name=name,
        storage=open_storage(url),
        sampler=make_sampler(sampler, seed, sampler_args),
        pruner=make_pruner(pruner, pruner_args),
        direction="maximize",
        load_if_exists=True,
    )
    data_root = data_root_of(session_path)  # the trials' store: the one their sessions' tracker uses
    if study.trials:  # a continued study: draw new values, not the first run's sequence again
        study.sampler = make_sampler(sampler, seed + len(study.trials), sampler_args)
    parent = _parent_run(study, module.__name__, base_cpanel or {}, run_id, data_root)
    trial_base = {"storage": url, "study": name, "pruner": pruner, "pruner_args": pruner_args or {}}
    if parent:
        trial_base["parent_run_id"] = parent
    retries: dict[int, int] = {}
    in_flight: dict[int, str] = {}
    with get_client(sync_client=True) as client:
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            in_flight[trial.number] = _launch(  # relaunching returns the same flow run (idempotency key)
                deployment, params, name, trial.number, trial.user_attrs["cpanel"], trial_base, session_path
            )
            logger.info("trial %d: continuing its train run %s", trial.number, in_flight[trial.number])
        while True:
            started = len([t for t in study.get_trials(deepcopy=False) if t.state.name != "FAIL"])
            while len(in_flight) < concurrency and started < n_trials:
                trial = study.ask()
                try:
                    cpanel = trial_cpanel(module, base_cpanel or {}, space(trial))
                except Exception:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    raise
                trial.set_user_attr("cpanel", cpanel)
                in_flight[trial.number] = _launch(
                    deployment, params, name, trial.number, cpanel, trial_base, session_path
                )
                trial.set_user_attr("flow_run_id", in_flight[trial.number])
                logger.info("trial %d: %s as %s", trial.number, json.dumps(cpanel), in_flight[trial.number])
                started += 1
            if not in_flight:
                break
            time.sleep(poll_seconds)
            for number, kind in ended_runs(client, in_flight, retries, max_trial_retries, "tune").items():
                del in_flight[number]
                logger.info("trial %d: %s", number, _tell(study, number, kind))
    summary = _summary(study)
    _finish_parent(parent, summary, data_root)
    logger.info("study %s (%s): %s", name, url, json.dumps(summary))
    return summary


def _launch(
    deployment: str, params: str, study: str, number: int, cpanel: dict, trial: dict, session_path: str
) -> str:
    parameters = {
        "params": params,
        "cpanel": cpanel,
        "session_path": session_path,
        "trial": {**trial, "number": number},
    }
    return launch(deployment, parameters, f"tune:{study}:trial-{number}")


def _tell(study: Any, number: int, kind: str) -> str:
    """Tell the study how trial ``number`` ended; return a line saying so."""
    import optuna

    trial = study.get_trials(deepcopy=False)[number]
    values = trial.intermediate_values
    if kind == "COMPLETED" and trial.user_attrs.get(PRUNED_ATTR):
        study.tell(number, state=optuna.trial.TrialState.PRUNED)
        return f"pruned at {max(values)} frames"
    if kind == "COMPLETED" and values:
        value = values[max(values)]
        study.tell(number, value)
        return f"test return {value:.2f}"
    study.tell(number, state=optuna.trial.TrialState.FAIL)
    return f"failed (train run {kind.lower()}{', no test return' if kind == 'COMPLETED' else ''})"


def _summary(study: Any) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    summary: dict[str, Any] = {"study": study.study_name, "trials": counts}
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if complete:
        best = max(complete, key=lambda t: t.value)
        summary.update(best_trial=best.number, best_value=best.value, best_cpanel=best.user_attrs["cpanel"])
    return summary


def _parent_run(study: Any, module: str, base_cpanel: dict, flow_run_id: str, data_root: Path) -> str | None:
    """The study's MLflow parent run (created once, its id kept in the study); None without MLflow."""
    parent = study.user_attrs.get(PARENT_ATTR)
    if parent:
        return parent
    from mlflow import MlflowClient

    from digideep.tracking.naming import experiment_name, resolve_tracking_uri

    uri, artifacts = resolve_tracking_uri(None, data_root)
    client = MlflowClient(uri)
    experiment = experiment_id(client, experiment_name(module, base_cpanel), artifacts)
    tags = {"optuna.study": study.study_name, "digideep.kind": "study", "prefect.flow_run_id": flow_run_id}
    run = client.create_run(experiment, run_name=f"study {study.study_name}", tags=tags)
    study.set_user_attr(PARENT_ATTR, run.info.run_id)
    return run.info.run_id


def _finish_parent(parent: str | None, summary: dict[str, Any], data_root: Path) -> None:
    if not parent:
        return
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from digideep.tracking.naming import flatten_params, resolve_tracking_uri

    client = MlflowClient(resolve_tracking_uri(None, data_root)[0])
    tags = [RunTag(f"optuna.trials.{state.lower()}", str(n)) for state, n in summary["trials"].items()]
    if "best_trial" in summary:
        existing = client.get_run(parent).data.params
        best = flatten_params(summary["best_cpanel"], prefix="best")
        params = [Param(k, v) for k, v in best.items() if existing.get(k) != v]
        tags.append(RunTag("best_trial", str(summary["best_trial"])))
        metric = Metric("best_value", float(summary["best_value"]), int(time.time() * 1000), 0)
        try:
            client.log_batch(parent, metrics=[metric], params=params, tags=tags)
        except Exception:  # a retried study whose best trial changed: params are immutable in MLflow
            client.log_batch(parent, metrics=[metric], tags=tags)
    else:
        client.log_batch(parent, tags=tags)
    client.set_terminated(parent, "FINISHED")


if __name__ == "__main__":
    print("deploy it (prefect deploy --all) and run 'prefect deployment run tune/pendulum-sac'")
