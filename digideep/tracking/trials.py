"""A train run as a trial of an Optuna study: report the test return, stop cleanly when pruned.

The tune flow (``flows/tune.py``) gives every train run it starts a ``trial`` parameter::

    {"storage": "sqlite:////abs/data/optuna.db", "study": "pendulum_sac-1a2b3c4d", "number": 3,
     "pruner": "median", "pruner_args": {"n_startup_trials": 5}}

and the train flow hands a :class:`TrialReporter` to the Runner (``runner.trial``); ``digideep slurm
tune`` gives the same parameter to its trials' jobs as ``digideep train --trial`` (and ``resume
--trial``, after a requeue). At every test stage the Runner calls :meth:`TrialReporter.report`: the
deterministic test return is reported to the trial at the step of the run's frames; when the study's
pruner says so, the reporter marks the trial (user attribute ``pruned``), tags the MLflow run
``pruned=true`` and asks the Runner to stop, which then logs, writes its checkpoint and ends the
MLflow run KILLED like any stopped run. The study's driver reads the trial back and tells the study
PRUNED.

Optuna is imported when a report is made, never at import time, so the library and the train flow
do not need it unless they run a trial. The same module builds the samplers and pruners by name for
the tune flow (:func:`make_sampler`, :func:`make_pruner`) and opens the RDB storage
(:func:`open_storage`) with a one-line error when it cannot be reached.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from digideep.errors import UsageError

__all__ = [
    "BENCHMARK_CELL_KEYS",
    "PRUNED_ATTR",
    "PRUNED_REASON",
    "PRUNERS",
    "SAMPLERS",
    "TrialReporter",
    "benchmark_tags",
    "make_pruner",
    "make_sampler",
    "open_storage",
    "trial_tags",
]

log = logging.getLogger(__name__)

PRUNED_REASON = "pruned by its tune study"
PRUNED_ATTR = "pruned"
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "percentile", "threshold", "hyperband", "none")


def make_sampler(name: str = "tpe", seed: int | None = None, args: Mapping[str, Any] | None = None) -> Any:
    """An Optuna sampler by name: ``tpe`` (default) or ``random``, seeded, with keyword ``args``.

    Raises:
        UsageError: an unknown name or argument.
    """
    import optuna

    classes = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}
    if name not in classes:
        raise UsageError(f"unknown sampler '{name}'; choose one of {', '.join(SAMPLERS)}")
    try:
        return classes[name](seed=seed, **(args or {}))
    except TypeError as error:
        raise UsageError(f"sampler '{name}': {error}") from None


def make_pruner(name: str = "median", args: Mapping[str, Any] | None = None) -> Any:
    """An Optuna pruner by name (:data:`PRUNERS`; ``none`` never prunes), with keyword ``args``.

    Raises:
        UsageError: an unknown name or argument.
    """
    import optuna

    classes = {
        "median": optuna.pruners.MedianPruner,
        "percentile": optuna.pruners.PercentilePruner,
        "threshold": optuna.pruners.ThresholdPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "none": optuna.pruners.NopPruner,
    }
    if name not in classes:
        raise UsageError(f"unknown pruner '{name}'; choose one of {', '.join(PRUNERS)}")
    try:
        return classes[name](**(args or {}))
    except (TypeError, ValueError) as error:
        raise UsageError(f"pruner '{name}': {error}") from None


def open_storage(url: str) -> Any:
    """Optuna's RDB storage at ``url`` (``sqlite:///...``, ``postgresql://...``), checked to answer.

    Raises:
        UsageError: the storage cannot be reached or its URL is malformed (one line).
    """
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    engine_kwargs: dict[str, Any] = {}
    if url.startswith("postgresql"):
        engine_kwargs["connect_args"] = {"connect_timeout": 5}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    except (SQLAlchemyError, ValueError, ImportError, ModuleNotFoundError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(
            f"Optuna study storage {url} cannot be reached ({first}); give a storage URL that answers"
        ) from None


class TrialReporter:
    """Reports a train run's test returns to trial ``number`` of ``study`` in ``storage``.

    Args:
        storage: the study's RDB storage URL.
        study: the study's name.
        number: the trial's number in the study.
        pruner: the study's pruner (:func:`make_pruner`): the pruner is not stored with the study,
            so the tune flow passes its choice on.
        pruner_args: the pruner's keyword arguments.
    """

    def __init__(
        self,
        storage: str,
        study: str,
        number: int,
        pruner: str = "median",
        pruner_args: Mapping[str, Any] | None = None,
    ) -> None:
        self.storage = storage
        self.study = study
        self.number = int(number)
        self.pruner = pruner
        self.pruner_args = dict(pruner_args or {})
        self._trial: Any = None

    @classmethod
    def from_parameters(cls, trial: Mapping[str, Any] | None) -> TrialReporter | None:
        """The reporter of a train flow's ``trial`` parameter (None when the run is no trial).

        Raises:
            UsageError: a ``trial`` without ``storage``, ``study`` or ``number``.
        """
        if not trial:
            return None
        missing = [key for key in ("storage", "study", "number") if key not in trial]
        if missing:
            raise UsageError(f"the train flow's trial parameter lacks {missing}; the tune flow passes them")
        return cls(
            trial["storage"],
            trial["study"],
            trial["number"],
            trial.get("pruner", "median"),
            trial.get("pruner_args"),
        )

    def _open(self) -> Any:
        if self._trial is None:
            import optuna

            storage = open_storage(self.storage)
            study = optuna.load_study(
                study_name=self.study, storage=storage, pruner=make_pruner(self.pruner, self.pruner_args)
            )
            trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, self.number)
            self._trial = optuna.trial.Trial(study, trial_id)
        return self._trial

    def report(self, runner: Any, value: float) -> bool:
        """Report ``value`` at ``runner.counters.frames``; stop ``runner`` when pruned. Returns pruned.

        A step reported before (a resumed run replaying it) is left as it was. NaN (no test
        episode finished) is not reported.
        """
        if math.isnan(value):
            return False
        trial = self._open()
        step = int(runner.counters.frames)
        if step not in trial.storage.get_trial(trial._trial_id).intermediate_values:
            trial.report(float(value), step)
        if not trial.should_prune():
            return False
        trial.set_user_attr(PRUNED_ATTR, True)
        runner.request_stop(PRUNED_REASON)
        tracker = runner.tracker
        if tracker is not None and getattr(tracker, "run_id", None):
            try:
                from mlflow import MlflowClient

                MlflowClient(tracker.uri).set_tag(tracker.run_id, PRUNED_ATTR, "true")
            except Exception as error:  # the trial's state is in the study either way
                log.warning("could not tag MLflow run %s as pruned: %s", tracker.run_id, error)
        log.info(
            "trial %d of study %s pruned at %d frames (test return %.2f)",
            self.number,
            self.study,
            step,
            value,
        )
        return True


def trial_tags(trial: Mapping[str, Any] | None) -> dict[str, str]:
    """MLflow tags of a trial's run: nested under the study's parent run, with study and number."""
    if not trial:
        return {}
    tags = {"optuna.study": str(trial.get("study", "")), "optuna.trial": str(trial.get("number", ""))}
    return {**tags, **_nested(trial)}


BENCHMARK_CELL_KEYS = ("algorithm", "env", "seed", "variant")
"""What names a cell of a benchmark matrix (``flows/benchmark.py``); each is a tag of its run."""


def benchmark_tags(cell: Mapping[str, Any] | None) -> dict[str, str]:
    """MLflow tags of a benchmark cell's run, nested under the benchmark's parent run.

    The benchmark flow gives every train run it starts a ``benchmark`` parameter::

        {"name": "pendulum-1a2b3c4d", "parent_run_id": "...", "algorithm": "params.pendulum_sac",
         "env": "Pendulum-v1", "seed": 0, "variant": "default"}

    which becomes ``digideep.benchmark``, the four cell tags and ``mlflow.parentRunId`` (the
    contract ``digideep report`` reads, see ``docs/benchmark.md``).
    """
    if not cell:
        return {}
    tags = {"digideep.benchmark": str(cell.get("name", ""))}
    tags.update(
        {key: str(cell.get(key, "default" if key == "variant" else "")) for key in BENCHMARK_CELL_KEYS}
    )
    return {**tags, **_nested(cell)}


def _nested(parameter: Mapping[str, Any]) -> dict[str, str]:
    """``mlflow.parentRunId`` when the parameter names a parent run: how MLflow nests a run."""
    parent = parameter.get("parent_run_id")
    return {"mlflow.parentRunId": str(parent)} if parent else {}
