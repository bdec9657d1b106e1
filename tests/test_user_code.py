"""A user's own agent, in a folder of their own, works everywhere a shipped one does.

The project folder holds ``redq/agent.py`` (a subclass of the shipped SAC) and ``my_params.py``
naming it; training starts there, and resume, play and ``digideep runs`` then run from another
folder through the installed ``digideep`` command, as a user would.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from digideep.cli.runs import main_runs
from digideep.errors import UsageError
from digideep.utility.user_code import code_folders, use_code_folders

DIGIDEEP = Path(sys.executable).parent / "digideep"
FIX = "make it importable: pip install -e your package, or run from the folder that holds it"

AGENT = '''
"""A user's own agent: SAC under another name."""

from digideep.agents.sac import SAC


class REDQ(SAC):
    """SAC, as far as these tests care."""
'''

PARAMS = '''
"""SAC on Pendulum-v1, two tiny iterations, with the user's own agent class."""

cpanel = {
    "seed": 0,  # seed of everything
    "hidden_sizes": [16, 16],  # actor and critic widths
}


def gen_params(cpanel):
    seed = cpanel["seed"]
    deterministic = {"num_workers": 1, "n_steps": None, "do_reset": True, "deterministic": True}
    return {
        "session": {"torch_threads": 1, "device": "cpu"},
        "runner": {"number_epochs": 1, "epoch_size": 2, "test_interval": 1, "save_interval": 1,
                   "keep_checkpoints": 3, "max_wall_time": None, "max_iterations": None, "seed": seed},
        "env": {"model_name": "Pendulum-v1", "from_module": None, "vectorization": "sync",
                "wrappers": [], "vector_wrappers": [], "max_episode_steps": None},
        "explorer": {
            "train": {"num_workers": 1, "n_steps": 32, "seed": seed, "warm_start": 64},
            "test": {**deterministic, "n_episodes": 1, "seed": seed + 1, "win_size": 1},
            "eval": {**deterministic, "n_episodes": 1, "render": False, "seed": seed + 2},
        },
        "memory": {"train": {"type": "digideep.memory.Memory", "args": {"capacity": 200}}},
        "agents": {"agent": {"type": "redq.agent.REDQ", "memory": "train", "args": {
            "batch_size": 32, "learning_starts": 64, "updates_per_iteration": 32,
            "hidden_sizes": cpanel["hidden_sizes"], "seed": seed}}},
    }
