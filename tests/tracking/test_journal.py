"""The metrics journal: nothing lost when MLflow is away or a process dies, nothing sent twice."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from digideep.main import cli
from digideep.pipeline.params import write_params
from digideep.pipeline.training import open_run
from digideep.storage.session import Session
from digideep.tracking.journal import MetricsJournal
from digideep.tracking.mlflow_logger import MlflowTracker
from digideep.tracking.sender import JournalUploader
from tests.helpers import free_port
from tests.tracking.conftest import start_mlflow_server, stop_mlflow_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _experiment() -> str:
    return f"exp-{uuid.uuid4().hex[:8]}"


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_a_torn_record_is_dropped_and_rewind_keeps_the_checkpoint_record(tmp_path: Path) -> None:
    journal = MetricsJournal(tmp_path / "metrics.jsonl")
    journal.append(100, {"/charts/iteration": 1, "text": "not a number"})
    covered = journal.size  # what the checkpoint of iteration 1 records
    journal.append(100, {"time/checkpoint": 0.25}, checkpoint=1)
    journal.append(200, {"charts/iteration": 2})
    journal.mark_sent("run", journal.size)
    with open(journal.path, "ab") as file:
        file.write(b'{"step": 300, "ts": 1, "m": {"charts/it')  # killed while writing

    reopened = MetricsJournal(journal.path)
    assert [r["step"] for _, _, r in reopened.records()] == [100, 100, 200]
    assert reopened.records()[0][2]["m"] == {"charts/iteration": 1.0}  # an MLflow key, a float
    kept = reopened.rewind(covered, checkpoint=1)  # resume from the checkpoint of iteration 1
    assert [r["m"] for _, _, r in reopened.records()] == [
        {"charts/iteration": 1.0},
        {"time/checkpoint": 0.25},
    ]
    assert kept == reopened.size == journal.path.stat().st_size
    assert reopened.sent_offset("run") == kept and reopened.sent_offset("other run") == 0
    assert reopened.rewind(covered, checkpoint=2) == covered  # not that checkpoint's record: dropped
    with pytest.raises(ValueError, match="truncated or replaced"):
        reopened.rewind(10_000)


def test_a_half_sent_step_is_completed_once(sqlite_uri: str, tmp_path: Path) -> None:
    journal = MetricsJournal(tmp_path / "metrics.jsonl")
    tracker = MlflowTracker(_experiment(), tracking_uri=sqlite_uri, journal=journal, asynchronous=False)
    params = {f"knob{i:04d}": i for i in range(1200)}  # more than MLflow's 100 params per call
    run_id = tracker.start(params, {})
    record = journal.append(1, {f"wide/{i:04d}": float(i) for i in range(1500)})
    journal.append(2, {"wide/0000": 2.0})
    client = MlflowClient(sqlite_uri)
    first = [Metric(key, value, record["ts"] + 1, 1) for key, value in list(record["m"].items())[:1000]]
    client.log_batch(run_id, metrics=first)  # a send that died after MLflow took its first 1000 values

    uploader = JournalUploader(client, run_id, journal)  # a new process: it reads what MLflow holds
    assert uploader.send_pending() == 501 and uploader.skipped == 1000
    assert uploader.send_pending() == 0  # idempotent
    tracker.finish()
    run = client.get_run(run_id)
    assert len(run.data.params) == 1200 and run.data.params["knob1199"] == "1199"
    assert len(run.data.metrics) == 1500
    assert _history(client, run_id, "wide/0000") == [(1, 0.0), (2, 2.0)]
    assert all(len(client.get_metric_history(run_id, f"wide/{i:04d}")) == 1 for i in range(1, 1500, 97))


def test_a_server_down_for_a_while_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    port = free_port()
    server = start_mlflow_server(tmp_path, port)
    uri = f"http://127.0.0.1:{port}"
    try:
        tracker = MlflowTracker(
            _experiment(), tmp_path, tracking_uri=uri, min_flush_interval=0, retry_after=0.2
        )
        run_id = tracker.start({"lr": 1.0}, {})
        with caplog.at_level(logging.WARNING, logger="digideep.tracking"):
            for step in range(15):
                if step == 5:
                    stop_mlflow_server(server, kill=True)  # the server crashes
                if step == 10:
                    server = start_mlflow_server(tmp_path, port)  # and comes back
                tracker.log_metrics({"charts/iteration": float(step), "losses/q": step / 10}, step=step)
                assert tracker.flush(wait=True) == (step < 5 or step >= 10)  # training goes on
            tracker.finish()
        assert "could not send metrics" in caplog.text
        client = MlflowClient(uri)
        assert _history(client, run_id, "charts/iteration") == [(s, float(s)) for s in range(15)]
        assert len(client.get_metric_history(run_id, "losses/q")) == 15
        assert client.get_run(run_id).info.status == "FINISHED"
    finally:
        stop_mlflow_server(server)


def _offline_session(root: Path) -> Session:
    """A session that trained two steps with tracking off and finished (journal, params, done.json)."""
    session = Session(root=root, name="offline", params_name="demo")
    params = {"runner": {"number_epochs": 1}, "tracking": {"enabled": False}}
    write_params(session, "params.demo", {"seed": 0}, params)
    journal = MetricsJournal(session.path / "metrics.jsonl")
    for step in (10, 20):
        journal.append(step, {"explore/train/episode_return": step * 1.5, "charts/iteration": step / 10})
    journal.append(20, {"time/checkpoint": 0.1}, checkpoint=2)
    session.mark_done(iterations=2)
    session.close()
    return session


def test_runs_sync_sends_an_offline_run_once_and_resume_finishes_a_finished_run(
    tmp_path: Path, sqlite_uri: str, capsys: pytest.CaptureFixture
) -> None:
    session = _offline_session(tmp_path / "sessions")
    argv = ["runs", "sync", "offline", "--session-path", str(tmp_path / "sessions")]
    assert cli([*argv, "--tracking-uri", sqlite_uri]) == 0
    assert "sent 5 metric values (3 records)" in capsys.readouterr().out
    info = json.loads((session.path / "session.json").read_text())
    client = MlflowClient(sqlite_uri)
    run = client.get_run(info["mlflow_run_id"])
    assert run.info.status == "FINISHED" and info["mlflow_tracking_uri"] == sqlite_uri
    assert _history(client, run.info.run_id, "explore/train/episode_return") == [(10, 15.0), (20, 30.0)]
    assert _history(client, run.info.run_id, "time/checkpoint") == [(20, 0.1)]
    assert [f.path for f in client.list_artifacts(run.info.run_id, "plots")] == ["plots/learning_curve.png"]
    assert cli(argv) == 0  # again: nothing to do
    assert "nothing to do" in capsys.readouterr().out

    # a process killed after done.json, before it ended its MLflow run: resuming finishes that
    client.update_run(run.info.run_id, status="RUNNING")
    journal = MetricsJournal(session.path / "metrics.jsonl")
    journal.append(30, {"charts/iteration": 3.0})  # never sent
    assert open_run(session_name="offline", session_path=tmp_path / "sessions", resume=True) is None
    assert client.get_run(run.info.run_id).info.status == "RUNNING"  # tracking is off in its params

    params = json.loads((session.path / "params.json").read_text())
    params["tracking"] = {"enabled": True, "args": {"tracking_uri": sqlite_uri}}
    (session.path / "params.json").write_text(json.dumps(params))
    assert open_run(session_name="offline", session_path=tmp_path / "sessions", resume=True) is None
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    assert _history(client, run.info.run_id, "charts/iteration") == [(10, 1.0), (20, 2.0), (30, 3.0)]
    with Session(root=tmp_path / "sessions", name="offline", resume=True):  # finishing released the lock
        pass


def test_runs_sync_of_a_missing_session_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli(["runs", "sync", "nope", "--session-path", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("digideep: error: session") and "does not exist" in error
    assert error.count("\n") == 1
