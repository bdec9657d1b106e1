"""Digideep names and values become valid MLflow keys and values, never an exception."""

from __future__ import annotations

from pathlib import Path

from mlflow.utils.validation import _validate_metric_name, _validate_param

from digideep.tracking.naming import (
    MAX_KEY_LENGTH,
    data_root_of,
    experiment_name,
    flatten_params,
    metrics_from_summary,
    mlflow_key,
    shorten,
)
from digideep.utility.monitoring import Monitor


def test_any_name_becomes_a_key_mlflow_accepts() -> None:
    names = ["/explore/train/episode_return", "a//b/", "./x/../y", "q(f)*[0]", "é/ü", "", "/" * 3, "k" * 400]
    keys = [mlflow_key(name) for name in names]
    for key in keys:
        _validate_metric_name(key)  # raises on an invalid name
        assert len(key) <= MAX_KEY_LENGTH
    assert keys[:3] == ["explore/train/episode_return", "a/b", "_/x/__/y"]
    assert mlflow_key("k" * 400) != mlflow_key("k" * 399 + "j")  # long names stay distinct


def test_long_values_are_cut_with_a_marker() -> None:
    for length in (10, 5999, 6000, 6001, 100_000):
        value = shorten("v" * length)
        if length <= 6000:
            assert value == "v" * length
        else:
            kept = value.index(".")
            assert len(value) == 6000 and value == "v" * kept + f"...[+{length - kept} chars cut]"


def test_params_tree_flattens_to_valid_params() -> None:
    tree = {
        "agents": {"sac": {"args": {"lr": 3e-4, "sizes": (64, 64), "act": nn_relu}}},
        "long": "x" * 9000,
        "n": None,
    }
    flat = flatten_params(tree)
    assert flat["agents/sac/args/lr"] == "0.0003"
    assert flat["agents/sac/args/sizes"] == "[64, 64]"
    assert flat["agents/sac/args/act"] == f"{__name__}.nn_relu"
    assert flat["n"] == "None"
    for key, value in flat.items():
        _validate_param(key, value)
    assert list(flatten_params({"seed": 1}, prefix="cpanel")) == ["cpanel/seed"]


def test_monitor_summary_becomes_metrics() -> None:
    monitor = Monitor()
    for value in (1.0, 3.0):
        monitor("/explore/train/episode_return", value)
    metrics = metrics_from_summary(monitor.summary(), stats=("mean", "max"))
    assert metrics == {"explore/train/episode_return": 2.0, "explore/train/episode_return_max": 3.0}
    assert metrics_from_summary({"/train/update": {"total": 1.5}}, stats=("total",), prefix="time") == {
        "time/train/update": 1.5
    }


def test_experiment_is_the_params_module_unless_the_cpanel_names_one() -> None:
    assert experiment_name("params.mujoco_sac", {"seed": 0}) == "params.mujoco_sac"
    assert experiment_name("params.mujoco_sac", {"experiment": "sweep-lr"}) == "sweep-lr"


def nn_relu() -> None:
    """A function standing for an activation class in a params tree."""


def test_the_embedded_store_lives_beside_the_sessions_folder() -> None:
    assert data_root_of("data/sessions") == Path("data")  # the default: data/mlflow.db
    assert data_root_of("/runs/exp1/sessions/") == Path("/runs/exp1")
    assert data_root_of("file:///runs/exp1/sessions") == Path("/runs/exp1")
    assert data_root_of("s3://bucket/sessions") == Path("data")  # working folders in data/cache


def test_an_experiment_created_with_no_artifact_location_keeps_them_beside_its_store(
    tmp_path, monkeypatch
) -> None:
    from mlflow import MlflowClient

    from digideep.tracking.naming import ensure_store, open_experiment

    monkeypatch.chdir(tmp_path)  # MLflow's own default would be ./mlruns here
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    ensure_store(uri)
    client = MlflowClient(uri)
    experiment = client.get_experiment(open_experiment(client, "benchmarks"))
    assert experiment.artifact_location.startswith((tmp_path / "store" / "mlartifacts").as_uri())
    assert not (tmp_path / "mlruns").exists()
