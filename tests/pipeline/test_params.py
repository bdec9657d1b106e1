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
