"""One trial end to end: its fault, the resume to the end, and the verdict against the reference."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient

from bench.faults.kinds import Trial
from bench.faults.run import REPO, Ended
from bench.faults.verdict import (
    DIFFERENT,
    IDENTICAL,
    REFUSED,
    Final,
    changed,
    differences,
    final_of,
    snapshot,
)
from digideep.storage.location import Location

RESUMES = 3
"""Resumes a trial may take to finish (a resume that refuses in one line ends the trial)."""


@dataclass
class Outcome:
    kind: str
    where: str
    verdict: str
    why: str = ""


def judge(trial: Trial, kind: str, reference: Final, client: Callable[[], MlflowClient]) -> Outcome:
    """Resume ``trial``'s session until it finishes (or a resume refuses), then compare it.

    ``client()`` opens its MLflow store once the run is over (an embedded store opened earlier would be
    created by the benchmark, not by the run).
    """
    if trial.problem:
        return Outcome(kind, trial.where, DIFFERENT, trial.problem)
    session = Location(f"{trial.root}/{trial.name}")
    local = session.is_local
    for attempt in range(RESUMES):
        started = (session / "session.json").exists()
        command = (
            trial.driver.resume(trial.root, trial.name)
            if started
            else trial.driver.train(trial.root, trial.name, trial.cpanel)
        )
        before = snapshot(trial.session) if local and started else {}
        ended = trial.start(command, f"finish{attempt}").wait()
        if ended.code == 0 and (session / "done.json").exists():
            break
        if ended.one_line_refusal:
            lost = changed(before, snapshot(trial.session)) if local and started else None
            if lost:
                return Outcome(kind, trial.where, DIFFERENT, f"{lost}: {ended.last_line()}")
            return Outcome(kind, trial.where, REFUSED, ended.last_line())
        if ended.code != 0:
            return Outcome(kind, trial.where, DIFFERENT, _failure(ended))
    else:
        return Outcome(kind, trial.where, DIFFERENT, f"not finished after {RESUMES} resumes")
    try:
        run_id = json.loads((session / "session.json").read_text())["mlflow_run_id"]
        final = final_of(trial.session if local else session.url, run_id, client())
        problem = differences(reference, final, trial.stop_steps)
    except Exception as error:  # a session that cannot even be read back
        problem = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    return Outcome(kind, trial.where, IDENTICAL if problem is None else DIFFERENT, problem or "")


def _failure(ended: Ended) -> str:
    """Why a command that failed is not a refusal in one line."""
    lines = ended.stderr.strip().splitlines()
    errors = sum(line.startswith("digideep: error:") for line in lines)
    traceback = " with a traceback" if "Traceback" in ended.stderr else ""
    if errors == 1:
        return f"refused, but not in one line: exit {ended.code}, {len(lines)} lines{traceback}, then: {ended.last_line()}"
    return f"exit {ended.code}, {len(lines)} lines on stderr{traceback}; last: {ended.last_line()}"


OPTUNA_STORE = """
import json, sys
from pathlib import Path
import optuna
from digideep.pipeline.study import default_storage

sessions = sys.argv[1]
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(storage=default_storage(sessions), study_name="s", load_if_exists=True)
trial = study.ask()
trial.suggest_float("x", 0.0, 1.0)
study.tell(trial, 1.0)
files = sorted(p.name for p in Path(sessions).parent.iterdir() if p.name != "sessions")
told = study.trials[trial.number]
print(json.dumps({"told": [told.state.name, told.value], "files": files}))
"""
"""What the tune flow does first (its store, created whole, then its study), then one trial asked and told."""


def optuna_store_trial(folder: Path, trial: Trial, expected: str) -> Outcome:
    """SIGKILL 0-0.5 s after the Optuna store began to be built in ``folder``, then run the same again:
    it must print what the same script prints on a fresh folder (``expected``: its trial told, and
    the store and its lock the only files beside the sessions folder)."""
    delay, began = trial.rng.uniform(0.0, 0.5), []

    def condition() -> bool:
        if not began and any(folder.glob(".optuna.db.*")):
            began.append(time.monotonic())
        return bool(began) and time.monotonic() - began[0] >= delay

    folder.mkdir(parents=True)
    command = [sys.executable, "-c", OPTUNA_STORE, str(folder / "sessions")]
    ended = trial.start(command, "optuna").kill_when(condition)
    left = "store whole" if (folder / "optuna.db").exists() else "no store"
    trial.note(ended, f"Optuna store: killed {delay:.2f} s into its creation ({left})")
    code, printed = run_optuna_script(folder, trial.env, trial.logs / f"{trial.name}-optuna-again.log")
    if code != 0:
        return Outcome("store", trial.where, DIFFERENT, f"exit {code}; see {trial.name}-optuna-again.log")
    if printed != expected:
        return Outcome("store", trial.where, DIFFERENT, f"{printed} instead of {expected}")
    return Outcome("store", trial.where, IDENTICAL)


def run_optuna_script(folder: Path, env: dict, log: Path) -> tuple[int, str]:
    """Run :data:`OPTUNA_STORE` on ``folder``; its exit status and what it printed."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-c", OPTUNA_STORE, str(folder / "sessions")]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    log.write_text(result.stderr)
    return result.returncode, result.stdout.strip()
