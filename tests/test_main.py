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
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_on_disk(params_project, args, message):
    result = run_main(params_project, *args)
    assert result.returncode == 2
    assert result.stderr == f"digideep: error: {message}\n"
    assert not (params_project / "data").exists()


def test_console_script_help_lists_the_subcommands(params_project):
    result = subprocess.run(
        [sys.executable, "-c", "from digideep.main import cli; cli(['--help'])"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    for command in ("train", "resume", "play", "runs"):
        assert command in result.stdout


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
