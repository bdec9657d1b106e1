"""The Runner in real subprocesses: crashes mid-checkpoint, retention, finished sessions, bad checkpoints.

Stopping by SIGINT and SIGTERM: tests/pipeline/test_stop.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from digideep.main import cli, main
from digideep.pipeline.devices import available_devices
from digideep.storage.checkpoint import find_checkpoints, latest_checkpoint, load_checkpoint
from digideep.utility.stats import gpu_handles
from tests.conftest import REPO
from tests.helpers import CUDA, device_args
from tests.pipeline.test_resume import SMALL_SAC, resume_command, run, train_command

CRASH_IN_SECOND_SAVE = textwrap.dedent(
    """
    import os, signal, sys
    from digideep.storage.location import Location
    saves = []
    real_write = Location.write_bytes
    def dying_write(self, data):
        if self.name == "states.pt":
            saves.append(1)
            if len(saves) == 2:  # second checkpoint: write half its states file, then die like a power cut
                with open(self.local, "wb") as file:
                    file.write(data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
        return real_write(self, data)
    Location.write_bytes = dying_write
    from digideep.main import main
    sys.exit(main(sys.argv[1:]))
    """
)


def uncommitted(checkpoints: Path) -> list[Path]:
    """Checkpoint folders without a commit record: saves cut short."""
    return [p for p in checkpoints.glob("checkpoint-*") if not (p / "commit.json").exists()]


def fingerprint(folder: Path) -> dict[str, str]:
    """Path -> content hash of every file under ``folder``."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_kill_in_the_middle_of_a_checkpoint_leaves_the_previous_one_loadable(tmp_path, run_env, device):
    command = train_command(tmp_path, "s", "params.pendulum_sac", SMALL_SAC, device)
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_IN_SECOND_SAVE, *command[3:]],
        cwd=REPO,
        env=run_env,
        capture_output=True,
        timeout=300,
    )
    assert crashed.returncode == -signal.SIGKILL
    checkpoints = tmp_path / "s" / "checkpoints"
    assert [c.iteration for c in find_checkpoints(checkpoints)] == [2]
    assert uncommitted(checkpoints), "the half-written save should be left without its commit record"
    load_checkpoint(latest_checkpoint(checkpoints).path)  # the newest complete checkpoint loads

    run(resume_command(tmp_path, "s", device), run_env)
    assert not uncommitted(checkpoints), "the next save removes what the cut-short one left"
    assert (tmp_path / "s" / "done.json").exists()
    info, _ = load_checkpoint(latest_checkpoint(checkpoints).path)
    assert info["counters"]["iteration"] == 8


def test_retention_keeps_the_last_k_and_the_best(tmp_path, run_env):
    cpanel = {**SMALL_SAC, "number_epochs": 5, "epoch_size": 1, "test_interval": 1}
    run(train_command(tmp_path, "s", "params.pendulum_sac", cpanel), run_env)
    found = find_checkpoints(tmp_path / "s" / "checkpoints")
    _, states = load_checkpoint(found[-1].path)
    best = states["counters"]["best_checkpoint"]
    expected = sorted({3, 4, 5, best})  # keep_checkpoints = 3, plus the best
    assert [c.iteration for c in found] == expected


def test_a_finished_session_says_so_instead_of_training_again(tmp_path, run_env):
    run(train_command(tmp_path, "s", "params.pendulum_sac", {**SMALL_SAC, "number_epochs": 1}), run_env)
    before = fingerprint(tmp_path / "s" / "checkpoints")
    result = run(resume_command(tmp_path, "s"), run_env)
    assert "already finished" in result.stderr
    assert fingerprint(tmp_path / "s" / "checkpoints") == before


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mlflow_uri) -> Path:
    """A finished small session to damage in the bad-input tests (each test works on a copy)."""
    root = tmp_path_factory.mktemp("trained")
    environment = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri}
    run(train_command(root, "s", "params.pendulum_sac", {**SMALL_SAC, "number_epochs": 1}), environment)
    return root / "s"


NO_COMPLETE = "has no complete checkpoint to resume from"


