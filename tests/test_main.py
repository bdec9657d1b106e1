"""The command line: bad input gives one line on stderr (and nothing else), exit code 2, no session folder."""

import subprocess
import sys

import pytest


def run_main(cwd, *args, module="digideep.main"):
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--params", "params.nope"], "params module 'params.nope' not found; available: params.demo"),
        (
            ["--params", "params.demo", "--cpanel", '{"seed": 1,}'],
            "invalid --cpanel JSON at line 1 column 12 (char 11): Expecting property name enclosed in double quotes",
        ),
        (
            ["--params", "params.demo", "--cpanel", '{"sead": 1}'],
            "unknown cpanel key 'sead'; did you mean 'seed'? "
            "valid keys: deterministic_test, hidden_sizes, lr, model_name, number_epochs, seed",
        ),
        (
            ["--params", "params.demo", "--cpanel", '{"seed": "one"}'],
            "cpanel key 'seed' expects int, got string (\"one\")",
        ),
        (
            ["--params", "params.demo", "--trial", '{"study": "s",'],
            "invalid --trial JSON at char 14: Expecting property name enclosed in double quotes",
        ),
        (
            ["--params", "params.demo", "--trial", '["s", 3]'],
            '--trial must be a JSON object with the keys storage, study and number, got ["s", 3]',
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_on_disk(params_project, args, message):
    result = run_main(params_project, *args)
    assert result.returncode == 2
    assert result.stderr == f"digideep: error: {message}\n"
    assert not (params_project / "data").exists()


@pytest.mark.parametrize(
    ("argv", "commands"),
    [
        (["--help"], ("train", "resume", "play", "runs")),
        (["runs", "--help"], ("runs compare", "runs register", "runs sync", "runs ui")),
    ],
    ids=["digideep", "digideep runs"],
)
def test_console_script_help_lists_the_subcommands(argv, commands):
    result = subprocess.run(
        [sys.executable, "-c", f"from digideep.main import cli; cli({argv!r})"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    for command in commands:
        assert command in result.stdout, result.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["report", "--help"],
        ["benchmark", "--help"],
        ["slurm", "--help"],
        ["runs", "--help"],
        ["runs", "export", "--help"],
        ["runs", "compare"],  # a usage error: no run given
    ],
)
def test_the_parser_loads_no_training_library(argv):
    """Help and bad input answer without torch, MLflow or Prefect (seconds of imports): those load
    when a command that needs them runs."""
    code = (
        "import sys\n"
        "from digideep.main import cli\n"
        "try:\n"
        f"    cli({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'mlflow', 'prefect'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-2000:] + result.stderr[-2000:]


def test_existing_session_name_is_refused_without_touching_it(params_project):
    existing = params_project / "data" / "sessions" / "taken"
    existing.mkdir(parents=True)
    (existing / "keep.txt").write_text("precious")
    result = run_main(params_project, "--params", "params.demo", "--session-name", "taken")
    assert result.returncode == 2
    assert result.stderr == (
        "digideep: error: session 'data/sessions/taken' already exists; "
        "resume it with 'digideep resume' or choose another --session-name\n"
    )
    assert (existing / "keep.txt").read_text() == "precious"


# -- --dry-run, --msg, --params FILE.py and the envs subcommand -----------------------------------
SMALL_RUN = '{"n_steps": 20, "learning_starts": 20, "batch_size": 8, "hidden_sizes": [8], "test_episodes": 1}'


@pytest.fixture
def sac_project(params_project):
    """The scratch project with the shipped ``pendulum_sac`` parameter file (and ``_common``), and a
    copy of it outside the project at ``elsewhere/my_sac.py`` whose seed comes from a module beside it."""
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    for name in ("_common.py", "pendulum_sac.py"):
        shutil.copy(repo / "params" / name, params_project / "params" / name)
    outside = params_project / "elsewhere"
    outside.mkdir()
    (outside / "my_knobs.py").write_text("SEED = 7\n")
    text = (repo / "params" / "pendulum_sac.py").read_text()
    (outside / "my_sac.py").write_text(
        text.replace('"seed": 0,', '"seed": my_knobs.SEED,').replace(
            "from params._common import", "import my_knobs\nfrom params._common import"
        )
    )
    return params_project


def _tree(folder):
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def test_dry_run_builds_everything_prints_the_params_and_writes_nothing(sac_project, run_env):
    import json

    data = sac_project / "data"
    (data / "sessions" / "earlier").mkdir(parents=True)
    (data / "sessions" / "earlier" / "session.json").write_text("{}")
    before = _tree(sac_project)
    result = subprocess.run(
        [sys.executable, "-m", "digideep.main", "--params", "params.pendulum_sac", "--dry-run"],
        cwd=sac_project,
        capture_output=True,
        text=True,
        timeout=300,
        env={**run_env, "MLFLOW_TRACKING_URI": f"sqlite:///{sac_project / 'mlflow.db'}"},
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["params_module"] == "params.pendulum_sac"
    assert printed["params"]["env"]["model_name"] == "Pendulum-v1"
    assert "built 1 agent(s), 1 memory(ies), explorers ['test', 'train']" in result.stderr
    assert _tree(sac_project) == before  # no session folder, no MLflow store, nothing else
    assert sorted(p.name for p in (data / "sessions").iterdir()) == ["earlier"]


def test_dry_run_still_refuses_bad_params(sac_project):
    result = run_main(sac_project, "--params", "params.pendulum_sac", "--dry-run", "--cpanel", '{"sead": 1}')
    assert result.returncode == 2 and "unknown cpanel key 'sead'" in result.stderr
    assert not (sac_project / "data").exists()
    (sac_project / "data" / "sessions" / "taken").mkdir(parents=True)
    taken = run_main(sac_project, "--params", "params.pendulum_sac", "--dry-run", "--session-name", "taken")
    assert taken.returncode == 2 and "already exists" in taken.stderr  # as the real run would say


def test_params_file_outside_the_project_loads_with_its_neighbours(sac_project):
    import json

    result = run_main(sac_project, "--params", "elsewhere/my_sac.py", "--dry-run")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["params_module"] == "my_sac"
    assert printed["cpanel"]["seed"] == 7  # from elsewhere/my_knobs.py, imported beside the file
    missing = run_main(sac_project, "--params", "elsewhere/nope.py")
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        .splitlines()[-1]
        .startswith("digideep: error: parameter file 'elsewhere/nope.py' not found")
    )


def test_msg_reaches_session_json_and_the_mlflow_note(sac_project, run_env):
    import json

    from mlflow import MlflowClient

    message = "baseline: SAC on Pendulum, 1 iteration"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "digideep.main",
            "--params",
            str(sac_project / "elsewhere" / "my_sac.py"),  # an absolute path works too
            "--cpanel",
            SMALL_RUN,
            "--session-name",
            "noted",
            "--no-prefect",
            "--msg",
            message,
        ],
        cwd=sac_project,
        capture_output=True,
        text=True,
        timeout=300,
        env={**run_env, "DIGIDEEP_MAX_ITERATIONS": "1"},
    )
    assert result.returncode == 0, result.stderr
    info = json.loads((sac_project / "data" / "sessions" / "noted" / "session.json").read_text())
    assert info["description"] == message and info["params_module"] == "my_sac"
    run = MlflowClient(run_env["MLFLOW_TRACKING_URI"]).get_run(info["mlflow_run_id"])
    assert run.data.tags["mlflow.note.content"] == message
    # what the params left to the machine is recorded as it was decided, and said once
    assert run.data.params["agents/agent/resolved/update_mode"] == "eager"
    assert result.stderr.count("agent 'agent': the update runs eager (CPU: the step is bound") == 1


