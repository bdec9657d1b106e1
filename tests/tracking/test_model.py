"""The policy as an MLflow model: logged when a run finishes, registered, loaded without digideep.

A real training run (a subprocess, real MLflow sqlite store) with an observation normaliser; its
models are MLflow 3 logged models of the run, loaded in a fresh interpreter that has neither
digideep nor Prefect on its path, which must return exactly the actions the checkpoint's agent
takes; the TorchScript file too. A session on S3 (moto) gets its models logged as well.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from digideep.cli.runs import main_runs
from digideep.errors import UsageError
from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.resuming import from_checkpoint
from digideep.storage.location import Location
from digideep.storage.session import Session
from digideep.tracking.model import build_policy
from tests.pipeline.test_resume import run, train_command

TINY = {"number_epochs": 2, "epoch_size": 1, "n_steps": 50, "learning_starts": 50, "batch_size": 32,
        "hidden_sizes": [32, 32], "save_interval": 1, "test_episodes": 1}  # fmt: skip

PARAMS = """
from params import pendulum_sac

cpanel = dict(pendulum_sac.cpanel)


def gen_params(cpanel):
    params = pendulum_sac.gen_params(cpanel)
    params["env"]["vector_wrappers"] = [
        {"name": "digideep.environment.wrappers.NormalizeObservation", "args": {"clip": 5.0}}
    ]
    params["tracking"] = {"register_model": "%s"}
    return params
"""

LOAD = """
import sys, numpy as np, mlflow, torch
obs = np.load(sys.argv[1])
out = {}
out["registered"] = mlflow.pyfunc.load_model(sys.argv[2]).predict(obs)
out["run"] = mlflow.pyfunc.load_model(sys.argv[3]).predict(obs)
out["logged"] = mlflow.pyfunc.load_model(sys.argv[5]).predict(obs)
script = mlflow.artifacts.download_artifacts(sys.argv[3] + "/artifacts/policy.pt")
with torch.inference_mode():
    out["torchscript"] = torch.jit.load(script)(torch.from_numpy(obs)).numpy()