def damage_runner_json(checkpoint: Path, change) -> None:
    """Change runner.json and commit the change (a checkpoint another version wrote, not a damaged one)."""
    info = json.loads((checkpoint / "runner.json").read_text())
    change(info)
    data = json.dumps(info).encode()
    (checkpoint / "runner.json").write_bytes(data)
    record = json.loads((checkpoint / "commit.json").read_text())
    record["files"]["runner.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / "commit.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        # resume skips a folder that lacks a file (an incomplete save); here it was the only checkpoint
        (lambda c: (c / "states.pt").unlink(), {"play": "states.pt' is missing", "resume": NO_COMPLETE}),
        (lambda c: (c / "runner.json").unlink(), {"play": "runner.json' is missing", "resume": NO_COMPLETE}),
        (
            lambda c: (c / "states.pt").write_bytes((c / "states.pt").read_bytes()[:100]),
            "states.pt' is damaged or truncated",
        ),
        (lambda c: (c / "runner.json").write_text("{not json"), "runner.json' is damaged"),
        (lambda c: damage_runner_json(c, lambda i: i.update(format_version=0)), "has format version 0"),
        (
            lambda c: damage_runner_json(
                c, lambda i: i["params"]["agents"]["agent"].update(type="digideep.agents.gone.Agent")
            ),
            "names agent 'agent' class 'digideep.agents.gone.Agent', which cannot be imported",
        ),
    ],
    ids=["no-states", "no-runner", "truncated", "bad-json", "old-version", "missing-class"],
)
@pytest.mark.parametrize("command", ["play", "resume"])
def test_bad_checkpoints_give_one_line_exit_2_and_change_nothing(
    tmp_path, trained, run_env, damage, message, command
):
    session = tmp_path / "s"
    subprocess.run(["cp", "-r", str(trained), str(session)], check=True)
    (session / "done.json").unlink()
    checkpoint = latest_checkpoint(session / "checkpoints").path
    damage(checkpoint)
    before = fingerprint(session)
    if command == "play":
        args = [sys.executable, "-m", "digideep.main", "--play", "--load-checkpoint", str(checkpoint)]
    else:
        args = resume_command(tmp_path, "s")
    result = subprocess.run(args, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    expected = message[command] if isinstance(message, dict) else message
    assert last.startswith("digideep: error: ") and expected in last
    after = fingerprint(session)
    after.pop("log.txt", None), before.pop("log.txt", None)
    assert after == before


@pytest.mark.parametrize("given", ["folder", "name"])
def test_play_of_a_session_plays_its_newest_whole_checkpoint(tmp_path, trained, run_env, given):
    """``digideep play <session folder>`` or ``play <name> --session-path P``: the newest whole checkpoint
    (it said the checkpoint was incomplete)."""
    newest = latest_checkpoint(trained / "checkpoints").path
    target = [str(trained)] if given == "folder" else [trained.name, "--session-path", str(trained.parent)]
    args = [sys.executable, "-c", "from digideep.main import cli; raise SystemExit(cli())", "play", *target]
    result = subprocess.run([*args, "--episodes", "1"], cwd=tmp_path, env=run_env, capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"playing the session's newest checkpoint, {newest}" in result.stderr
    assert "mean return" in result.stdout and "(resumed)" not in result.stderr


def test_play_with_video_writes_mp4s_and_attaches_them_to_the_mlflow_run(
    tmp_path, trained, mlflow_uri, device
):
    session = tmp_path / "s"
    subprocess.run(["cp", "-r", str(trained), str(session)], check=True)
    checkpoint = latest_checkpoint(session / "checkpoints").path
    environment = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri}
    args = ["play", str(checkpoint), "--episodes", "2", "--video", *device_args(device)]
    result = subprocess.run(
        [sys.executable, "-c", "from digideep.main import cli; raise SystemExit(cli())", *args],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "mean return" in result.stdout
    folders = [p for p in (session / "videos").iterdir() if p.is_dir()]
    assert len(folders) == 1 and folders[0].name.startswith(checkpoint.name)
    videos = sorted(folders[0].glob("*.mp4"))
    assert len(videos) == 2 and all(v.stat().st_size > 1000 for v in videos)

    from mlflow import MlflowClient

    run_id = json.loads((session / "session.json").read_text())["mlflow_run_id"]
    logged = MlflowClient(mlflow_uri).list_artifacts(run_id, f"videos/{folders[0].name}")
    assert sorted(Path(a.path).name for a in logged) == [v.name for v in videos]


CROSSING = [
    pytest.param(saved, loaded, marks=pytest.mark.skipif(not CUDA, reason="needs a CUDA device"))
    for saved, loaded in (("cpu", "cuda"), ("cuda", "cpu"))
]


@pytest.mark.parametrize(("saved_on", "loaded_on"), CROSSING)
def test_a_checkpoint_resumes_and_plays_on_another_device(tmp_path, run_env, saved_on, loaded_on):
    stop_early = {**run_env, "DIGIDEEP_MAX_ITERATIONS": "4"}
    run(train_command(tmp_path, "s", "params.pendulum_sac", SMALL_SAC, saved_on), stop_early)
    written = latest_checkpoint(tmp_path / "s" / "checkpoints").path
    run(resume_command(tmp_path, "s", loaded_on), run_env)
    log = (tmp_path / "s" / "log.txt").read_text()
    assert f"agent 'agent' (SAC) on {saved_on}" in log and f"agent 'agent' (SAC) on {loaded_on}" in log
    info, _ = load_checkpoint(latest_checkpoint(tmp_path / "s" / "checkpoints").path)
    assert info["counters"]["iteration"] == 8
    play = [sys.executable, "-m", "digideep.main", "--play", "--load-checkpoint", str(written)]
    played = run([*play, *device_args(loaded_on)], run_env)
    assert "mean return" in played.stdout


@pytest.mark.parametrize(
    ("device", "message"),
    [
        pytest.param("cuda", "has no usable CUDA device", marks=pytest.mark.skipif(CUDA, reason="has CUDA")),
        ("cuda:99", "does not exist; devices here: " if CUDA else "has no usable CUDA device"),
        ("gpu", "is not one of auto, cpu, cuda, cuda:N"),
    ],
)
@pytest.mark.parametrize("command", ["main", "train", "resume", "play"])
def test_a_device_that_does_not_exist_gives_one_line_exit_2_and_writes_nothing(
    tmp_path, capsys, device, message, command
):
    root = ["--session-path", str(tmp_path / "sessions")]
    argv = {
        "main": ["--params", "params.pendulum_sac", "--no-prefect", *root, "--device", device],
        "train": ["train", "--params", "params.pendulum_sac", "--no-prefect", *root, "--device", device],
        "resume": ["resume", "s", *root, "--device", device],
        "play": ["play", str(tmp_path / "checkpoint-1"), "--device", device],
    }[command]
    code = main(argv) if command == "main" else cli(argv)
    assert code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"digideep: error: device '{device}' ") and message in last
    if message != "is not one of auto, cpu, cuda, cuda:N":
        assert "devices here: " + ", ".join(available_devices()) in last
    assert list(tmp_path.iterdir()) == []


def test_the_cpanel_device_knob_is_checked_in_one_line_before_anything_is_written(tmp_path, capsys):
    root = ["--session-path", str(tmp_path / "sessions")]
    argv = ["--params", "params.pendulum_sac", "--no-prefect", *root, "--cpanel", '{"device": "cuda:99"}']
    assert main(argv) == 2
    message = "has no usable CUDA device" if not CUDA else "does not exist"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "digideep: error: session.device of 'params.pendulum_sac': device 'cuda:99' "
    ), err
    assert message in err and "devices here: " + ", ".join(available_devices()) in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not CUDA or not gpu_handles(), reason="needs a CUDA device with NVML")
