"""The environment play tool: listing ids with their spaces, running random or zero actions, bad ids."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from digideep.environment.play import play_env
from digideep.errors import UsageError

from .conftest import TEST_ENVS

REPO = Path(__file__).resolve().parents[2]
RUN_LINE = re.compile(r"run (\d+): return (-?\d+\.\d\d), length (\d+) \((.+)\), \d+ steps/s")


def play(*args: str, console: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the tool as a user does: ``python -m digideep.environment.play`` or ``digideep envs``."""
    if console:
        command = [
            sys.executable,
            "-c",
            "import sys; from digideep.main import cli; sys.exit(cli(sys.argv[1:]))",
        ]
        command += ["envs", *args]
    else:
        command = [sys.executable, "-m", "digideep.environment.play", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_listing_shows_the_spaces_of_matching_ids_and_errors_per_id() -> None:
    result = play("--list-include", "^(Pendulum-v1|Hopper-v5|GymV26Environment-v0)$")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["GymV26Environment-v0", "Hopper-v5", "Pendulum-v1"]
    by_id = {line.split()[0]: line for line in lines[:-1]}
    assert "obs Box(-inf, inf, (11,), float64)  act Box(-1.0, 1.0, (3,), float32)" in by_id["Hopper-v5"]
    assert "act Box(-2.0, 2.0, (1,), float32)" in by_id["Pendulum-v1"]
    # an id that cannot be built is listed with its error; the listing goes on
    assert "error: ImportError: " in by_id["GymV26Environment-v0"]
    assert lines[-1] == "3 environment(s)"


def test_listing_excludes_and_imports_custom_modules() -> None:
    result = play(
        "--list-include", "^Digi", "--list-exclude", "Opaque|Image|Ticks", "--from-module", TEST_ENVS
    )
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == [
        "DigiDictObs-v0",
        "DigiTwoAgent-v0",
        "2",
    ]


def test_running_prints_return_length_and_speed_per_run_and_repeats_with_the_seed() -> None:
    first = play("--model", "Pendulum-v1", "--runs", "2", "--n-step", "500")
    assert first.returncode == 0, first.stderr
    runs = [RUN_LINE.fullmatch(line) for line in first.stdout.splitlines()]
    assert all(runs) and [m.group(1) for m in runs] == ["0", "1"]
    # Pendulum's own time limit (200) ends each run before --n-step
    assert [(m.group(3), m.group(4)) for m in runs] == [("200", "truncated")] * 2
    assert runs[0].group(2) != runs[1].group(2)  # run i is seeded with seed + i
    again = play("--model", "Pendulum-v1", "--runs", "2", "--n-step", "500")
    assert [RUN_LINE.fullmatch(line).group(2) for line in again.stdout.splitlines()] == [
        m.group(2) for m in runs
    ]


def test_console_script_runs_a_mujoco_env_cut_at_n_step() -> None:
    result = play("--model", "HalfCheetah-v5", "--n-step", "30", console=True)
    assert result.returncode == 0, result.stderr
    match = RUN_LINE.fullmatch(result.stdout.strip())
    assert match and match.group(3) == "30" and match.group(4) == "cut at 30 steps"


def test_zero_actions_cost_nothing_where_random_ones_do() -> None:
    # MountainCarContinuous charges 0.1 * action^2 per step and cannot reach the goal in 50 steps
    (zero,) = play_env("MountainCarContinuous-v0", n_step=50, no_action=True)
    (random,) = play_env("MountainCarContinuous-v0", n_step=50)
    assert (zero.episode_return, zero.length, zero.ending) == (0.0, 50, "cut")
    assert random.episode_return < 0.0


def test_an_atari_run_is_cut_after_n_agent_steps_not_emulator_frames() -> None:
    pytest.importorskip("ale_py")
    # the emulator runs with frameskip=1 under a 4-frame skip: a time limit there would cut at 50 / 4
    (run,) = play_env("ALE/Pong-v5", n_step=50)
    assert (run.length, run.ending) == (50, "cut")


def test_custom_env_from_module_runs_to_its_own_end() -> None:
    # DigiOpaque-v0 never terminates (reward 0); its registered time limit is 50
    results = list(play_env("DigiOpaque-v0", from_module=TEST_ENVS, runs=2, n_step=100))
    assert [(r.episode_return, r.length, r.ending) for r in results] == [(0.0, 50, "truncated")] * 2


def test_video_keeps_every_run_including_cut_ones(tmp_path: Path) -> None:
    result = play("--model", "CartPole-v1", "--runs", "2", "--n-step", "3", "--video", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["play-w0-ep0000.mp4", "play-w0-ep0001.mp4"]
    assert all(p.stat().st_size > 0 for p in tmp_path.iterdir())


@pytest.mark.parametrize("console", [False, True])
def test_unknown_id_is_one_line_naming_the_closest_ids(console: bool) -> None:
    result = play("--model", "Pendulm-v1", console=console)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "digideep: error: unknown environment 'Pendulm-v1'; "
        "closest registered ids: Pendulum-v1, phys2d/Pendulum-v0, InvertedPendulum-v5"
    ]


def _needs_a_missing_package(**kwargs: object) -> gym.Env:
    raise ImportError("No module named 'not_installed_anywhere'")


def test_bad_arguments_are_usage_errors() -> None:
    with pytest.raises(
        UsageError, match="unknown environment 'qqqqqqqqqqqq'; list the ids with --list-include"
    ):  # close to no registered id, whichever families (Atari, dm_control) earlier tests registered
        list(play_env("qqqqqqqqqqqq"))
    with pytest.raises(UsageError, match="--runs and --n-step must be >= 1"):
        list(play_env("Pendulum-v1", runs=0))
    # registered, but needs a package that is not installed (whatever this machine has installed)
    gym.register("NeedsMissingPackage-v0", entry_point=_needs_a_missing_package)
    try:
        with pytest.raises(
            UsageError,
            match=r"^environment 'NeedsMissingPackage-v0' could not be built: ImportError: "
            r"No module named 'not_installed_anywhere'",
        ):
            list(play_env("NeedsMissingPackage-v0"))
    finally:
        del gym.registry["NeedsMissingPackage-v0"]
    result = play("--list-include", "(")
    assert result.returncode == 2
    assert result.stderr.startswith("digideep: error: --list-include '(' is not a valid regular expression")


@pytest.mark.parametrize(
    ("pattern", "package", "expected"),
    [
        ("^dm_control/cartpole-(balance|swingup)-v0$", "shimmy", 2),
        ("^ALE/(Pong|Breakout)-v5$", "ale_py", 2),
    ],
)
def test_listing_registers_the_on_demand_suites_it_is_asked_for(
    pattern: str, package: str, expected: int
) -> None:
    pytest.importorskip(package)
    result = play("--list-include", pattern, console=True)
    assert result.returncode == 0, result.stderr
    assert f"{expected} environment(s)" in result.stdout, result.stdout
    assert result.stdout.count(" act ") == expected and "error" not in result.stdout
