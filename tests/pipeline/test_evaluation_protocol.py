"""The evaluation protocol (``digideep/pipeline/evaluation.py``) on a real run tracked in MLflow.

A short Pendulum SAC run whose test interval does not divide its epochs: it must evaluate at every
interval and once more at its frame budget, log ``eval/return`` at step = frames as the mean of
only that evaluation's episodes, and carry the three ``eval/*`` params a report checks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from mlflow import MlflowClient

from digideep.errors import UsageError
from digideep.pipeline.evaluation import EvaluationProtocol, whole_epochs
from digideep.pipeline.training import open_run, run_training

TINY = {"number_epochs": 5, "epoch_size": 1, "n_steps": 40, "learning_starts": 40, "batch_size": 32,
        "hidden_sizes": [16, 16], "save_interval": 5, "test_interval": 2, "test_episodes": 2,
        "test_win_size": 10}  # fmt: skip


def test_a_run_evaluates_every_interval_and_at_its_frame_budget(tmp_path, mlflow_uri, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    handle = open_run("params.pendulum_sac", dict(TINY), session_name="s", session_path=tmp_path)
    tests: list[tuple[int, list[float]]] = []
    tester = handle.runner.explorers["test"]
    play = tester.update

    def recording_update():  # what each evaluation's episodes returned, as the Runner saw them
        chunk = play()
        tests.append((handle.runner.counters.frames, [float(r) for r in chunk.episodes.returns]))
        return chunk

    monkeypatch.setattr(tester, "update", recording_update)
    assert run_training(handle) == "finished"

    # epochs 2 and 4 by the interval, epoch 5 as the budget; each of K = 2 episodes
    assert [frames for frames, _ in tests] == [80, 160, 200]
    assert all(len(returns) == 2 for _, returns in tests)
    run_id = json.loads((tmp_path / "s" / "session.json").read_text())["mlflow_run_id"]
    client = MlflowClient(mlflow_uri)
    history = client.get_metric_history(run_id, "eval/return")
    assert [(m.step, m.value) for m in history] == [
        (frames, pytest.approx(np.mean(returns))) for frames, returns in tests
    ]
    params = client.get_run(run_id).data.params
    assert {k: params[k] for k in ("eval/frame_interval", "eval/episodes", "eval/frame_budget")} == {
        "eval/frame_interval": "80",
        "eval/episodes": "2",
        "eval/frame_budget": "200",
    }
    # the windowed test return is still there, averaged over every test episode so far
    windowed = client.get_metric_history(run_id, "explore/test/episode_return")
    assert windowed[-1].value == pytest.approx(np.mean([r for _, rs in tests for r in rs]))


def test_the_protocol_of_a_params_tree_and_a_frame_interval_in_whole_epochs():
    from tests.agents.runner_setup import shipped_params

    params = shipped_params("pendulum_sac", **TINY)
    assert EvaluationProtocol.of_params(params) == EvaluationProtocol(80, 2, 200)
    assert whole_epochs(120, 40, "the frame budget") == 3
    for frames in (100, 0):
        with pytest.raises(UsageError, match="not a whole number of epochs of 40 frames") as raised:
            whole_epochs(frames, 40, "the evaluation interval")
        assert "\n" not in str(raised.value)
