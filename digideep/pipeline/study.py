"""An Optuna study whose trials are train runs: what the tune flow and ``digideep slurm tune`` share.

A driver (``flows/tune.py`` on a Prefect pool, :mod:`digideep.slurm.tune` on a Slurm cluster) opens
the study in Optuna's RDB storage (:func:`open_study`) and its MLflow parent run
(:func:`open_parent`), then :func:`run_trials`: it asks the study for trials, turns each one's
``search_space(trial)`` into cpanel overrides (:func:`trial_cpanel`), starts each as a train run
given a ``trial`` parameter (:func:`trial_parameter`; the run reports its test returns to the trial
through :class:`~digideep.tracking.trials.TrialReporter`), and tells the study how each run ended
(:func:`tell`). At the end the parent run gets the best trial (:func:`finish_parent`). How a train
run is started and watched is the driver's: a flow run of a deployment, or a Slurm job.

A trial's objective is its last reported test return (as the RL Zoo's ``last_mean_reward``),
maximised. Optuna and MLflow are imported when a function runs, never at import time.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from digideep.errors import UsageError
from digideep.pipeline.params import apply_cpanel
from digideep.tracking.trials import PRUNED_ATTR, make_pruner, make_sampler, open_storage

__all__ = [
    "CPANEL_ATTR",
    "PARENT_ATTR",
    "default_storage",
    "default_storage_path",
    "finish_parent",
    "open_parent",
    "open_study",
    "run_trials",
    "search_space_of",
    "started_trials",
    "summary",
    "tell",
    "trial_cpanel",
    "trial_parameter",
]

PARENT_ATTR = "mlflow_parent_run_id"
"""The study's user attribute that holds its MLflow parent run's id."""

CPANEL_ATTR = "cpanel"
"""A trial's user attribute that holds its cpanel overrides (base and sampled values)."""


def default_storage(session_path: str) -> str:
    """``sqlite:///<abs data folder>/optuna.db``: beside the sessions folder, absolute for the workers.

    A missing store is created whole (built in a temporary file, renamed into place under a lock, see
    :mod:`digideep.tracking.stores`), as MLflow's is: Optuna creates its tables in several statements,
    and a kill between them must not leave a store that only looks whole.
    """
    from digideep.tracking.stores import create_optuna_store

    store = default_storage_path(session_path)
    create_optuna_store(store)
    return f"sqlite:///{store}"


def default_storage_path(session_path: str) -> Path:
    """The file of :func:`default_storage` (``<abs data folder>/optuna.db``), not created."""
    return Path(session_path).resolve().parent / "optuna.db"


def search_space_of(module: Any) -> Callable[[Any], Any]:
    """The parameter file's ``search_space(trial) -> dict`` function.

    Raises:
        UsageError: the module has none.
    """
    space = getattr(module, "search_space", None)
    if not callable(space):
        raise UsageError(f"params module '{module.__name__}' has no search_space(trial) function to tune")
    return space


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


def open_study(
    name: str,
    storage: str,
    sampler: str = "tpe",
    sampler_args: Mapping[str, Any] | None = None,
    pruner: str = "median",
    pruner_args: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> Any:
    """Study ``name`` in ``storage``, created (maximising) or continued.

    A continued study's sampler is seeded with ``seed`` plus its trial count, so that it draws new
    values instead of the first run's sequence again.

    Raises:
        UsageError: the storage cannot be reached, or an unknown sampler, pruner or argument.
    """
    import optuna

    study = optuna.create_study(
        study_name=name,
        storage=open_storage(storage),
        sampler=make_sampler(sampler, seed, sampler_args),
        pruner=make_pruner(pruner, pruner_args),
        direction="maximize",
        load_if_exists=True,
    )
    if study.trials:
        study.sampler = make_sampler(sampler, seed + len(study.trials), sampler_args)
    return study


def trial_parameter(
    storage: str, study: str, pruner: str, pruner_args: Mapping[str, Any] | None, parent_run_id: str | None
) -> dict[str, Any]:
    """The train run's ``trial`` parameter, less the trial's ``number``
    (:meth:`~digideep.tracking.trials.TrialReporter.from_parameters` reads it)."""
    parameter: dict[str, Any] = {
        "storage": storage,
        "study": study,
        "pruner": pruner,
        "pruner_args": dict(pruner_args or {}),
    }
    if parent_run_id:
        parameter["parent_run_id"] = parent_run_id
    return parameter


def started_trials(study: Any) -> int:
    """Trials of the study that did not fail: those that count towards its ``n_trials``."""
    return len([t for t in study.get_trials(deepcopy=False) if t.state.name != "FAIL"])


def run_trials(
    study: Any,
    module: Any,
    base_cpanel: dict[str, Any],
    n_trials: int,
    concurrency: int,
    in_flight: dict[int, str],
    start: Callable[[int, dict[str, Any]], str],
    ended: Callable[[dict[int, str]], Mapping[int, str]],
    run_attr: str,
    logger: logging.Logger | logging.LoggerAdapter,
    poll_seconds: float,
    max_failed: int | None = None,
) -> bool:
    """Start trials, ``concurrency`` at a time, until the study holds ``n_trials`` that did not fail,
    and tell the study how each ended.

    Args:
        study: the study (:func:`open_study`).
        module: the parameter file; its ``search_space`` gives each trial's cpanel overrides.
        base_cpanel: overrides shared by every trial (the search space's values win).
        n_trials: trials the study holds in all (those of an earlier run count).
        concurrency: trials running at once.
        in_flight: the running trials' train runs by trial number (runs of an earlier driver being
            waited on again); updated as trials start and end.
        start: starts trial ``number``'s train run with its cpanel; the run's id.
        ended: looks once at the runs of ``in_flight``; those that ended, each with its final state
            (``COMPLETED`` or another). It may start a failed run again under a new id in
            ``in_flight``.
        run_attr: the trial's user attribute that records its run's id (``flow_run_id``...).
        logger: gets a line per trial started and ended.
        poll_seconds: seconds between looks at the running trials.
        max_failed: stop starting trials once this many failed since the call (None: never stop).

    Returns:
        False when it stopped at ``max_failed`` failed trials, True when every trial ended.

    Raises:
        UsageError: ``search_space`` gave a bad cpanel (the trial is told FAIL first).
    """
    import optuna

    def failed() -> int:
        return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)))

    failed_before = failed()
    while True:
        started = started_trials(study)
        stopped = max_failed is not None and failed() - failed_before >= max_failed
        while len(in_flight) < concurrency and started < n_trials and not stopped:
            trial = study.ask()
            try:
                cpanel = trial_cpanel(module, base_cpanel, search_space_of(module)(trial))
            except Exception:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                raise
            trial.set_user_attr(CPANEL_ATTR, cpanel)
            in_flight[trial.number] = start(trial.number, cpanel)
            trial.set_user_attr(run_attr, in_flight[trial.number])
            logger.info("trial %d: %s as %s", trial.number, json.dumps(cpanel), in_flight[trial.number])
            started += 1
        if not in_flight:
            return not stopped
        time.sleep(poll_seconds)
        for number, kind in ended(in_flight).items():
            del in_flight[number]
            logger.info("trial %d: %s", number, tell(study, number, kind))


