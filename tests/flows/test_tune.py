"""An Optuna study through a real Prefect server and worker (``flows/tune.py``), as a user runs it.

Six very short Pendulum trials, two at a time (``tests/flows/tune_params.py``): one is pruned by the
study's pruner and stops cleanly; one train run fails once and is retried as the same flow run,
resuming from its checkpoint; the tune flow itself fails once mid-study and, retried, continues the
same study without repeating a trial. MLflow holds the study as a parent run with the trials nested.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient

from tests.flows.stacks import local_stack
from tests.flows.test_train_flow import start, wait

PARAMS = str(Path(__file__).with_name("tune_params.py"))


@pytest.fixture(scope="module")
def tune_stack(tmp_path_factory, mlflow_uri):
    markers = tmp_path_factory.mktemp("tune-markers")
    home = tmp_path_factory.mktemp("prefect-tune")
    with local_stack(home, mlflow_uri, DIGIDEEP_TUNE_TEST_DIR=str(markers)) as local:
        yield local, markers


@pytest.mark.slow  # six trials through a server and a worker: about 8 minutes on 2 cores
def test_a_study_prunes_retries_and_continues_without_repeating_trials(tune_stack, tmp_path, mlflow_uri):
    stack, markers = tune_stack
    sessions = tmp_path / "sessions"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    parameters = {
        "params": PARAMS,
        "deployment": "train/pendulum-sac",
        "n_trials": 6,
        "concurrency": 2,
        "study_name": "tiny-pendulum",
        "storage": storage,
        "pruner": "threshold",
        "pruner_args": {"lower": -400.0},
        "session_path": str(sessions),
        "poll_seconds": 1.0,
    }
    tune_id = start("tune/pendulum-sac", parameters)
    assert wait(tune_id, stack, timeout=900) == "FAILED"  # the injected fault at trial 4
    assert (markers / "tune-fault").exists()
    stack.run("flow-run", "retry", tune_id)
    assert wait(tune_id, stack, timeout=900, states={"COMPLETED", "FAILED", "CRASHED"}) == "COMPLETED"

    study = optuna.load_study(study_name="tiny-pendulum", storage=storage)
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states[1] == "PRUNED" and states[4] == "FAIL", states
    assert sorted(n for n, s in states.items() if s == "COMPLETE") == [0, 2, 3, 5, 6], states
    lrs = [t.params["lr"] for t in study.trials if "lr" in t.params]
    assert len(set(lrs)) == len(lrs), "the continued study drew the same values again"
    # no trial ran twice: one session per launched trial, each its own flow run
    infos = [json.loads(p.read_text()) for p in sessions.glob("*/session.json")]
    flow_runs = {study.trials[n].user_attrs["flow_run_id"] for n in states if n != 4}
    assert len(infos) == 6 and {i["prefect_flow_run_id"] for i in infos} == flow_runs

    # trial 2's run failed once and was retried as the same flow run, resuming its checkpoint
    assert (markers / "trial-2-fault").exists()
    session_2 = next(
        sessions / p.parent.name
        for p in sessions.glob("*/session.json")
        if json.loads(p.read_text())["prefect_flow_run_id"] == study.trials[2].user_attrs["flow_run_id"]
    )
    assert "resuming session" in (session_2 / "log.txt").read_text()
    assert (session_2 / "done.json").exists()

    # MLflow: a parent run for the study, trials nested; the pruned one tagged and KILLED
    client = MlflowClient(mlflow_uri)
    parent_id = study.user_attrs["mlflow_parent_run_id"]
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    best = study.best_trial
    assert parent.data.metrics["best_value"] == pytest.approx(best.value)
    assert parent.data.params["best/lr"] == str(best.params["lr"])
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    by_trial = {int(r.data.tags["optuna.trial"]): r for r in children}
    assert sorted(by_trial) == [0, 1, 2, 3, 5, 6]
    pruned = by_trial[1]
    assert pruned.data.tags.get("pruned") == "true" and pruned.info.status == "KILLED"
    pruned_session = Path(pruned.data.tags["digideep.session_path"])
    assert (
        any(pruned_session.glob("checkpoints/checkpoint-*")) and not (pruned_session / "done.json").exists()
    )
    assert "pruned by its tune study" in (pruned_session / "log.txt").read_text()
    assert all(by_trial[n].info.status == "FINISHED" for n in (0, 2, 3, 5, 6))


def test_bad_input_is_one_line(tmp_path):
    from digideep.errors import UsageError
    from digideep.pipeline.params import load_params_module
    from digideep.pipeline.study import trial_cpanel
    from digideep.tracking.trials import make_pruner, make_sampler, open_storage

    module = load_params_module("params.pendulum_sac")
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}")
    assert trial_cpanel(module, {}, module.search_space(study.ask()))["hidden_sizes"]
    cases = [
        (lambda: trial_cpanel(module, {}, {"learning_rate": 0.1}), "unknown cpanel key 'learning_rate'"),
        (lambda: trial_cpanel(module, {}, [1]), "must return a dict"),
        (lambda: open_storage(f"sqlite:///{tmp_path / 'no' / 'dir.db'}"), "cannot be reached"),
        (lambda: make_pruner("nope"), "unknown pruner 'nope'"),
        (lambda: make_sampler("nope"), "unknown sampler 'nope'"),
    ]
    for call, message in cases:
        with pytest.raises(UsageError, match=message) as raised:
            call()
        assert "\n" not in str(raised.value)
