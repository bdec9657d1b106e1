"""Every shell command shown in README.md and docs/ is exercised, so the docs cannot rot.

Each command is either run here, as written, in a scratch project folder (placeholders such as
``<session>`` are filled from the sessions earlier commands created, and ``DIGIDEEP_MAX_ITERATIONS``
keeps long trainings to a few iterations), or it is listed in ``ELSEWHERE`` with the test or CI step
that exercises it. A new command in the docs fails this test until it is one or the other.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

from digideep_stack.local_stack import LocalStack
from tests.conftest import REPO
from tests.helpers import free_port

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# command pattern -> where it is exercised (a test "file::name", or ".ci/run")
ELSEWHERE = {
    r"make (test|lint|docs)$": ".ci/run",
    r"\.venv/bin/pytest tests/docs -q": ".ci/run",
    r"make test-slow": "tests/agents/test_learning.py::test_reaches_the_target_return",
    r"(nice -n 19 )?make prefect-up": "tests/flows/test_local_stack.py::test_local_stack_is_the_active_prefect_profile_until_sigterm_stops_it_and_its_children",
    r"make stack-(up|down)": "tests/stack/test_stack.py::test_make_stack_down_stops_every_process_and_frees_every_port",
    r"sudo make demo-cluster": "tests/stack/conftest.py::demo_cluster",
    r"ip netns pids dd-host-a \| xargs -r kill -9; ip netns del": "tests/stack/test_cluster.py::kill_with_ip_netns",
    r"\.venv/bin/prefect flow-run retry": "tests/stack/test_cluster.py::retry",
    r"set -a; \. data/stack/client\.env; set \+a$": "tests/stack/test_stack.py::test_the_documented_client_commands_run_a_deployment_with_its_artifacts_in_s3_and_no_secret_anywhere",
    r"export PREFECT_API_URL=": "tests/flows/conftest.py::shared_stack",
    r"\.venv/bin/prefect (server start|work-pool create|deploy --all|worker start)": "tests/flows/conftest.py::shared_stack",
    r"\.venv/bin/prefect deployment run 'train/pendulum-sac' --param session_path=s3://digideep/sessions$": "tests/stack/test_cluster.py::test_make_demo_cluster_makes_its_prefect_profile_active_and_writes_a_private_client_file",
    r"\.venv/bin/prefect deployment run 'train/": "tests/flows/test_train_flow.py::test_a_retried_run_resumes_from_its_checkpoint_and_matches_an_uninterrupted_one",
    r"\.venv/bin/prefect deployment run 'sweep/sweep'": "tests/flows/test_train_flow.py::test_a_sweep_of_two_runs_completes",
    r"\.venv/bin/python bench/bench_": "tests/docs/test_commands.py::test_benchmarks_run_in_quick_mode",
    r"\.venv/bin/prefect deployment run 'tune/": "tests/flows/test_tune.py::test_a_study_prunes_retries_and_continues_without_repeating_trials",
    # the shipped table's deployments: their matrices pass the benchmark's checks (running one takes days)
    r"\.venv/bin/prefect deployment run benchmark/mujoco-v5": "tests/flows/test_benchmark.py::test_each_shipped_benchmark_deployment_is_a_matrix_that_passes_its_checks",
    r"(\.venv/bin/)?digideep benchmark ": "tests/flows/test_benchmark.py::test_a_benchmark_killed_half_way_and_retried_runs_every_cell_once",
    r"export AWS_|.*s3://": "tests/docs/test_scaling_out.py::test_the_scaling_out_commands_train_and_resume_in_a_bucket",
    r"\.venv/bin/digideep report --benchmark": "tests/report/test_cli.py::test_report_of_a_benchmark",
    r"\.venv/bin/digideep (runs export|report --from) ": "tests/report/test_export.py::test_exports_of_split_cells_combine_into_the_report_of_one_store",
    r"(sudo )?apt-get install -y slurm-wlm munge$": ".ci/run",
    r"(sudo )?\.venv/bin/python -m digideep_stack\.slurm up|export SLURM_CONF=": "tests/slurm/conftest.py::slurm_cluster",
    r"(sinfo|squeue|scontrol|sacct)\b": "tests/slurm/test_requeue.py::job_state",
    r"\.venv/bin/digideep slurm (submit|resume) ": "tests/slurm/test_requeue.py::submit",
    r"\.venv/bin/digideep slurm benchmark ": "tests/slurm/test_benchmark.py::slurm_benchmark",
    r"\.venv/bin/digideep slurm tune ": "tests/slurm/test_tune.py::tune_command",
}  # fmt: skip


def shown_commands() -> list[tuple[str, str]]:
    """``(file, command)`` for every command line of the bash blocks of the docs, in order."""
    found = []
    for path in DOCS:
        for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", path.read_text(), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                command = re.split(r"\s+#\s", line)[0].strip()
                if command and not command.startswith("#"):
                    found.append((path.name, " ".join(command.split())))
    return found


def elsewhere(command: str) -> str | None:
    return next((where for pattern, where in ELSEWHERE.items() if re.match(pattern, command)), None)


def test_every_command_is_run_here_or_covered_elsewhere():
    unknown = [
        (f, c) for f, c in shown_commands() if not elsewhere(c) and not any(r.match(c) for r in RUN_HERE)
    ]
    assert not unknown, f"commands in the docs that no test exercises: {unknown}"
    for where in set(ELSEWHERE.values()) - {".ci/run"}:
        file, name = where.split("::")
        assert re.search(rf"def {name}\b", (REPO / file).read_text()), f"{where} does not exist"
    assert "make test" in (REPO / ".ci/run").read_text() and "make docs" in (REPO / ".ci/run").read_text()


# commands run here, in the order the checks below need them
RUN_HERE = [
    re.compile(p)
    for p in (
        r"make train",
        r"\.venv/bin/digideep train ",
        r"\.venv/bin/python -m digideep\.main --params ",
        r"\.venv/bin/python flows/train\.py ",
        r"\.venv/bin/python docs/examples/",
        r"\.venv/bin/digideep (play|resume) ",
        r"\.venv/bin/python -m digideep\.main --(play|resume) ",
        r"\.venv/bin/digideep runs",
        r"\.venv/bin/digideep envs ",
        r"\.venv/bin/python -m digideep\.environment\.play ",
        r"make mlflow-ui",
        r"\.venv/bin/mlflow ui ",
    )
]
SERVERS = ("make mlflow-ui", ".venv/bin/mlflow ui ")
LONG = re.compile(r"--params params\.|^make train")


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory):
    """One Prefect server for every command (each would otherwise start an embedded one)."""
    stack = LocalStack(port=free_port(), home=tmp_path_factory.mktemp("prefect-home"))
    try:
        stack.start_server()
        yield stack.api_url
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A scratch project folder: the repository's code and venv linked in, its own data/."""
    folder = tmp_path_factory.mktemp("project")
    for name in ("params", "flows", "docs", "Makefile", "pyproject.toml", ".venv", "prefect.yaml"):
        (folder / name).symlink_to(REPO / name)
    (folder / "data").mkdir()
    return folder