def test_gpu_figures_reach_mlflow_on_a_real_run(tmp_path, mlflow_uri, monkeypatch):
    from mlflow import MlflowClient

    from digideep.pipeline.devices import DeviceChoice
    from digideep.pipeline.params import write_params
    from digideep.pipeline.runner import Runner
    from digideep.pipeline.training import RunHandle, run_training
    from digideep.storage.session import Session
    from digideep.tracking.tracker import open_tracker
    from tests.agents.runner_setup import shipped_params

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    params = shipped_params("pendulum_sac", **SMALL_SAC)
    params["runner"]["stats_interval"] = 0.05  # seconds between samples: several in a short run
    params["tracking"] = {"enabled": True}
    session = Session(root=tmp_path, name="s")
    write_params(session, "params.pendulum_sac", SMALL_SAC, params)
    tracker = open_tracker(session.path, session.info(), params, SMALL_SAC, record=session.update_info)
    runner = Runner(session, params, devices=DeviceChoice("cuda"), tracker=tracker)
    run_training(RunHandle(session, runner, tracker, None))
    run_id = json.loads((tmp_path / "s" / "session.json").read_text())["mlflow_run_id"]
    names = set(MlflowClient(mlflow_uri).get_run(run_id).data.metrics)
    assert {"system/gpu0/util_percent", "system/gpu0/mem_used_gb"} <= names, sorted(names)
