"""The benchmark matrix (``flows/benchmark.py``): its expansion, its refusals and its cells.

The matrix is checked in one line before anything runs; an SB3 reference cell trains under the same
evaluation protocol as digideep's runs; and a tiny benchmark runs through a real Prefect server and
worker, is killed half-way and retried, and ends with every cell run exactly once, nested under its
MLflow parent run with the contract's tags.
"""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from digideep.errors import UsageError
from digideep.main import cli
from digideep.pipeline.evaluation import EvaluationProtocol
from digideep.pipeline.matrix import plan

PROTOCOL = EvaluationProtocol(frame_interval=1000, episodes=5, frame_budget=3000)


def test_the_matrix_is_every_algorithm_env_variant_and_seed_with_the_protocol_in_each_files_epochs():
    cells = plan(
        ["params.pendulum_sac", "sb3:TD3"],
        ["Pendulum-v1", "MountainCarContinuous-v0"],
        [0, 1],
        PROTOCOL,
        base_cpanel=None,
    )
    assert [c.key for c in cells[:3]] == [
        "params.pendulum_sac/Pendulum-v1/seed-0/default",
        "params.pendulum_sac/Pendulum-v1/seed-1/default",
        "params.pendulum_sac/MountainCarContinuous-v0/seed-0/default",
    ]
    assert len(cells) == 8 and len({c.key for c in cells}) == 8
    # pendulum_sac's epoch is 10 iterations x 100 steps = 1,000 frames
    assert cells[2].cpanel == {
        "model_name": "MountainCarContinuous-v0",
        "seed": 0,
        "number_epochs": 3,
        "test_interval": 1,
        "test_episodes": 5,
    }
    assert cells[-1].algorithm == "sb3:TD3" and cells[-1].cpanel == {}
    variants = plan(
        ["params.pendulum_sac"],
        ["Pendulum-v1"],
        [3],
        PROTOCOL,
        variants={"small-lr": {"lr": 1e-4}, "default": {}},
        base_cpanel={"epoch_size": 5},
    )
    assert [(c.variant, c.cpanel.get("lr")) for c in variants] == [
        ("small-lr", 1e-4),
        ("default", None),
    ]
    assert variants[0].cpanel["number_epochs"] == 6  # 5 iterations x 100 steps per epoch
    assert variants[0].tags("b", "p") == {
        "name": "b",
        "algorithm": "params.pendulum_sac",
        "env": "Pendulum-v1",
        "seed": 3,
        "variant": "small-lr",
        "parent_run_id": "p",
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--params", "params.nope", "--env", "Pendulum-v1"], "params module 'params.nope' not found"),
        (["--params", "params.pendulum_sac", "--env", "Pendulum-v9"], "unknown environment 'Pendulum-v9'"),
        (["--params", "sb3:A2C", "--env", "Pendulum-v1"], "unknown reference algorithm 'sb3:A2C'"),
        (
            ["--params", "params.pendulum_sac", "--env", "Pendulum-v1", "--eval-interval", "700"],
            "must divide",
        ),
        (
            [
                "--params",
                "params.pendulum_sac",
                "--env",
                "Pendulum-v1",
                "--frames",
                "1500",
                "--eval-interval",
                "500",
            ],
            "not a whole number of epochs of 1000 frames",
        ),
        (
            ["--params", "params.pendulum_sac", "--env", "Pendulum-v1", "--cpanel", '{"lr_": 1}'],
            "unknown cpanel key 'lr_'",
        ),
        (["--params", "params.pendulum_sac", "--env", "Pendulum-v1", "--variant", "x"], "must be NAME=JSON"),
        (["--params", "sb3:SAC", "--env", "Pendulum-v1", "--variant", 'x={"lr": 1}'], "SB3's defaults"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_anything_runs(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # nothing may reach it
    frames = [] if "--frames" in argv else ["--frames", "3000"]
    assert cli(["benchmark", *argv, *frames, "--session-path", str(tmp_path / "sessions")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir())


def test_an_empty_axis_is_refused():  # (the CLI's argparse refuses an empty --seeds itself)
    for axes in (
        [[], ["Pendulum-v1"], [0]],
        [["params.pendulum_sac"], [], [0]],
        [["sb3:SAC"], ["Pendulum-v1"], []],
    ):
        with pytest.raises(UsageError, match="axis is empty"):
            plan(*axes, PROTOCOL)


def test_an_sb3_cell_trains_under_the_protocol_and_is_tracked_as_a_nested_cell(mlflow_uri):
    from digideep.baselines.sb3 import train_sb3_cell
    from digideep.tracking.trials import benchmark_tags
    from flows.cells import experiment_id

    client = MlflowClient(mlflow_uri)
    experiment = experiment_id(client, "benchmarks", None)
    parent = client.create_run(
        experiment, tags={"digideep.kind": "benchmark", "digideep.benchmark": "sb3-test"}
    )
    cell = {"name": "sb3-test", "algorithm": "sb3:SAC", "env": "Pendulum-v1", "seed": 1, "variant": "default"}
    tags = benchmark_tags({**cell, "parent_run_id": parent.info.run_id})
    protocol = EvaluationProtocol(frame_interval=200, episodes=2, frame_budget=400)
    score = train_sb3_cell("sb3:SAC", "Pendulum-v1", 1, protocol, client, experiment, tags)

    (run,) = client.search_runs(
        [experiment], filter_string="tags.`digideep.benchmark` = 'sb3-test' and tags.algorithm = 'sb3:SAC'"
    )
    assert run.info.status == "FINISHED"
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert {k: run.data.tags[k] for k in ("env", "seed", "variant")} == {
        "env": "Pendulum-v1",
        "seed": "1",
        "variant": "default",
    }
    history = client.get_metric_history(run.info.run_id, "eval/return")
    assert [m.step for m in history] == [200, 400]
    assert history[-1].value == score and -2000 < score < 0  # Pendulum's returns over 2 x 200 steps
    assert {k: v for k, v in run.data.params.items() if k.startswith("eval/")} == {
        "eval/frame_interval": "200",
        "eval/episodes": "2",
        "eval/frame_budget": "400",
    }


def test_an_sb3_cell_without_sb3_is_refused_naming_the_extra(monkeypatch):
    import sys

    from digideep.baselines.sb3 import check_sb3

    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # import fails as when it is absent
    with pytest.raises(
        UsageError, match=r"install digideep's bench extra \(pip install 'digideep\[bench\]'\)"
    ):
        check_sb3("sb3:PPO")
