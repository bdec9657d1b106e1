from pathlib import Path

import pytest

from digideep.errors import UsageError
from digideep.pipeline.params import apply_cpanel, parse_cpanel, resolve_params


def test_resolve_applies_overrides_and_generates_the_tree(params_project):
    resolved = resolve_params("params.demo", '{"model_name": "Hopper-v5", "lr": 1}')
    assert resolved.module == "params.demo" and resolved.short_name == "demo"
    assert resolved.cpanel["model_name"] == "Hopper-v5"
    assert resolved.cpanel["lr"] == 1.0 and isinstance(resolved.cpanel["lr"], float)
    assert resolved.params["env"]["model_name"] == "Hopper-v5"


@pytest.mark.parametrize("name", ["params.demo", "demo", "params/demo.py", "./params/demo.py", "ABSOLUTE"])
def test_module_name_forms(params_project, name):
    if name == "ABSOLUTE":  # the project's own file named by its absolute path
        name = str(params_project / "params" / "demo.py")
    assert resolve_params(name).module == "params.demo"


def error_of(call, *args) -> str:
    """The whole message of the UsageError that ``call(*args)`` raises (the CLI prints it as is)."""
    with pytest.raises(UsageError) as caught:
        call(*args)
    return str(caught.value)


def test_missing_module_lists_those_that_exist(params_project):
    assert (
        error_of(resolve_params, "params.nope")
        == "params module 'params.nope' not found; available: params.demo"
    )


def test_invalid_json_names_the_position():
    assert error_of(parse_cpanel, '{"seed": }') == (
        "invalid --cpanel JSON at line 1 column 10 (char 9): Expecting value"
    )


def test_cpanel_must_be_an_object():
    assert error_of(parse_cpanel, "[1, 2]") == "--cpanel must be a JSON object like '{\"seed\": 1}', got list"


def test_unknown_key_names_the_closest_and_the_valid_keys():
    assert error_of(apply_cpanel, {"seed": 0, "lr": 0.1}, {"seeds": 1}) == (
        "unknown cpanel key 'seeds'; did you mean 'seed'? valid keys: lr, seed"
    )


@pytest.mark.parametrize(
    ("default", "value", "message"),
    [
        (0, "3", 'expects int, got string ("3")'),
        (0, 1.5, "expects int, got float (1.5)"),
        (0, True, "expects int, got bool (true)"),
        (True, 1, "expects bool, got int (1)"),
        ("x", 3, "expects string, got int (3)"),
        ([1], {"a": 1}, 'expects list, got object ({"a": 1})'),
    ],
)
def test_wrong_types_are_refused(default, value, message):
    assert error_of(apply_cpanel, {"k": default}, {"k": value}) == f"cpanel key 'k' {message}"


# -- sizes and counts: refused when the params are resolved, before anything is written ----------
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("params", "cpanel", "message"),
    [
        ("pendulum_sac", {"num_workers": 0}, "cpanel key 'num_workers' must be at least 1, got 0"),
        ("pendulum_sac", {"batch_size": 0}, "cpanel key 'batch_size' must be at least 1, got 0"),
        ("pendulum_sac", {"lr": 0}, "cpanel key 'lr' must be greater than 0, got 0.0"),
        ("pendulum_sac", {"seed": -1}, "cpanel key 'seed' must be at least 0, got -1"),
        ("pendulum_sac", {"test_episodes": 0}, "cpanel key 'test_episodes' must be at least 1, got 0"),
        ("pendulum_sac", {"buffer_size": 0}, "cpanel key 'buffer_size' must be at least 1, got 0"),
        (
            "pendulum_sac",
            {"hidden_sizes": [64, 0]},
            "cpanel key 'hidden_sizes' entries must be at least 1, got [64, 0]",
        ),
        ("cartpole_ppo", {"n_epochs": 0}, "cpanel key 'n_epochs' must be at least 1, got 0"),
        (  # a value the file derives from knobs: its params path, and the knobs it follows from
            "pendulum_sac",
            {"buffer_size": 4, "num_workers": 8, "seed": 3},  # the seed changes the tree, not the capacity
            "params value 'memory.train.args.capacity' must be at least 2, got 1; "
            "it follows from cpanel keys 'buffer_size' and 'num_workers'",
        ),
    ],
)
def test_sizes_and_counts_out_of_bounds_name_the_cpanel_key(monkeypatch, params, cpanel, message):
    monkeypatch.chdir(REPO)
    assert error_of(resolve_params, f"params.{params}", None, cpanel) == message


FIXED_SIZES = """
cpanel = {"seed": 0, "workers": 2}


def gen_params(cpanel):
    return {"runner": {"number_epochs": 1, "epoch_size": 1, "test_interval": 0, "seed": cpanel["seed"]},
            "explorer": {"train": {"num_workers": cpanel["workers"], "n_steps": -5},
                         "test": {"num_workers": 1, "n_steps": None, "n_episodes": 1}},
            "memory": {"train": {"type": "digideep.memory.Memory", "args": {"capacity": 10}}},
            "agents": {"agent": {"args": {"lr": 1e-3, "learning_starts": 0, "hidden_sizes": []}}}}
"""


def test_a_size_the_file_sets_itself_is_named_by_its_params_path(params_project):
    (params_project / "params" / "fixed.py").write_text(FIXED_SIZES)
    message = (
        "params value 'explorer.train.n_steps' must be at least 1, got -5, "
        "from gen_params() of 'params.fixed' (params/fixed.py)"
    )
    assert error_of(resolve_params, "params.fixed", '{"workers": 4}') == message
    (params_project / "params" / "fixed_ok.py").write_text(
        FIXED_SIZES.replace('"n_steps": -5', '"n_steps": 8')
    )
    resolved = resolve_params("params.fixed_ok")  # None, 0 where 0 means never, an empty list: accepted
    assert resolved.params["explorer"]["train"]["n_steps"] == 8


def test_a_device_argument_overrides_session_device_which_is_then_not_checked():
    with pytest.raises(UsageError, match=r"session\.device of 'params\.pendulum_sac': device 'cuda:99'"):
        resolve_params("params.pendulum_sac", '{"device": "cuda:99"}')
    resolved = resolve_params("params.pendulum_sac", '{"device": "cuda:99"}', device="cpu")  # --device cpu
    assert resolved.params["session"]["device"] == "cuda:99"  # the Session takes "cpu" over it