'''


def digideep(cwd: Path, *args: str, module: bool = False, **env: str) -> subprocess.CompletedProcess:
    """The installed ``digideep`` command (or ``python -m digideep.main``) run in ``cwd``."""
    command = [sys.executable, "-m", "digideep.main"] if module else [str(DIGIDEEP)]
    variables = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # the embedded store
    variables.update(MUJOCO_GL="egl", PREFECT_SERVER_ANALYTICS_ENABLED="false", **env)
    return subprocess.run(
        [*command, *args], cwd=cwd, env=variables, capture_output=True, text=True, timeout=180
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A session trained one iteration (of two) from the user's project folder.

    ``untouched`` is a copy of that session that no test resumes.
    """
    root = tmp_path_factory.mktemp("user")
    project, elsewhere, sessions = root / "project", root / "elsewhere", root / "data" / "sessions"
    (project / "redq").mkdir(parents=True)
    (project / "redq" / "__init__.py").write_text("")
    (project / "redq" / "agent.py").write_text(textwrap.dedent(AGENT))
    (project / "my_params.py").write_text(textwrap.dedent(PARAMS))
    elsewhere.mkdir()
    result = digideep(
        project, "train", "--params", "my_params.py", "--no-prefect", "--session-path", str(sessions),
        "--session-name", "mine", DIGIDEEP_MAX_ITERATIONS="1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    shutil.copytree(sessions / "mine", sessions / "untouched")
    return {"project": project, "elsewhere": elsewhere, "sessions": sessions}


def test_the_session_records_the_folders_of_its_own_code(trained):
    session = trained["sessions"] / "mine"
    expected = {"my_params": str(trained["project"]), "redq": str(trained["project"])}
    assert json.loads((session / "session.json").read_text())["import_paths"] == expected
    runner = json.loads((session / "checkpoints" / "checkpoint-1" / "runner.json").read_text())
    assert runner["import_paths"] == expected  # a checkpoint carries them too


@pytest.mark.parametrize("module", [False, True], ids=["digideep", "python-m"])
def test_play_imports_the_agent_from_any_folder(trained, module):
    checkpoint = str(trained["sessions"] / "mine" / "checkpoints" / "checkpoint-1")
    args = ["--play", "--load-checkpoint", checkpoint] if module else ["play", checkpoint]
    result = digideep(trained["elsewhere"], *args, "--episodes", "1", module=module)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "episode 0: return" in result.stdout


def test_resume_imports_the_agent_from_any_folder(trained):
    sessions = trained["sessions"]
    result = digideep(trained["elsewhere"], "resume", "mine", "--session-path", str(sessions), "--no-prefect")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (sessions / "mine" / "done.json").exists()
    assert (sessions / "mine" / "checkpoints" / "checkpoint-2").is_dir()


def test_runs_with_the_session_path_finds_the_store_the_run_used(trained, monkeypatch, capsys):
    sessions = trained["sessions"]
    run_id = json.loads((sessions / "mine" / "session.json").read_text())["mlflow_run_id"]
    listed = digideep(trained["elsewhere"], "runs", "--session-path", str(sessions))
    assert listed.returncode == 0, listed.stderr
    assert "experiment my_params" in listed.stdout
    assert any(line.split()[:2] == [run_id, "mine"] for line in listed.stdout.splitlines()), listed.stdout
    monkeypatch.chdir(trained["elsewhere"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(UsageError, match="pass the --session-path the runs trained with"):
        main_runs([])  # ./data/mlflow.db: there is none here
    with pytest.raises(SystemExit):
        main_runs(["--help"])
    assert "'digideep runs --session-path P'" in " ".join(capsys.readouterr().out.split())


def test_a_recorded_folder_that_is_gone_fails_in_one_line(trained):
    project, sessions = trained["project"], trained["sessions"]
    moved = project.with_name("project-moved")
    project.rename(moved)
    try:
        checkpoint = str(sessions / "mine" / "checkpoints" / "checkpoint-1")
        played = digideep(trained["elsewhere"], "play", checkpoint, "--episodes", "1")
        resumed = digideep(trained["elsewhere"], "resume", "untouched", "--session-path", str(sessions),
                           "--no-prefect")  # fmt: skip
    finally:
        moved.rename(project)
    for result, session in ((played, "mine"), (resumed, "untouched")):
        assert result.returncode == 2
        assert result.stderr.splitlines()[-1] == (
            "digideep: error: cannot import agent 'agent' class 'redq.agent.REDQ' (No module named "
            f"'redq'): session '{sessions / session}' recorded module 'redq' in {project}, which no "
            f"longer exists; {FIX}"
        )
        assert "Traceback" not in result.stderr
    assert played.stderr.count("\n") == 1  # play checks before it opens anything: the one line only
    assert not (sessions / "untouched" / "done.json").exists()


def test_both_entry_points_import_a_dotted_params_module_from_the_current_folder(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "__init__.py").write_text("")
    (tmp_path / "experiments" / "knobs.py").write_text(textwrap.dedent(PARAMS))
    for module in (False, True):
        args = ["--params", "experiments.knobs", "--cpanel", '{"sede": 1}']
        result = digideep(tmp_path, *(args if module else ["train", *args]), module=module)
        assert result.returncode == 2  # found, imported, and its cpanel checked: not "not found"
        assert result.stderr == (
            "digideep: error: unknown cpanel key 'sede'; did you mean 'seed'? valid keys: hidden_sizes, seed\n"
        )


def test_installed_and_shipped_code_is_not_recorded():
    shipped = importlib.util.find_spec("params.pendulum_sac")  # the params installed with digideep
    tree = {
        "agents": {"agent": {"type": "digideep.agents.sac.SAC"}},
        "memory": {"train": {"type": "digideep.memory.Memory"}},
        "env": {"from_module": "json", "wrappers": [{"name": "gymnasium.wrappers.ClipAction"}]},
    }
    assert code_folders(tree, "params.pendulum_sac", shipped.origin) == {}


def test_a_users_packages_modules_and_params_file_are_recorded(tmp_path, monkeypatch):
    (tmp_path / "code" / "spaced").mkdir(parents=True)  # a namespace package: no __init__.py
    (tmp_path / "code" / "spaced" / "agent.py").write_text("class Mine: ...\n")
    (tmp_path / "code" / "my_envs.py").write_text("")
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "p.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    tree = {"agents": {"a": {"type": "spaced.agent.Mine"}}, "env": {"from_module": "my_envs"}}
    assert code_folders(tree, "p", tmp_path / "exp" / "p.py") == {
        "p": str(tmp_path / "exp"),
        "spaced": str(tmp_path / "code"),
        "my_envs": str(tmp_path / "code"),
    }


def test_code_missing_from_a_recorded_folder_that_exists_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "ghost").mkdir()
    (tmp_path / "ghost" / "__init__.py").write_text("")
    tree = {"env": {"wrappers": [{"name": "ghost.wrappers.Haunt"}]}}
    with pytest.raises(UsageError) as raised:
        use_code_folders({"ghost": str(tmp_path)}, tree, "session 'x'")
    assert str(raised.value) == (
        "cannot import env wrapper 'ghost.wrappers.Haunt' (module 'ghost' has no 'wrappers'): "
        f"imported from {tmp_path}, the folder session 'x' recorded for module 'ghost'; {FIX}"
    )
    with pytest.raises(UsageError, match=f"module 'gone' is no longer in {tmp_path}, the folder session 'x'"):
        use_code_folders({"gone": str(tmp_path)}, {"agents": {"a": {"type": "gone.A"}}}, "session 'x'")
    assert sys.path[0] == str(tmp_path)  # the recorded folder went first
