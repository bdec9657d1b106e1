"""An Optuna study's trials as Slurm jobs: one training job per trial, the study driven from a login node.

The driver (``digideep slurm tune``, :mod:`digideep.cli.slurm_tune`) runs the study loop that the
Prefect tune flow runs (:func:`digideep.pipeline.study.run_trials`), with Slurm jobs for flow runs:
:class:`TrialJobs` submits each trial as one job of :mod:`digideep.slurm.job` (the warning before
the time limit, the checkpoint, the requeue and the exact resume of any training job), whose
``digideep train`` and ``digideep resume`` get the trial as ``--trial`` (:func:`trial_option`): the
run reports its test returns to the trial and stops when the study prunes it
(:class:`~digideep.tracking.trials.TrialReporter`). The study's storage is the record: each trial
keeps its job's id (user attribute ``slurm_job_id``) and its resubmissions (``slurm_retries``), so a
driver started again with the same study name waits on the jobs an earlier one left running
(:meth:`TrialJobs.waited_on`), finding a job by its name (the trial's session,
:func:`trial_session`) when the earlier driver stopped before recording it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from digideep.errors import UsageError
from digideep.pipeline import study as studies
from digideep.pipeline.study import CPANEL_ATTR, search_space_of, trial_cpanel
from digideep.slurm import cluster as slurm
from digideep.storage.location import Location
from digideep.tracking.trials import PRUNED_ATTR

__all__ = [
    "JOB_ATTR",
    "RETRIES_ATTR",
    "TrialJobs",
    "check_study_name",
    "example_cpanel",
    "open_parent",
    "session_exists",
    "storage_url",
    "trial_option",
    "trial_session",
]

log = logging.getLogger(__name__)

JOB_ATTR = "slurm_job_id"
"""A trial's user attribute: the id of its newest job."""

RETRIES_ATTR = "slurm_retries"
"""A trial's user attribute: how many times its failed job was submitted again."""

_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")


def check_study_name(name: str) -> None:
    """Refuse a study name that cannot name its trials' sessions and jobs.

    Raises:
        UsageError: anything but letters, digits, ``.``, ``-`` and ``_`` (one line).
    """
    if not _NAME.match(name):
        raise UsageError(
            f"study name '{name}' must start with a letter or digit and hold only letters, digits, '.', "
            "'-' and '_' (it names the trials' sessions and jobs)"
        )


def trial_session(study: str, number: int) -> str:
    """The session (and job) name of trial ``number``, e.g. ``pendulum-study-trial-3``."""
    return f"{study}-trial-{number}"


def session_exists(sessions: Location, study: str, number: int) -> bool:
    """Whether trial ``number``'s session exists under ``sessions`` (any file under its prefix, on
    object storage)."""
    session = sessions / trial_session(study, number)
    return session.exists() if session.is_local else session.is_dir()


def storage_url(storage: str) -> str:
    """``storage`` with a relative sqlite path made absolute, as the jobs (started in another folder
    on another node) must open the same file."""
    from digideep.tracking.naming import sqlite_path

    path = sqlite_path(storage)
    return f"sqlite:///{path}" if path is not None else storage


def trial_option(trial: Mapping[str, Any], number: int) -> str:
    """The ``--trial`` option of trial ``number``'s ``digideep train`` and ``resume``: the train flow's
    ``trial`` parameter (:func:`~digideep.pipeline.study.trial_parameter`) as JSON."""
    return f"--trial={json.dumps({**trial, 'number': number}, sort_keys=True)}"


def example_cpanel(module: Any, base: dict[str, Any], seed: int) -> dict[str, Any]:
    """The cpanel of a trial drawn from a study in memory: the search space checked before any job.

    Raises:
        UsageError: no ``search_space``, or one that gives a bad cpanel (one line).
    """
    import optuna

    space = search_space_of(module)
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
    return trial_cpanel(module, base, space(trial))


def open_parent(
    study: Any, module: str, base_cpanel: dict[str, Any], data_root: Path, tracking_uri: str | None
) -> str:
    """The study's MLflow parent run (:func:`~digideep.pipeline.study.open_parent`), tagged with the
    launcher ``slurm``.

    Raises:
        UsageError: the store does not answer (one line).
    """
    from digideep.tracking.failures import http_limits, one_line
    from digideep.tracking.naming import tracking_uri_of

    try:
        with http_limits(retries=0, timeout=10):
            return studies.open_parent(
                study, module, base_cpanel, data_root, {"digideep.launcher": "slurm"}, tracking_uri
            )
    except Exception as error:
        raise UsageError(
            f"MLflow tracking at {tracking_uri_of(tracking_uri, data_root)} does not answer ({one_line(error)}); "
            "point MLFLOW_TRACKING_URI at a store that every node reaches"
        ) from None