assert "prefect" not in sys.modules and "digideep" not in sys.modules, "loading imported prefect or digideep"
np.savez(sys.argv[4], **out)
"""


def checkpoint_actions(sessions: Path, name: str, checkpoint: Path, obs: np.ndarray) -> np.ndarray:
    """What the checkpoint's agent does with ``obs``: the test explorer's normaliser, then the agent."""
    session = Session(root=sessions, name=name, resume=True, lock=False)
    runner = from_checkpoint(session, checkpoint, devices=DeviceChoice("cpu"), modes=("test",))
    try:
        explorer = runner.explorers["test"]
        normalizer = next(
            w for key, w in explorer._stateful_wrappers() if key.endswith("NormalizeObservation")
        )
        agent = runner.agents["agent"]
        masks = np.ones((len(obs), 1), dtype=np.float32)
        hidden = agent.initial_hidden_state(len(obs))
        return agent.action_generator(normalizer._normalize(obs, False), hidden, masks, deterministic=True)[
            "actions"
        ]
    finally:
        runner.close()
        session.close()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_logged_model_acts_as_the_checkpoint_without_digideep_or_prefect(tmp_path, run_env):
    model_name = f"pendulum-{uuid.uuid4().hex[:8]}"
    params_file = tmp_path / "normalised_sac.py"
    params_file.write_text(textwrap.dedent(PARAMS % model_name))
    sessions = tmp_path / "sessions"
    run(train_command(sessions, "s", str(params_file), TINY), run_env)
    info = json.loads((sessions / "s" / "session.json").read_text())
    run_id, uri = info["mlflow_run_id"], run_env["MLFLOW_TRACKING_URI"]
    client = MlflowClient(uri)
    mlflow_run = client.get_run(run_id)
    # MLflow 3 logged models, linked to the run (its Models column), in the training view's experiment
    models = client.search_logged_models([mlflow_run.info.experiment_id], f"source_run_id = '{run_id}'")
    assert sorted((m.name, str(m.status), m.tags["digideep.model"]) for m in models) == [
        ("best_model", "READY", "best"),
        ("model", "READY", "final"),
    ]
    assert {o.model_id for o in mlflow_run.outputs.model_outputs} == {m.model_id for m in models}
    final = next(m for m in models if m.name == "model")
    frames = json.loads((sessions / "s" / "checkpoints" / "checkpoint-2" / "runner.json").read_text())
    assert [o.step for o in mlflow_run.outputs.model_outputs if o.model_id == final.model_id] == [
        frames["counters"]["frames"]
    ]
    assert client.get_experiment(mlflow_run.info.experiment_id).tags["mlflow.experimentKind"] == (
        "custom_model_development"
    )
    version = client.get_model_version(model_name, "1")
    assert (version.run_id, version.source) == (run_id, final.artifact_location)

    obs = (np.random.default_rng(0).normal(size=(64, 3)) * 3).astype(np.float32)
    np.save(tmp_path / "obs.npy", obs)
    env = {k: v for k, v in run_env.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-c", LOAD, str(tmp_path / "obs.npy"), f"models:/{model_name}/1",
         f"runs:/{run_id}/model", str(tmp_path / "actions.npz"), f"models:/{final.model_id}"],
        cwd=tmp_path, env=env, check=True, timeout=300,
    )  # fmt: skip
    loaded = np.load(tmp_path / "actions.npz")
    expected = checkpoint_actions(sessions, "s", sessions / "s" / "checkpoints" / "checkpoint-2", obs)
    assert expected.shape == (64, 1) and np.abs(expected).max() > 0
    for key in ("registered", "run", "logged", "torchscript"):
        np.testing.assert_array_equal(loaded[key], expected, err_msg=key)

    # registered again afterwards, by the CLI's function; bad input is one line
    out = io.StringIO()
    assert main_runs(["register", run_id, "--name", f"{model_name}-best", "--model", "best_model",
                      "--alias", "champion", "--tracking-uri", uri], out=out) == 0  # fmt: skip
    assert "version 1 (alias 'champion')" in out.getvalue()
    best = client.get_model_version_by_alias(f"{model_name}-best", "champion")
    assert best.source == next(m.artifact_location for m in models if m.name == "best_model")
    for argv, message in (
        (["register", "nope", "--tracking-uri", uri], "no run 'nope'"),
        (
            ["register", run_id, "--model", "nope", "--name", "x", "--tracking-uri", uri],
            "unknown model 'nope'",
        ),
    ):
        with pytest.raises(UsageError, match=message) as raised:
            main_runs(argv, out=out)
        assert "\n" not in str(raised.value)


def test_a_run_without_a_logged_model_is_refused_in_one_line(sqlite_uri, tmp_path) -> None:
    """An artifact folder named like the model is not a logged model: register refuses the run."""
    client = MlflowClient(sqlite_uri)
    experiment = client.create_experiment(f"no-model-{uuid.uuid4().hex[:8]}", str(tmp_path / "artifacts"))
    run_id = client.create_run(experiment).info.run_id
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "MLmodel").write_text("flavors: {}\n")
    client.log_artifacts(run_id, str(folder), "model")
    client.set_terminated(run_id)
    with pytest.raises(UsageError) as refused:
        main_runs(["register", run_id, "--name", "x", "--tracking-uri", sqlite_uri], out=io.StringIO())
    assert str(refused.value) == (
        f"run {run_id} has no logged 'model' model; models are logged when a run finishes "
        "('digideep runs sync SESSION' logs those of a finished session)"
    )


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_model_of_a_session_on_s3_reaches_mlflow(run_env, s3_env, s3_bucket, monkeypatch) -> None:
    # the checkpoint was once read as Path("s3://...") == "s3:/...": S3 sessions logged no model
    url = f"s3://{s3_bucket}/sessions"
    run(train_command(url, "s", "params.pendulum_sac", TINY), {**run_env, **s3_env})
    run_id = Location(f"{url}/s/session.json").read_json()["mlflow_run_id"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", run_env["MLFLOW_TRACKING_URI"])
    client = MlflowClient()
    experiment_id = client.get_run(run_id).info.experiment_id
    models = client.search_logged_models([experiment_id], f"source_run_id = '{run_id}'")
    assert sorted((m.name, str(m.status)) for m in models) == [("best_model", "READY"), ("model", "READY")]
    final = next(m for m in models if m.name == "model")
    checkpoint = f"{url}/s/checkpoints/checkpoint-2"
    assert final.tags["digideep.checkpoint"] == checkpoint

    obs = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)
    module, _ = build_policy(checkpoint)
    with torch.inference_mode():
        expected = module(torch.from_numpy(obs)).numpy()
    loaded = mlflow.pyfunc.load_model(f"models:/{final.model_id}").predict(obs)
    np.testing.assert_array_equal(loaded, expected)