def tell(study: Any, number: int, kind: str) -> str:
    """Tell the study how trial ``number`` ended, from its train run's final state ``kind``
    (``COMPLETED`` or another); return a line saying so.

    A completed run is PRUNED when its reporter pruned it, COMPLETE with its last reported test
    return as the value, or FAIL when it reported none; any other ending is FAIL.
    """
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


def summary(study: Any) -> dict[str, Any]:
    """The study's trial counts by state, and its best trial's number, value and cpanel."""
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    result: dict[str, Any] = {"study": study.study_name, "trials": counts}
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if complete:
        best = max(complete, key=lambda t: t.value)
        result.update(best_trial=best.number, best_value=best.value, best_cpanel=best.user_attrs[CPANEL_ATTR])
    return result


def open_parent(
    study: Any,
    module: str,
    base_cpanel: Mapping[str, Any],
    data_root: Path,
    tags: Mapping[str, str],
    tracking_uri: str | None = None,
) -> str:
    """The study's MLflow parent run, created once (``study <name>``, in the parameter file's
    experiment) with ``tags`` beside ``optuna.study``; its id is kept in the study.

    Args:
        tracking_uri: the trials' store; None: ``MLFLOW_TRACKING_URI``, else the embedded store
            under ``data_root``.
    """
    parent = study.user_attrs.get(PARENT_ATTR)
    if parent:
        return parent
    from mlflow import MlflowClient

    from digideep.tracking.naming import experiment_name, open_experiment, resolve_tracking_uri

    uri, artifacts = resolve_tracking_uri(tracking_uri, data_root)
    client = MlflowClient(uri)
    experiment = open_experiment(client, experiment_name(module, dict(base_cpanel)), artifacts)
    run_tags = {"optuna.study": study.study_name, "digideep.kind": "study", **tags}
    run = client.create_run(experiment, run_name=f"study {study.study_name}", tags=run_tags)
    study.set_user_attr(PARENT_ATTR, run.info.run_id)
    return run.info.run_id


def finish_parent(
    parent: str | None, result: Mapping[str, Any], data_root: Path, tracking_uri: str | None = None
) -> None:
    """End the parent run FINISHED with the trial counts (``optuna.trials.<state>`` tags) and, when a
    trial completed, the best one: its cpanel as ``best/<key>`` params, ``best_value`` and the tag
    ``best_trial``.

    Args:
        result: the study's :func:`summary`.
    """
    if not parent:
        return
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from digideep.tracking.naming import flatten_params, resolve_tracking_uri

    client = MlflowClient(resolve_tracking_uri(tracking_uri, data_root)[0])
    tags = [RunTag(f"optuna.trials.{state.lower()}", str(n)) for state, n in result["trials"].items()]
    if "best_trial" in result:
        existing = client.get_run(parent).data.params
        best = flatten_params(result["best_cpanel"], prefix="best")
        params = [Param(k, v) for k, v in best.items() if existing.get(k) != v]
        tags.append(RunTag("best_trial", str(result["best_trial"])))
        metric = Metric("best_value", float(result["best_value"]), int(time.time() * 1000), 0)
        try:
            client.log_batch(parent, metrics=[metric], params=params, tags=tags)
        except Exception:  # a continued study whose best trial changed: params are immutable in MLflow
            client.log_batch(parent, metrics=[metric], tags=tags)
    else:
        client.log_batch(parent, tags=tags)
    client.set_terminated(parent, "FINISHED")
