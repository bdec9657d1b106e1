"""The Runner's schedule with grouped iterations: ``iterate(n)`` stops where the four stages would,
and grouping never changes what is trained."""

from __future__ import annotations

from pathlib import Path

import pytest

from digideep.storage.checkpoint import latest_checkpoint, load_checkpoint
from tests.agents.runner_setup import close, make_runner, shipped_params
from tests.helpers import assert_same_tensors

# the shipped schedule (a frame, then a gradient step), small: 2 epochs of 4 iterations
ONE_FRAME = {"n_steps": 1, "epoch_size": 4, "number_epochs": 2, "learning_starts": 2, "batch_size": 8,
             "hidden_sizes": [16, 16], "buffer_size": 100, "test_interval": 1, "test_episodes": 1,
             "save_interval": 1}  # fmt: skip


@pytest.fixture
def runner(tmp_path: Path):
    runner = make_runner(tmp_path, shipped_params("pendulum_sac", **ONE_FRAME))
    yield runner
    close(runner)


def test_a_group_stops_at_the_epochs_end(runner):
    metrics = runner.iterate(10)
    assert runner.counters.iteration == 4 and runner.counters.frames == 4
    assert "/agents/agent/losses/qf_loss" in metrics  # the last update's


def test_a_group_stops_after_the_iteration_a_stop_came_in(runner):
    runner.request_stop("SIGTERM received")
    runner.iterate(3)
    assert runner.counters.iteration == 1


def test_grouped_iterations_train_what_the_four_stages_train(tmp_path: Path):
    stages: dict[str, list[str]] = {}
    for name, group in (("stages", None), ("grouped", lambda: 3)):
        runner = make_runner(tmp_path / name, shipped_params("pendulum_sac", **ONE_FRAME))
        try:
            seen = stages[name] = []
            assert runner.train(lambda stage, function, seen=seen: seen.append(stage) or function(), group)
        finally:
            close(runner)
    # 3 + 1 iterations an epoch when grouped: a group never runs past the epoch's end
    assert stages["grouped"] == ["iterate", "iterate", "test", "log", "checkpoint"] * 2
    epoch = ["explore", "store", "sample", "update"] * 4 + ["test", "log", "checkpoint"]
    assert stages["stages"] == epoch * 2
    _, plain = load_checkpoint(latest_checkpoint(tmp_path / "stages" / "run" / "checkpoints").path)
    _, grouped = load_checkpoint(latest_checkpoint(tmp_path / "grouped" / "run" / "checkpoints").path)
    assert_same_tensors(plain["agents"], grouped["agents"], "agents")
    assert plain["counters"]["frames"] == grouped["counters"]["frames"] == 8
