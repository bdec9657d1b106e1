"""A new run that fails to start leaves nothing: no session folder, no MLflow run, no lease.

:func:`~digideep.pipeline.training.open_run` builds the Runner before it starts the MLflow run, and
deletes the new session when anything fails before the run has started (the CLI checks a tracking
server before that; the Prefect flows and other callers of ``open_run`` rely on this).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import boto3
import pytest
from mlflow import MlflowClient

from digideep.errors import UsageError
from digideep.pipeline.params import ResolvedParams
from digideep.pipeline.training import close_run, open_run
from tests.helpers import free_port


def sac_tree(**agent_args: float) -> ResolvedParams:
    """A small SAC run on Pendulum, tracked; ``agent_args`` override the agent's arguments."""
    args = {"batch_size": 8, "learning_starts": 10, "hidden_sizes": [8], **agent_args}
    params = {
        "runner": {"number_epochs": 1, "epoch_size": 1, "seed": 0, "stats_interval": 0},
        "env": {"model_name": "Pendulum-v1"},
        "explorer": {"train": {"num_workers": 1, "n_steps": 10, "warm_start": 10, "seed": 0}},
        "memory": {"train": {"type": "digideep.memory.Memory", "args": {"capacity": 50}}},
        "agents": {"agent": {"type": "digideep.agents.sac.SAC", "memory": "train", "args": args}},
    }
    return ResolvedParams(module="params.demo", cpanel={"seed": 0}, params=params)


def runs_in(uri: str) -> list:
    client = MlflowClient(uri)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


def test_an_agent_that_cannot_be_built_leaves_no_session_and_no_mlflow_run(tmp_path, store):
    sessions = tmp_path / "data" / "sessions"
    with pytest.raises(ValueError, match="gamma"):
        open_run(sac_tree(gamma=2.0), session_name="bad", session_path=sessions)
    assert not (tmp_path / "data").exists()  # nor the folders made for it
    assert runs_in(store) == []
    handle = open_run(sac_tree(), session_name="bad", session_path=sessions)  # the name is free
    close_run(handle, "FINISHED")
    assert [run.info.run_name for run in runs_in(store)] == ["bad"]


def test_a_tracking_server_that_does_not_answer_leaves_no_session(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(UsageError, match="could not start the run"):
        open_run(sac_tree(), session_name="m1", session_path=tmp_path / "data" / "sessions")
    assert not (tmp_path / "data").exists()


def test_a_session_on_s3_that_fails_to_start_leaves_nothing_in_the_bucket(tmp_path, monkeypatch, s3_bucket):
    monkeypatch.chdir(tmp_path)  # a URL session's working folder: data/cache/<name>-<hash>
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    root = f"s3://{s3_bucket}/sessions"
    with pytest.raises(UsageError, match="could not start the run"):
        open_run(sac_tree(), session_name="m1", session_path=root)
    assert boto3.client("s3").list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0  # no files, no lease
    working = f"m1-{hashlib.sha256(f'{root}/m1'.encode()).hexdigest()[:8]}"
    assert not (tmp_path / "data" / "cache" / working).exists()
    assert not (tmp_path / "data").exists()


class NotAMemory:
    """A params ``memory`` type that builds something without a memory's methods."""

    @classmethod
    def from_params(cls, **args: object) -> NotAMemory:
        return cls()


@pytest.mark.parametrize(
    ("memory_type", "message"),
    [
        ("collections.OrderedDict", "class 'collections.OrderedDict' has no from_params"),
        (f"{__name__}.NotAMemory", "is not a digideep.memory.TrajectoryMemory"),
    ],
)
def test_a_memory_type_without_the_contract_is_one_line_and_leaves_no_session(
    tmp_path, store, memory_type, message
):
    tree = sac_tree()
    tree.params["memory"]["train"]["type"] = memory_type
    with pytest.raises(UsageError, match=message) as error:
        open_run(tree, session_name="bad", session_path=tmp_path / "data" / "sessions")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "data").exists()
    assert runs_in(store) == []