class TrialJobs:
    """The Slurm jobs of a study's trials: submitted, found again after a restart, watched, resubmitted.

    Args:
        study: the study (:func:`~digideep.pipeline.study.open_study`).
        submit: submits trial ``number``'s job with its cpanel (writes its script, ``sbatch``); the
            job's id. The script resumes the trial's session when it exists.
        sessions: the folder (or URL) of the trials' sessions.
        max_retries: submissions again of a trial's job that ended otherwise than COMPLETED or
            CANCELLED (FAILED, NODE_FAIL, OUT_OF_MEMORY, TIMEOUT without requeue...), each resuming
            the session from its newest checkpoint, before the trial counts as failed.

    Attributes:
        holds: tells once that a trial's job is held (:class:`~digideep.slurm.cluster.HoldNotices`).
    """

    def __init__(
        self,
        study: Any,
        submit: Callable[[int, dict[str, Any]], str],
        sessions: Location,
        max_retries: int,
    ) -> None:
        self.study = study
        self.submit = submit
        self.sessions = sessions
        self.max_retries = max_retries
        self.holds = slurm.HoldNotices(log)

    def start(self, number: int, cpanel: dict[str, Any]) -> str:
        """Submit new trial ``number``'s job; its id.

        Raises:
            UsageError: the trial's session exists already (a study of that name was deleted and
                made again): its job would resume another run.
        """
        if session_exists(self.sessions, self.study.study_name, number):
            import optuna

            self.study.tell(number, state=optuna.trial.TrialState.FAIL)  # never resumed as this trial
            raise UsageError(
                f"the session of trial {number} exists already under {self.sessions.url}, from another study "
                f"of the name {self.study.study_name}; choose another --study-name or move those sessions away"
            )
        return self.submit(number, cpanel)

    def waited_on(self) -> dict[int, str]:
        """The jobs of the trials that an earlier driver left RUNNING, by trial number.

        A trial's job is the newest one named after its session that the controller knows (newer
        than the recorded one when the earlier driver stopped between ``sbatch`` and the record),
        else its recorded one, else a new job that resumes its session, or trains it when it never
        started. A trial with no cpanel yet (its driver stopped right after asking the study for it)
        never started and is told FAIL: a new trial takes its place.
        """
        import optuna

        in_flight: dict[int, str] = {}
        for trial in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            cpanel = trial.user_attrs.get(CPANEL_ATTR)
            if cpanel is None:
                self.study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
                log.info("trial %d: failed (its driver stopped before it had a cpanel)", trial.number)
                continue
            named = slurm.jobs_named(trial_session(self.study.study_name, trial.number))
            job = named[-1] if named else trial.user_attrs.get(JOB_ATTR)
            if job is None:
                job = self.submit(trial.number, cpanel)
                log.info("trial %d: its job was never submitted; submitted job %s", trial.number, job)
            else:
                log.info("trial %d: waiting again for its job %s", trial.number, job)
            self._set(trial.number, JOB_ATTR, job)
            in_flight[trial.number] = job
        return in_flight

    def ended(self, in_flight: dict[int, str]) -> dict[int, str]:
        """Look at the jobs of ``in_flight`` once; the trials whose job ended, with its final state.

        A requeued job is pending again, not ended. A held job (a person's ``scontrol hold`` or
        ``requeuehold``) is not ended either: it is said once to be held (:attr:`holds`), and waited
        on until a person releases or cancels it. A job the controller has forgotten (``MinJobAge``
        after it ended) counts ``COMPLETED`` when its trial was pruned or its session finished
        (``done.json``), else ``PURGED``. A job that ended otherwise than ``COMPLETED`` or
        ``CANCELLED`` is submitted again (its new id in ``in_flight``), up to ``max_retries`` times.
        """
        states = slurm.job_states(list(in_flight.values()))
        if not states:  # the controller did not answer: look again at the next poll
            return {}
        ended: dict[int, str] = {}
        for number, job in list(in_flight.items()):
            seen = states.get(job, slurm.JobState("PURGED"))
            self.holds.look(f"trial {number}", job, seen)
            if not seen.ended:
                continue
            state = seen.state
            trial = self.study.get_trials(deepcopy=False)[number]
            pruned = bool(trial.user_attrs.get(PRUNED_ATTR))
            if state == "PURGED" and (pruned or self._finished(number)):
                state = "COMPLETED"
            retries = int(trial.user_attrs.get(RETRIES_ATTR, 0))
            if state in ("COMPLETED", "CANCELLED") or pruned or retries >= self.max_retries:
                ended[number] = state
                continue
            self._set(number, RETRIES_ATTR, retries + 1)
            in_flight[number] = self.submit(number, trial.user_attrs[CPANEL_ATTR])
            self._set(number, JOB_ATTR, in_flight[number])
            log.info("trial %d: job %s %s; submitted again as job %s", number, job, state, in_flight[number])
        return ended

    def _finished(self, number: int) -> bool:
        return (self.sessions / trial_session(self.study.study_name, number) / "done.json").exists()

    def _set(self, number: int, key: str, value: Any) -> None:
        """Set user attribute ``key`` of trial ``number`` (running) in the study's storage."""
        import optuna

        trial = self.study.get_trials(deepcopy=False)[number]
        optuna.trial.Trial(self.study, trial._trial_id).set_user_attr(key, value)