def test_device_and_deterministic_reach_the_run_as_arguments(sac_project, run_env):
    """``--device cpu --deterministic`` on the plain loop, no DIGIDEEP_* variable in the environment:
    the agent is on the CPU as requested (not by auto) and deterministic mode is on (log.txt)."""
    env = {key: value for key, value in run_env.items() if not key.startswith("DIGIDEEP_")}
    one_iteration = SMALL_RUN.replace("{", '{"number_epochs": 1, "epoch_size": 1, ', 1)
    result = run_main_with(
        sac_project,
        env,
        *("--params", "params.pendulum_sac", "--cpanel", one_iteration, "--session-name", "dev"),
        *("--no-prefect", "--device", "cpu", "--deterministic"),
    )
    assert result.returncode == 0, result.stderr
    text = (sac_project / "data" / "sessions" / "dev" / "log.txt").read_text()
    assert "agent 'agent' (SAC) on cpu: requested 'cpu'" in text
    assert "deterministic mode: deterministic algorithms on" in text


def run_main_with(cwd, env, *args):
    return subprocess.run(
        [sys.executable, "-m", "digideep.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_envs_subcommand_is_listed_and_runs():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from digideep.main import cli; sys.exit(cli(sys.argv[1:]))",
            "--help",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "envs" in result.stdout
    listing = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from digideep.main import cli; sys.exit(cli(sys.argv[1:]))",
            "envs",
            "--list-include",
            "^Pendulum-v1$",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.splitlines()[0].startswith("Pendulum-v1 ")


def test_the_installed_command_trains_and_lists_runs_from_any_folder(tmp_path, run_env):
    """Installed from its wheel, with no repository in sight, ``digideep train`` and ``runs`` work anywhere."""
    import json
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    source, site, elsewhere = tmp_path / "source", tmp_path / "site", tmp_path / "elsewhere"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, source / name)
    for name in ("digideep", "flows", "params"):  # a build in the repository would leave build/ there
        shutil.copytree(repo / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    offline = ["--no-deps", "--no-index"]
    subprocess.run(
        [*pip, "wheel", *offline, "--no-build-isolation", "-w", tmp_path / "dist", source], check=True
    )
    (wheel,) = (tmp_path / "dist").glob("digideep-*.whl")
    subprocess.run([*pip, "install", *offline, "--target", site, wheel], check=True)
    elsewhere.mkdir()
    env = {k: v for k, v in run_env.items() if k != "MLFLOW_TRACKING_URI"}  # the store under ./data
    env.update(PYTHONPATH=str(site), DIGIDEEP_MAX_ITERATIONS="1")

    def digideep(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [site / "bin" / "digideep", *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import digideep, flows.train, params.pendulum_sac as p; print(p.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == str(site / "params" / "pendulum_sac.py")  # not the repository's
    trained = digideep("train", "--params", "params.pendulum_sac", "--cpanel", SMALL_RUN, "--session-name", "far",
                       "--no-prefect")  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    session = elsewhere / "data" / "sessions" / "far"
    assert [p.name for p in (session / "checkpoints").iterdir()] == ["checkpoint-1"]
    listed = digideep("runs")
    assert listed.returncode == 0, listed.stderr
    run_id = json.loads((session / "session.json").read_text())["mlflow_run_id"]
    assert "experiment params.pendulum_sac" in listed.stdout, listed.stdout
    assert any(line.split()[:2] == [run_id, "far"] for line in listed.stdout.splitlines()), listed.stdout


# -- faults: each is one line on stderr, exit code 2, and nothing on disk ------------------------
def assert_refused(result, message, project):
    """Exit code 2, stderr exactly ``digideep: error: <message>``, and no data folder made."""
    assert (result.returncode, result.stderr) == (2, f"digideep: error: {message}\n"), result.stderr[-3000:]
    assert not (project / "data").exists()


BROKEN_FILES = {
    "broken": 'cpanel = {"seed": 0\n\n\ndef gen_params(cpanel):\n    return {}\n',
    "raising": 'cpanel = {"seed": 0}\n\n\ndef gen_params(cpanel):\n    return {"seed": 1 / 0}\n',
    "_helper": "def section(cpanel):\n    return {'size': cpanel['size']}\n",
    "uses_helper": "from params._helper import section\n\ncpanel = {'seed': 0}\n\n\n"
    "def gen_params(cpanel):\n    return {'runner': section(cpanel)}\n",
}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "params.broken",
            "params module 'params.broken' does not load: SyntaxError: '{' was never closed (params/broken.py, line 1)",
        ),
        (
            "params.raising",
            "gen_params() of 'params.raising' failed: ZeroDivisionError: division by zero (params/raising.py, line 5)",
        ),
        (  # raised in a helper beside the file: the helper's line
            "params.uses_helper",
            "gen_params() of 'params.uses_helper' failed: KeyError: 'size' (params/_helper.py, line 2)",
        ),
        (
            "elsewhere/raising.py",
            "gen_params() of 'raising' failed: ZeroDivisionError: division by zero (elsewhere/raising.py, line 5)",
        ),
    ],
)
def test_a_parameter_file_that_fails_is_named_with_its_line(params_project, name, message):
    (params_project / "elsewhere").mkdir()
    for stem, text in BROKEN_FILES.items():
        (params_project / "params" / f"{stem}.py").write_text(text)
    (params_project / "elsewhere" / "raising.py").write_text(BROKEN_FILES["raising"])
    assert_refused(run_main(params_project, "--params", name, "--no-prefect"), message, params_project)


@pytest.mark.parametrize(
    ("cpanel", "message"),
    [
        ({"epoch_size": 0}, "cpanel key 'epoch_size' must be at least 1, got 0"),
        ({"n_steps": -5}, "cpanel key 'n_steps' must be at least 1, got -5"),
        ({"lr": -1}, "cpanel key 'lr' must be greater than 0, got -1.0"),
        ({"number_epochs": -3}, "cpanel key 'number_epochs' must be at least 1, got -3"),
    ],
)
def test_sizes_and_counts_out_of_bounds_are_refused_before_anything_is_written(
    sac_project, run_env, cpanel, message
):
    import json

    result = subprocess.run(
        [sys.executable, "-m", "digideep.main", "--params", "params.pendulum_sac", "--no-prefect",
         "--cpanel", json.dumps(cpanel)],
        cwd=sac_project, capture_output=True, text=True, timeout=300,
        env={**run_env, "DIGIDEEP_MAX_ITERATIONS": "1"},  # should a refusal regress: one iteration, not ten epochs
    )  # fmt: skip
    assert_refused(result, message, sac_project)


def test_a_session_path_that_is_a_file_is_refused(params_project):
    (params_project / "taken").write_text("a file")
    assert_refused(
        run_main(params_project, "--params", "params.demo", "--no-prefect", "--session-path", "taken"),
        "--session-path 'taken' is a file, not a folder; pass a folder to hold the sessions",
        params_project,
    )
    assert_refused(
        run_main(
            params_project, "--params", "params.demo", "--no-prefect", "--session-path", "taken/sessions"
        ),
        "--session-path 'taken/sessions' lies below 'taken', which is a file, not a folder; "
        "pass a folder to hold the sessions",
        params_project,
    )
    assert (params_project / "taken").read_text() == "a file"


def _as_user(args):
    """``args`` run without root's right to write anywhere: as is for another user; for root in a
    user namespace of its own (``unshare -U``), where file permissions hold for it too."""
    import os
    import shutil

    if os.geteuid() != 0:
        return list(args)
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-U", "true"]).returncode != 0:
        pytest.skip("running as root without 'unshare -U': a read-only folder is writable for root")
    return ["unshare", "-U", *args]


def test_a_read_only_session_path_is_refused(params_project):
    locked = params_project / "locked"
    locked.mkdir(mode=0o555)
    result = subprocess.run(
        _as_user([sys.executable, "-m", "digideep.main", "--params", "params.demo", "--no-prefect",
                  "--session-path", "locked/sessions"]),
        cwd=params_project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    message = (
        "--session-path 'locked/sessions' cannot be written (no write permission on 'locked'); "
        "pass a folder you can write to"
    )
    assert_refused(result, message, params_project)
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "/tmp/x"])
def test_a_session_name_is_one_folder_name(params_project, name):
    result = run_main(params_project, "--params", "params.demo", "--no-prefect", "--session-name", name)
    message = (
        f"session name '{name}' must be one folder name, with no '/' and not '..'; "
        "choose the folder with --session-path and the name with --session-name, e.g. my-run"
    )
    assert_refused(result, message, params_project)
    assert not (params_project / "x").exists()  # where ../../x would have gone


def test_an_mlflow_server_that_does_not_answer_leaves_nothing(sac_project, run_env):
    from tests.helpers import free_port

    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for driver in (["--no-prefect"], []):  # the plain loop, and the Prefect flow
        result = subprocess.run(
            [sys.executable, "-m", "digideep.main", "--params", "params.pendulum_sac", "--session-name", "m1",
             "--cpanel", SMALL_RUN, *driver],
            cwd=sac_project, capture_output=True, text=True, timeout=300,
            env={**run_env, "MLFLOW_TRACKING_URI": uri, "DIGIDEEP_MAX_ITERATIONS": "1"},
        )  # fmt: skip
        assert result.returncode == 2, result.stderr[-3000:]
        assert result.stderr.startswith(f"digideep: error: MLflow tracking at {uri} does not answer (")
        assert result.stderr.endswith(
            "; check that the server is reachable, point MLFLOW_TRACKING_URI at one that is, or turn tracking off\n"
        )
        assert result.stderr.count("\n") == 1
        assert not (sac_project / "data").exists()  # no session: the same command works once the server is up


RESUME_REFUSAL = (
    "cannot be used with resume: a resumed session keeps its own name, params, cpanel and description "
    "(its params.json); to change them, train a new session with --params"
)


@pytest.mark.parametrize(
    ("args", "given"),
    [
        (["--resume", "s1", "--cpanel", '{"seed": 1}'], "--cpanel"),
        (["--resume", "s1", "--params", "params.demo"], "--params"),
        (["--resume", "s1", "--session-name", "s2"], "--session-name"),
        (
            ["--resume", "s1", "--params", "params.demo", "--cpanel", "{}", "--msg", "x"],
            "--params and --cpanel and --msg",
        ),
    ],
)
def test_resume_refuses_the_options_of_a_new_run(params_project, args, given):
    assert_refused(run_main(params_project, *args), f"{given} {RESUME_REFUSAL}", params_project)


def test_the_resume_command_refuses_the_options_of_a_new_run(params_project):
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from digideep.main import cli; sys.exit(cli(sys.argv[1:]))",
         "resume", "s1", "--cpanel", '{"seed": 1}', "--session-name", "s2"],
        cwd=params_project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert_refused(result, f"--cpanel and --session-name {RESUME_REFUSAL}", params_project)


@pytest.mark.parametrize("entry", [["resume", "nope"], ["--resume", "nope"]], ids=["digideep", "main"])
def test_resuming_a_session_that_does_not_exist_is_one_line_without_a_prefect_server(params_project, entry):
    code = f"from digideep.main import {'cli' if entry[0] == 'resume' else 'main'} as run; raise SystemExit(run({entry!r}))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=params_project, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr == (
        "digideep: error: session 'data/sessions/nope' does not exist; list sessions with 'ls data/sessions'\n"
    )
    assert not (params_project / "data").exists()


def test_the_cli_turns_prefect_telemetry_off_unless_the_user_chose(monkeypatch):
    """Off-line, a temporary Prefect server's telemetry logs an ERROR line at every run."""
    import argparse
    import os

    from digideep.main import _run

    def seen(args):
        args.value = os.environ.get("PREFECT_SERVER_ANALYTICS_ENABLED")
        return 0

    monkeypatch.delenv("PREFECT_SERVER_ANALYTICS_ENABLED", raising=False)
    args = argparse.Namespace(log_level="WARNING")
    _run(seen, args)
    assert args.value == "false"
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "true")
    _run(seen, args)
    assert args.value == "true"
