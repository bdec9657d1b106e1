"""``digideep report`` end to end on MLflow runs made per the benchmark contract, and its refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from digideep.main import cli
from tests.report.runs import linear_curve, make_benchmark

SAC, TD3 = "params.pendulum_sac", "params.pendulum_td3"
FINAL = {  # the eval/return at the budget of seed 0; seed s adds 10 * s
    (SAC, "Pendulum-v1"): -200.0,
    (TD3, "Pendulum-v1"): -140.0,
    (SAC, "Hopper-v5"): 1000.0,
    (TD3, "Hopper-v5"): 800.0,
}
BUDGET = 20000  # rl-zoo's Pendulum-v1 budget, so its published values stand beside ours
FIGURES = {"aggregates.png", "performance_profile.png", "sample_efficiency.png", "improvement.png"}


@pytest.fixture
def client(mlflow_uri: str) -> MlflowClient:
    return MlflowClient(mlflow_uri)


def _report(mlflow_uri: str, out: Path, *args: str) -> int:
    return cli(["report", "--tracking-uri", mlflow_uri, "--out", str(out), "--reps", "200", *args])


def test_report_of_a_benchmark(
    client: MlflowClient, mlflow_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cells = [(a, e, s) for (a, e) in FINAL for s in range(3)]
    name, parent = make_benchmark(
        client, cells, linear_curve(FINAL), 5000, BUDGET, artifacts=tmp_path / "artifacts"
    )
    by_seed = {int(r.data.tags["seed"]): r.info.run_id for r in _cell_runs(client, name, SAC, "Pendulum-v1")}
    client.set_tag(by_seed[1], "digideep.resumes", "2")  # continued twice from a checkpoint
    client.delete_tag(by_seed[2], "digideep.resumes")  # tracked before resumes were counted
    out = tmp_path / "report"
    assert _report(mlflow_uri, out, "--benchmark", name, "--compare", TD3, SAC) == 0
    printed = capsys.readouterr().out
    assert "resumes (seed: count)" in printed.splitlines()[2]
    rows = {
        tuple(line.split()[:3]): line for line in printed.splitlines() if line.startswith(("Hopper", "Pend"))
    }
    assert set(rows) == {(e, a, "3") for (a, e) in FINAL}
    for (algorithm, env), final in FINAL.items():
        assert rows[(env, algorithm, "3")].split()[3] == f"{final + 10:.1f}"  # mean of seeds 0, 1, 2
    sac_pendulum = rows[("Pendulum-v1", SAC, "3")]
    assert "-157.0 (rl-zoo SAC, Pendulum-v1)" in sac_pendulum and sac_pendulum.endswith("BELOW")
    td3_pendulum = rows[("Pendulum-v1", TD3, "3")]  # -130 is above rl-zoo's -151.9: no mark
    assert "-151.9 (rl-zoo TD3, Pendulum-v1)" in td3_pendulum and "BELOW" not in td3_pendulum
    assert "0: -200.0, 1: -190.0, 2: -180.0" in sac_pendulum  # each run's score, by seed
    assert "0: 0, 1: 2, 2: ?" in sac_pendulum  # each run's resumes, by seed
    assert "0: 0, 1: 0, 2: 0" in rows[("Pendulum-v1", TD3, "3")]
    assert rows[("Hopper-v5", SAC, "3")].split()[-1] == "-"  # rl-zoo's Hopper is at 1M frames, not 20k
    assert "3 seeds in the smallest cell: with fewer than 5" in printed
    assert "Pendulum-v1: 0 is the random policy's -1207.6" in printed  # what 0 and 1 normalise to
    assert "1 is rl-zoo SAC's -156.995 (Pendulum-v1, 20,000 frames)" in printed
    assert f"P({TD3} > {SAC}) = 0.50" in printed  # TD3 wins Pendulum, SAC wins Hopper, every seed
    assert "IQM" in printed and "normalised score" in printed

    written = {p.name for p in out.iterdir()}
    assert written == FIGURES | {"table.txt", "report.html"}
    for figure in FIGURES:
        png = (out / figure).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == len(FIGURES)
    assert f"digideep report --benchmark {name} --compare {TD3} {SAC}" in page
    assert "rl-baselines3-zoo benchmark.md" in page and '<td class="below">BELOW</td>' in page
    assert "<th>resumes (seed: count)</th>" in page and "<td>0: 0, 1: 2, 2: ?</td>" in page
    logged = {a.path for a in client.list_artifacts(parent, "report")}
    assert logged == {f"report/{n}" for n in written}
    assert "machines (" not in printed and "<h2>Machines</h2>" not in page  # none recorded: no section


def test_the_machines_of_each_runs_attempts_are_listed(
    client: MlflowClient, mlflow_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    final = {(SAC, "Hopper-v5"): 1000.0}
    cells = [(SAC, "Hopper-v5", s) for s in range(4)]
    name, _ = make_benchmark(client, cells, linear_curve(final), artifacts=tmp_path / "artifacts")
    by_seed = {int(r.data.tags["seed"]): r.info.run_id for r in _cell_runs(client, name, SAC, "Hopper-v5")}
    client.set_tag(by_seed[0], "digideep.machine.0", "CPU A")
    client.set_tag(by_seed[1], "digideep.machine.0", "CPU A")
    client.set_tag(by_seed[1], "digideep.machine.1", "CPU A")  # resumed on a machine of the same kind
    client.set_tag(by_seed[1], "digideep.resumes", "1")
    client.set_tag(by_seed[2], "digideep.resumes", "2")  # first on old code, resumed twice, last on CPU B
    client.set_tag(by_seed[2], "digideep.machine.2", "CPU B")
    out = tmp_path / "report"
    assert _report(mlflow_uri, out, "--benchmark", name) == 0
    printed = capsys.readouterr().out
    section = printed[printed.index("machines (each run's attempts in order):") :].splitlines()
    assert [line.strip() for line in section[1:6]] == [
        "M1  CPU A",
        "M2  CPU B",
        "every attempt on M1: 2 runs",
        f"Hopper-v5 {SAC} seed 2: ?, ?, M2",
        "not recorded (tracked before machines were): 1 run",  # seed 3
    ]
    page = (out / "report.html").read_text()
    assert "<h2>Machines</h2>" in page and f"<li>Hopper-v5 {SAC} seed 2: ?, ?, M2</li>" in page


def test_a_published_budget_within_1_percent_of_the_runs_stands_beside_them_with_its_budget(
    client: MlflowClient, mlflow_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    final = {(TD3, "Pendulum-v1"): -140.0}
    cells = [(TD3, "Pendulum-v1", s) for s in range(2)]
    budget = 20_100  # rl-zoo's TD3 on Pendulum-v1 is at 20,000 frames: 0.5 % away
    name, _ = make_benchmark(
        client, cells, linear_curve(final), 6700, budget, artifacts=tmp_path / "artifacts"
    )
    assert _report(mlflow_uri, tmp_path / "out", "--benchmark", name) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Pendulum-v1"))
    assert row.endswith("-151.9 (rl-zoo TD3, Pendulum-v1, 20,000 frames)")
    assert "(rl-zoo TD3, Pendulum-v1, 20,000 frames)" in (tmp_path / "out" / "report.html").read_text()


def _cell_runs(client: MlflowClient, name: str, algorithm: str, env: str) -> list:
    experiment = client.get_experiment_by_name(f"exp-{name}").experiment_id
    return client.search_runs(
        [experiment], filter_string=f"tags.algorithm = '{algorithm}' and tags.env = '{env}'"
    )


def test_environments_without_reference_scores_are_not_aggregated(
    client: MlflowClient, mlflow_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    final = {(SAC, "Pendulum-v1"): -200.0, (SAC, "MountainCarContinuous-v0"): 90.0}
    cells = [(a, e, s) for (a, e) in final for s in range(2)]
    name, _ = make_benchmark(client, cells, linear_curve(final), artifacts=tmp_path / "artifacts")
    assert _report(mlflow_uri, tmp_path / "out", "--experiment", f"exp-{name}") == 0
    printed = capsys.readouterr().out
    assert (
        "note: aggregates across environments need normalised scores, and MountainCarContinuous-v0" in printed
    )
    assert "IQM" not in printed
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"table.txt", "report.html"}
    header = next(line for line in printed.splitlines() if line.startswith("env "))
    assert header.endswith("published (same budget)")  # no row is below a published value: no mark column
    assert "<th></th>" not in (tmp_path / "out" / "report.html").read_text()


def test_last_n_averages_the_last_evaluations(
    client: MlflowClient, mlflow_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    final = {(SAC, "Hopper-v5"): 1000.0}
    cells = [(SAC, "Hopper-v5", s) for s in range(2)]
    name, _ = make_benchmark(client, cells, linear_curve(final, spread=0), artifacts=tmp_path / "artifacts")
    running = {
        "digideep.benchmark": name,
        "algorithm": SAC,
        "env": "Hopper-v5",
        "seed": "2",
        "variant": "default",
    }
    client.create_run(client.get_experiment_by_name(f"exp-{name}").experiment_id, tags=running)  # in flight
    assert _report(mlflow_uri, tmp_path / "out", "--benchmark", name, "--last", "2") == 0
    printed = capsys.readouterr().out
    assert f"report of benchmark {name}: 2 runs (1 not finished, left out)" in printed
    row = next(line for line in printed.splitlines() if line.startswith("Hopper-v5"))
    assert row.split()[3] == f"{np.mean([800.0, 1000.0]):.1f}"  # frames 4000 and 5000 of 5000


def test_at_scores_every_run_at_an_earlier_evaluation_and_counts_runs_still_training(
    client: MlflowClient, mlflow_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from mlflow.entities import Metric

    final = {(SAC, "Hopper-v5"): 1000.0}
    cells = [(SAC, "Hopper-v5", s) for s in range(2)]  # evaluated at 1000, ..., 5000 frames
    name, _ = make_benchmark(client, cells, linear_curve(final, spread=0), artifacts=tmp_path / "artifacts")
    experiment = client.get_experiment_by_name(f"exp-{name}").experiment_id
    protocol = {"eval/frame_interval": "1000", "eval/episodes": "5", "eval/frame_budget": "5000"}
    for seed, reached in ((2, 3000), (3, 2000)):  # two runs still training
        tags = {"digideep.benchmark": name, "algorithm": SAC, "env": "Hopper-v5", "seed": str(seed)}
        run = client.create_run(experiment, tags=tags).info.run_id
        for key, value in protocol.items():
            client.log_param(run, key, value)
        steps = range(1000, reached + 1, 1000)
        client.log_batch(run, metrics=[Metric("eval/return", 7.0 * step, 0, step) for step in steps])

    assert _report(mlflow_uri, tmp_path / "out", "--benchmark", name, "--at", "3000") == 0
    printed = capsys.readouterr().out
    assert (
        f"report of benchmark {name}: 3 runs (1 not finished nor evaluated at 3000 frames yet, left out), "
        "scored at 3000 frames of a budget of 5000" in printed
    )
    row = next(line for line in printed.splitlines() if line.startswith("Hopper-v5"))
    assert "0: 600.0, 1: 600.0, 2: 21000.0" in row  # the evaluations at 3000 frames: 1000 * 3/5, 7 * 3000
    assert "--at 3000" in (tmp_path / "out" / "report.html").read_text()

    assert _report(mlflow_uri, tmp_path / "bad", "--benchmark", name, "--at", "2500") == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "--at 2500 is no evaluation frame of the runs (every 1000 frames up to 5000)" in err
    )
    assert not (tmp_path / "bad").exists()


def _mixed(key: str, value: str):  # the eval/* params of one cell changed
    return {(SAC, "Hopper-v5", 1): {key: value}}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no selection", "choose the runs to report with --benchmark NAME, --experiment NAME or --tag"),
        ("no runs", "no finished runs match benchmark"),
        ("budgets", "the runs mix eval/frame_budget (4000 in 1 run, 5000 in 2 runs)"),
        ("intervals", "the runs mix eval/frame_interval"),
        ("episodes", "the runs mix eval/episodes"),
        ("one seed", f"{TD3} on Hopper-v5 has 1 seed; a 95 % interval needs at least 2"),
        ("compare", "--compare names 'params.nope', which is not in the selection"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    client: MlflowClient,
    mlflow_uri: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    case: str,
    message: str,
) -> None:
    cells = [(SAC, "Hopper-v5", s) for s in range(3)]
    protocol = None
    if case == "budgets":
        protocol = _mixed("eval/frame_budget", "4000")
    elif case == "intervals":
        protocol = _mixed("eval/frame_interval", "500")
    elif case == "episodes":
        protocol = _mixed("eval/episodes", "10")
    elif case == "one seed":
        cells.append((TD3, "Hopper-v5", 0))
    name, parent = make_benchmark(
        client, cells, linear_curve(FINAL), protocol=protocol, artifacts=tmp_path / "artifacts"
    )
    args = (
        [] if case == "no selection" else ["--benchmark", "no-such-benchmark" if case == "no runs" else name]
    )
    if case == "compare":
        args += ["--compare", SAC, "params.nope"]
    out = tmp_path / "out"
    assert _report(mlflow_uri, out, *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("digideep: error: ") and message in err
    assert not out.exists()
    assert client.list_artifacts(parent) == []


def test_report_of_plain_training_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Two real (tiny) Pendulum SAC runs of 'digideep train': placed by their params module and cpanel."""
    from digideep.pipeline.training import open_run, run_training

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # a store of their own: other tests train pendulum_sac too
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tiny = {"number_epochs": 5, "epoch_size": 1, "n_steps": 40, "learning_starts": 40, "batch_size": 32,
            "hidden_sizes": [16, 16], "save_interval": 5, "test_interval": 2, "test_episodes": 2}  # fmt: skip
    for seed in (0, 1):
        handle = open_run(
            SAC, {**tiny, "seed": seed}, session_name=f"s{seed}", session_path=tmp_path / "sessions"
        )
        assert run_training(handle) == "finished"
    out = tmp_path / "out"
    assert cli(["report", "--experiment", SAC, "--out", str(out), "--reps", "200"]) == 0
    printed = capsys.readouterr().out
    assert "2 runs, frame budget 200, evaluation every 80 frames over 2 episodes" in printed
    row = next(line for line in printed.splitlines() if line.startswith("Pendulum-v1"))
    assert row.split()[1:3] == [SAC, "2"]
    assert (out / "report.html").is_file()
