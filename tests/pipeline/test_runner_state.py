"""The Runner's own state in process: its Monitor and Counters through a checkpoint, signals."""

from __future__ import annotations

import math
import os
import signal

import pytest

from digideep.errors import UsageError
from digideep.pipeline.counters import Counters
from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.reporting import Progress, progress_line
from digideep.pipeline.resuming import from_checkpoint
from digideep.pipeline.runner import Runner
from digideep.pipeline.signals import StopOnSignals
from digideep.storage.checkpoint import find_checkpoints, load_checkpoint
from digideep.storage.session import Session
from digideep.utility.monitoring import monitor
from tests.agents.runner_setup import shipped_params

TINY_SAC = {
    "number_epochs": 3,
    "epoch_size": 1,
    "n_steps": 50,
    "learning_starts": 50,
    "batch_size": 16,
    "hidden_sizes": [16, 16],
    "save_interval": 1,
    "test_interval": 1,
    "test_episodes": 1,
    "test_win_size": 3,
    "buffer_size": 500,
}
TEST_RETURN = "/explore/test/episode_return"


def test_the_monitor_and_the_counters_resume_from_a_checkpoint(tmp_path):
    """The Runner's own Monitor and counters (the latest test return included) come back as saved."""
    params = shipped_params("pendulum_sac", **{**TINY_SAC, "number_epochs": 2})
    session = Session(root=tmp_path, name="run")
    runner = Runner(session, params, devices=DeviceChoice("cpu"))
    try:
        assert runner.train() == "finished"
    finally:
        runner.close()
        session.close()
    assert runner.counters.last_test_return == runner.monitor.summary()[TEST_RETURN]["mean"]
    assert len(runner.monitor.window_values(TEST_RETURN)) == 2  # one test episode per epoch
    assert monitor.window_values(TEST_RETURN) == []  # the process-wide Monitor carried nothing

    first = find_checkpoints(session.checkpoints_location)[0]
    saved = load_checkpoint(first.path)[1]["counters"]
    assert not math.isnan(saved["last_test_return"])
    session = Session(root=tmp_path, name="run", resume=True)
    resumed = from_checkpoint(session, first.path, devices=DeviceChoice("cpu"))
    try:
        assert resumed.counters == Counters.from_dict(saved)
        assert resumed.monitor.window_values(TEST_RETURN) == runner.monitor.window_values(TEST_RETURN)[:1]
        assert resumed.train() == "finished"
        assert resumed.counters.iteration == 2
    finally:
        resumed.close()
        session.close()


def test_counters_refuse_fields_they_do_not_know_or_lack():
    saved = Counters(iteration=3).state_dict()
    assert Counters.from_dict(saved) == Counters(iteration=3)
    with pytest.raises(UsageError, match=r"\['episodes'\] are unknown to this digideep version"):
        Counters.from_dict({**saved, "episodes": 7})
    del saved["last_test_return"]
    with pytest.raises(
        UsageError,
        match=r"\['last_test_return'\] are missing for this digideep version; resume it with the version "
        "that wrote it, or start a new session",
    ):
        Counters.from_dict(saved)


def test_a_first_signal_asks_to_stop_and_a_second_sigint_interrupts():
    reasons: list[str] = []
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the suite runs as a background job
    with StopOnSignals(reasons.append):
        os.kill(os.getpid(), signal.SIGTERM)
        assert reasons == ["SIGTERM received"]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert reasons == ["SIGTERM received"]
    assert signal.getsignal(signal.SIGINT) is before  # the handlers are back


def test_the_progress_line_estimates_the_time_left_from_the_run_wall_time():
    progress = Progress(epoch=1, number_epochs=4, iteration=6, epoch_size=4, frames=600, wall_time=60.0)
    metrics = {"explore/train/episode_return": -150.25, "charts/frames_per_second": 1234.0}
    line = progress_line(progress, metrics)
    # 10 iterations left at 10 s each
    assert (
        line
        == "epoch 1/4 (iteration 2/4) | frames 600 | train return -150.2 | 1,234 frames/s | left ~0:01:40"
    )
