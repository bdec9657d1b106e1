"""The Runner's own state in process: its Monitor and Counters through a checkpoint, old checkpoints, signals."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal

import pytest
import torch

from digideep.errors import UsageError
from digideep.pipeline.counters import Counters
from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.reporting import Progress, progress_line
from digideep.pipeline.resuming import from_checkpoint
from digideep.pipeline.runner import Runner
from digideep.pipeline.session import Session
from digideep.pipeline.signals import StopOnSignals
from digideep.storage.checkpoint import COMMIT_FILE, find_checkpoints, load_checkpoint
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


def test_a_checkpoint_without_the_newer_counters_still_resumes(tmp_path):
    """A checkpoint written before ``last_test_return`` was a counter resumes with it unknown (NaN)."""
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

    # make the first checkpoint look like one an older digideep wrote: no last_test_return
    first = find_checkpoints(session.checkpoints_location)[0]
    stored = torch.load(first.states_file, weights_only=True)  # as written (encoded), counters plain
    old_counters = {k: v for k, v in stored["counters"].items() if k != "last_test_return"}
    assert set(old_counters) == {
        "iteration", "frames", "wall_time", "last_log_frames",
        "best_test_return", "best_checkpoint", "last_checkpoint",
    }  # fmt: skip
    torch.save({**stored, "counters": old_counters}, first.states_file)
    info = json.loads(first.runner_file.read_text())
    first.runner_file.write_text(json.dumps({**info, "counters": old_counters}))
    record = json.loads((first.path / COMMIT_FILE).read_text())  # committed as it is now
    for name in ("runner.json", "states.pt"):
        data = (first.path / name).read_bytes()
        record["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (first.path / COMMIT_FILE).write_text(json.dumps(record))
    assert load_checkpoint(first.path)[1]["counters"] == old_counters

    session = Session(root=tmp_path, name="run", resume=True)
    resumed = from_checkpoint(session, first.path, devices=DeviceChoice("cpu"))
    try:
        assert math.isnan(resumed.counters.last_test_return)
        assert resumed.counters.best_test_return == old_counters["best_test_return"]
        assert resumed.monitor.window_values(TEST_RETURN) == runner.monitor.window_values(TEST_RETURN)[:1]
        assert resumed.train() == "finished"
        assert resumed.counters.iteration == 2 and not math.isnan(resumed.counters.last_test_return)
    finally:
        resumed.close()
        session.close()


def test_counters_refuse_fields_they_do_not_know():
    assert Counters.from_dict({"iteration": 3}) == Counters(iteration=3)
    with pytest.raises(UsageError, match=r"\['episodes'\] are unknown to this digideep version"):
        Counters.from_dict({"iteration": 3, "episodes": 7})


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
