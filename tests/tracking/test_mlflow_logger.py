"""The MLflow tracker against the embedded store and a real local server."""

from __future__ import annotations

import logging
import multiprocessing
import tempfile
import uuid
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from digideep.tracking.mlflow_logger import MlflowTracker, TrackingUnavailableError
from digideep.tracking.naming import MAX_PARAM_VALUE_LENGTH

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _experiment() -> str:
    return f"exp-{uuid.uuid4().hex[:8]}"


def _steps(client: MlflowClient, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_short_run_arrives_complete(store: str, session_dir: Path, make_params) -> None:
    params, cpanel = make_params()
    tracker = MlflowTracker(
        _experiment(),
        session_dir,
        tracking_uri=store,
        params_module="params.mujoco_sac",
        flow_run_id="0b8c2f9e-flow-run",
        deployment="train/default",
    )
    run_id = tracker.start(params, cpanel)
    with tracker:
        for iteration in range(1, 6):
            metrics = {f"/losses/q{i}": 0.1 * i for i in range(18)}
            metrics["/explore/train/episode_return"] = 10.0 * iteration
            metrics["/time/train/update"] = 0.5
            tracker.log_metrics(metrics, step=1000 * iteration)
        tracker.log_checkpoint(session_dir / "checkpoints" / "checkpoint-2")
        tracker.log_artifacts(session_dir / "videos", "videos")
        png = tracker.log_learning_curve()

    client = MlflowClient(store)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == session_dir.name
    p = run.data.params
    assert p["agents/sac/args/lr"] == "0.0003"
    assert p["agents/sac/args/hidden"] == "[256, 256]"
    assert p["env/wrappers"] == '[{"name": "Normalize", "args": {"clip": 10.0}}]'
    assert p["memory/train/class"] == "builtins.dict"
    assert p["cpanel/seed"] == "0"
    assert len(p["notes"]) <= MAX_PARAM_VALUE_LENGTH and p["notes"].endswith("chars cut]")
    tags = run.data.tags
    assert tags["digideep.params_module"] == "params.mujoco_sac"
    assert tags["digideep.session_path"] == str(session_dir.resolve())
    assert tags["digideep.prefect.flow_run_id"] == "0b8c2f9e-flow-run"
    assert tags["digideep.prefect.deployment"] == "train/default"
    assert tags["digideep.version"]
    assert _steps(client, run_id, "explore/train/episode_return") == [1000, 2000, 3000, 4000, 5000]
    assert [m.value for m in client.get_metric_history(run_id, "explore/train/episode_return")][-1] == 50.0
    assert len(run.data.metrics) == 20
    artifacts = {
        f.path
        for folder in ("checkpoints/checkpoint-2", "session", "videos", "plots")
        for f in client.list_artifacts(run_id, folder)
    }
    assert artifacts == {
        "checkpoints/checkpoint-2/runner.json",
        "checkpoints/checkpoint-2/states.pt",
        "session/params.json",
        "session/cpanel.json",
        "videos/episode-0.mp4",
        "plots/learning_curve.png",
    }
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    local = client.download_artifacts(run_id, "checkpoints/checkpoint-2/states.pt", str(session_dir.parent))
    assert torch.equal(torch.load(local, weights_only=True)["w"], torch.zeros(3))


def test_mlflow_keeps_the_checkpoints_the_session_keeps(store: str, tmp_path: Path) -> None:
    # the session keeps the newest three and the best (iteration 1); MLflow follows it
    tracker = MlflowTracker(_experiment(), tracking_uri=store, asynchronous=False)
    run_id = tracker.start({}, {})
    kept: list[str] = []
    for iteration in range(1, 7):
        folder = tmp_path / f"checkpoint-{iteration}"
        folder.mkdir()
        (folder / "states.pt").write_bytes(bytes([iteration]) * 10)
        kept = [f"checkpoint-{i}" for i in sorted({1, *range(max(1, iteration - 2), iteration + 1)})]
        tracker.log_checkpoint(folder, kept)
    tracker.finish()
    client = MlflowClient(store)
    assert sorted(Path(f.path).name for f in client.list_artifacts(run_id, "checkpoints")) == kept
    assert kept == ["checkpoint-1", "checkpoint-4", "checkpoint-5", "checkpoint-6"]
    local = client.download_artifacts(run_id, "checkpoints/checkpoint-5/states.pt", str(tmp_path / "down"))
    assert Path(local).read_bytes() == bytes([5]) * 10

    untrimmed = MlflowTracker(_experiment(), tracking_uri=store, asynchronous=False)  # retention off
    other = untrimmed.start({}, {})
    for iteration in (1, 2):
        untrimmed.log_checkpoint(tmp_path / f"checkpoint-{iteration}")
    untrimmed.finish()
    assert len(client.list_artifacts(other, "checkpoints")) == 2


def test_resumed_run_logs_each_step_once(store: str, session_dir: Path, make_params) -> None:
    params, cpanel = make_params()
    experiment = _experiment()
    first = MlflowTracker(experiment, session_dir, tracking_uri=store)
    run_id = first.start(params, cpanel)
    for step in range(1, 11):
        first.log_metrics({"/explore/train/episode_return": float(step), "losses/qf": 1.0}, step=step)
    assert first.flush(wait=True)  # all ten steps reached MLflow; then the process dies without finish()
    checkpoint_state = first.state_dict()

    resumed = MlflowTracker(experiment, session_dir, tracking_uri=store)
    resumed.load_state_dict(checkpoint_state)
    assert resumed.start(params, cpanel) == run_id
    assert MlflowClient(store).get_run(run_id).info.status == "RUNNING"
    for step in range(7, 13):  # the replay of steps 7..10 (new timings, say), then new steps
        resumed.log_metrics({"/explore/train/episode_return": 100.0 + step, "losses/qf": 2.0}, step=step)
    resumed.finish()

    client = MlflowClient(store)
    history = sorted(client.get_metric_history(run_id, "explore/train/episode_return"), key=lambda m: m.step)
    assert [m.step for m in history] == list(range(1, 13))
    assert [m.value for m in history] == [float(s) for s in range(1, 11)] + [111.0, 112.0]
    assert _steps(client, run_id, "losses/qf") == list(range(1, 13))
    assert client.get_run(run_id).info.status == "FINISHED"


def test_killed_then_resumed_run_ends_truthfully(
    sqlite_uri: str, session_dir: Path, tmp_path: Path, make_params
) -> None:
    params, cpanel = make_params()
    experiment = _experiment()
    tracker = MlflowTracker(experiment, session_dir, tracking_uri=sqlite_uri)
    run_id = tracker.start(params, cpanel)
    with pytest.raises(KeyboardInterrupt), tracker:
        tracker.log_metrics({"a": 1.0}, step=1)
        raise KeyboardInterrupt
    client = MlflowClient(sqlite_uri)
    assert client.get_run(run_id).info.status == "KILLED"

    torch.save(tracker.state_dict(), tmp_path / "tracker.pt")  # the state goes into states.pt
    state = torch.load(tmp_path / "tracker.pt", weights_only=True)
    resumed = MlflowTracker(experiment, session_dir, tracking_uri=sqlite_uri, asynchronous=False)
    resumed.load_state_dict(state)
    assert resumed.start(params, cpanel) == run_id
    with pytest.raises(RuntimeError), resumed:
        resumed.log_metrics({"a": 2.0}, step=2)
        raise RuntimeError("diverged")
    assert client.get_run(run_id).info.status == "FAILED"
    assert _steps(client, run_id, "a") == [1, 2]


def test_one_log_batch_per_iteration(sqlite_uri: str) -> None:
    tracker = MlflowTracker(_experiment(), tracking_uri=sqlite_uri, asynchronous=False, min_flush_interval=0)
    tracker.start({"lr": 1.0}, {})
    calls = []
    log_batch = tracker._client.log_batch
    tracker._client.log_batch = lambda *a, **k: (calls.append(len(k["metrics"])), log_batch(*a, **k))
    for step in range(5):
        tracker.log_metrics({f"m{i}": float(i) for i in range(20)}, step=step)
    tracker.log_metrics({f"wide/{i}": 1.0 for i in range(1500)}, step=5)  # MLflow's client splits it
    tracker.finish()
    assert calls == [20] * 5 + [1500]

    throttled = MlflowTracker(
        _experiment(), tracking_uri=sqlite_uri, asynchronous=False, min_flush_interval=3600
    )
    throttled.start({}, {})
    for step in range(5):  # a fast loop: everything waits for the interval, or for finish()
        throttled.log_metrics({"a": float(step)}, step=step)
    assert throttled.flush(force=False) is False
    throttled.finish()
    assert _steps(MlflowClient(sqlite_uri), throttled.run_id, "a") == [0, 1, 2, 3, 4]
    assert len(MlflowClient(sqlite_uri).get_run(tracker.run_id).data.metrics) == 1520


def test_unreachable_server_fails_fast_naming_the_uri(unused_uri: str) -> None:
    uri = unused_uri
    tracker = MlflowTracker(_experiment(), tracking_uri=uri, connect_timeout=2)
    with pytest.raises(TrackingUnavailableError) as raised:
        tracker.start({"lr": 1.0}, {})
    message = str(raised.value)
    assert uri in message and "\n" not in message
    assert not tracker.active


def test_unreachable_server_optional_turns_tracking_off(
    unused_uri: str, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    uri = unused_uri
    tracker = MlflowTracker(_experiment(), tracking_uri=uri, required=False, connect_timeout=2)
    with caplog.at_level(logging.WARNING, logger="digideep.tracking"):
        assert tracker.start({"lr": 1.0}, {}) is None
    assert any(
        uri in record.getMessage() and "tracking off" in record.getMessage() for record in caplog.records
    )
    (tmp_path / "f.txt").write_text("x")
    with tracker:  # every method is a no-op
        tracker.log_metrics({"a": 1.0}, step=1)
        tracker.log_artifacts(tmp_path / "f.txt")
        assert tracker.log_learning_curve() is None
    assert not tracker.active and tracker.run_id is None


def test_backend_failure_mid_run_warns_and_never_raises(
    sqlite_uri: str, caplog: pytest.LogCaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the journal it keeps goes
    tracker = MlflowTracker(_experiment(), tracking_uri=sqlite_uri)
    run_id = tracker.start({"lr": 1.0}, {})
    tracker.log_metrics({"a": 1.0}, step=1)
    assert tracker.flush(wait=True)
    MlflowClient(sqlite_uri).delete_run(run_id)  # the store now refuses this run's writes
    with caplog.at_level(logging.WARNING, logger="digideep.tracking"):
        tracker.log_metrics({"a": 2.0}, step=2)
        tracker.finish()
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "refused metrics" in messages and "1 metric records of run" in messages
    assert "digideep runs sync" in messages  # the journal keeps them for later
    assert str(tracker.journal.path) in messages and tracker.journal.path.is_file()  # a temporary one, kept


def test_a_tracker_without_a_session_leaves_no_temporary_folder(
    sqlite_uri: str, unused_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    MlflowTracker(_experiment(), tracking_uri=sqlite_uri)  # never started
    with MlflowTracker(_experiment(), tracking_uri=unused_uri, required=False, connect_timeout=1) as off:
        off.start({}, {})
    assert not list(scratch.iterdir())
    with MlflowTracker(_experiment(), tracking_uri=sqlite_uri) as tracker:
        tracker.start({}, {})
        tracker.log_metrics({"a": 1.0}, step=1)
        assert [folder.name[:17] for folder in scratch.iterdir()] == ["digideep-journal-"]
    assert not list(scratch.iterdir())  # MLflow holds it all: the journal went with the run
    assert _steps(MlflowClient(sqlite_uri), tracker.run_id, "a") == [1]


def test_bad_input_is_reported(sqlite_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="experiment"):
        MlflowTracker("  ")
    tracker = MlflowTracker(_experiment(), tracking_uri=sqlite_uri, asynchronous=False)
    tracker.start({}, {})
    with pytest.raises(ValueError, match="does not exist"):
        tracker.log_artifacts(tmp_path / "missing")
    with caplog.at_level(logging.WARNING, logger="digideep.tracking"):
        tracker.log_metrics({"ok": 1.0, "text": "abc"}, step=0)
    assert "metric 'text'" in caplog.text
    with pytest.raises(ValueError, match="FINISHED"):
        tracker.finish("DONE")
    tracker.finish()
    assert list(MlflowClient(sqlite_uri).get_run(tracker.run_id).data.metrics) == ["ok"]


def test_default_store_is_embedded_under_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tracker = MlflowTracker(_experiment(), data_root=tmp_path / "data", asynchronous=False)
    assert tracker.uri == f"sqlite:///{(tmp_path / 'data' / 'mlflow.db').resolve()}"
    (tmp_path / "f.txt").write_text("x")
    tracker.start({}, {})
    tracker.log_artifacts(tmp_path / "f.txt")
    tracker.finish()
    assert list((tmp_path / "data" / "mlartifacts").rglob("f.txt"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    assert MlflowTracker("e", data_root=tmp_path / "data").uri == "http://127.0.0.1:1"


def _start_a_run(uri: str, barrier, results) -> None:  # a process of the test below
    tracker = MlflowTracker("params.race", tracking_uri=uri, asynchronous=False)
    barrier.wait()
    try:
        results.put(tracker.start({"agent": {"lr": 0.001}}, {"seed": 0}) is not None)
        tracker.finish("FINISHED")
    except Exception as error:
        results.put(f"{type(error).__name__}: {error}")


def test_runs_starting_together_on_a_fresh_sqlite_store_all_start(tmp_path):
    # two sweep runs once failed here: both created the store's schema at the same moment
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(4), context.Queue()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    starters = [context.Process(target=_start_a_run, args=(uri, barrier, results)) for _ in range(4)]
    for process in starters:
        process.start()
    outcomes = [results.get(timeout=240) for _ in starters]
    for process in starters:
        process.join(timeout=60)
    assert outcomes == [True] * 4