def fill(command: str, folder: Path) -> str:
    """Replace the docs' placeholders with a real session, checkpoint and MLflow runs."""
    sessions = sorted((folder / "data" / "sessions").glob("*/checkpoints/checkpoint-*"), key=os.path.getmtime)
    if "<" in command or "RUN_ID" in command:
        checkpoint = sessions[-1]
        command = command.replace("data/sessions/<session>/checkpoints/checkpoint-<N>", str(checkpoint))
        command = command.replace("<session>", checkpoint.parent.parent.name)
        run_ids = [
            line.split()[0]
            for line in subprocess.run(
                [".venv/bin/python", "-c", RUN_IDS], cwd=folder, capture_output=True, text=True, check=True
            ).stdout.splitlines()
        ]
        command = command.replace("RUN_ID RUN_ID", " ".join(run_ids[:2]))
    return command


RUN_IDS = (
    "from mlflow import MlflowClient\n"
    "c = MlflowClient('sqlite:///data/mlflow.db')\n"
    "for r in c.search_runs([e.experiment_id for e in c.search_experiments()]): print(r.info.run_id)\n"
)


def install_is_current() -> bool:
    """Whether ``make`` sees the venv as installed (its stamp newer than pyproject.toml)."""
    stamp = REPO / ".venv" / "bin" / ".installed"
    return stamp.exists() and stamp.stat().st_mtime >= (REPO / "pyproject.toml").stat().st_mtime


def serve_and_stop(command: str, folder: Path, env: dict) -> None:
    """Start a UI command, wait until it answers over HTTP, stop it."""
    port = free_port()
    command = (
        command.replace("--port 5000", f"--port {port}")
        if "--port" in command
        else f"{command} MLFLOW_PORT={port}"
    )
    process = subprocess.Popen(shlex.split(command), cwd=folder, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                    assert response.status == 200
                    return
            except OSError:
                assert process.poll() is None, f"'{command}' exited with {process.returncode}"
                time.sleep(0.5)
        raise AssertionError(f"'{command}' did not answer on port {port}")
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)


def test_the_commands_of_the_docs_work_as_written(project, prefect_api):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_API"))},
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PYTHONPATH": str(project),
        "PREFECT_API_URL": prefect_api,
    }
    commands = [c for _, c in shown_commands() if any(r.match(c) for r in RUN_HERE) and not elsewhere(c)]
    seen: set[str] = set()
    ran, skipped = [], []
    # trainings first (they make the sessions and runs the other commands use), then the rest
    ordered = [c for c in commands if "train" in c or "--params" in c] + [
        c for c in commands if not ("train" in c or "--params" in c)
    ]
    for command in ordered:
        if command in seen:
            continue
        seen.add(command)
        if command.startswith("make ") and not install_is_current():
            skipped.append(command)
            continue  # make would reinstall the shared .venv from the scratch folder; CI's make test made it current
        if command.startswith(SERVERS):
            serve_and_stop(command, project, env)
            ran.append(command)
            continue
        filled = fill(command, project)
        # the shipped parameter files train for minutes to hours: a few iterations show they work;
        # the guide's examples are quick and run in full (later commands use their checkpoints)
        capped = {**env, "DIGIDEEP_MAX_ITERATIONS": "2"} if LONG.search(command) else env
        result = subprocess.run(
            filled, shell=True, cwd=project, env=capped, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"'{filled}' failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        if command.startswith((".venv/bin/digideep runs compare",)):
            png = re.search(r"wrote (\S+\.png)", result.stdout)
            assert png and (project / png.group(1)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        ran.append(command)
    if skipped:  # shown in pytest's summary, never counted as run
        warnings.warn(f"not run here (the .venv is not installed by make): {skipped}", stacklevel=1)
    assert len(ran) >= 10, f"only {len(ran)} commands ran; skipped: {skipped}"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "bench").glob("bench_*.py")))
def test_benchmarks_run_in_quick_mode(script):
    source = (REPO / "bench" / script).read_text()
    args = ["--quick"] if "--quick" in source else []
    result = subprocess.run(
        [sys.executable, f"bench/{script}", *args], cwd=REPO, capture_output=True, text=True, timeout=1800
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip(), "a benchmark prints its figures"
