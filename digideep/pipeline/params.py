"""Parameter files: find the module, validate the cpanel, generate the params tree.

A parameter file ``params/<name>.py`` holds a module-level ``cpanel`` dict (the "control panel" of
knobs, each commented) and ``gen_params(cpanel) -> dict``, the whole params tree in one place.
``--cpanel '{"model_name": "Hopper-v5"}'`` overrides knobs. Everything here runs before anything
touches disk, and every problem raises :class:`~digideep.errors.UsageError` with a one-line message;
:func:`write_params` then records what was resolved in the run's session.

``--params`` takes a module name (``params.pendulum_sac`` or ``pendulum_sac``) or a path ending in
``.py``. A path inside the project's ``params/`` folder is imported as that module, so it is recorded
the same way; any other path (``~/experiments/my_sac.py``) is loaded from the file, as module
``my_sac``, with its folder on the import path (for helpers beside it) as well as the project's.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import logging
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from digideep import __version__
from digideep.errors import UsageError
from digideep.pipeline.param_bounds import check_sizes, check_tree_sizes
from digideep.storage.files import atomic_write_json

if TYPE_CHECKING:  # the session is opened after the params are resolved, by the run
    from digideep.storage.session import Session

__all__ = [
    "ResolvedParams",
    "apply_cpanel",
    "available_params",
    "load_params_module",
    "parse_cpanel",
    "resolve_params",
    "write_params",
]

log = logging.getLogger(__name__)

PARAMS_PACKAGE = "params"


@dataclass(frozen=True)
class ResolvedParams:
    """A parameter file resolved with its cpanel overrides.

    Attributes:
        module: the module name, e.g. ``params.pendulum_sac``.
        cpanel: the full cpanel after overrides.
        params: the params tree that ``gen_params(cpanel)`` returned.
        file: the parameter file's path (None for a module without a file).
    """

    module: str
    cpanel: dict[str, Any]
    params: dict[str, Any]
    file: str | None = None

    @property
    def short_name(self) -> str:
        """The module's last component, e.g. ``pendulum_sac``."""
        return self.module.rsplit(".", 1)[-1]


def _search_root() -> Path:
    return Path.cwd()


def available_params(root: Path | None = None) -> list[str]:
    """Module names of the parameter files under ``<root>/params``.

    Without ``root``: those of the ``params`` package that imports, that is the current folder's
    ``params/`` when it has one (it comes first on the import path), else the parameter files
    installed with digideep.
    """
    if root is not None:
        folders = [root / PARAMS_PACKAGE]
    else:
        spec = importlib.util.find_spec(PARAMS_PACKAGE)
        folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    names = {p.stem for folder in folders for p in folder.glob("*.py") if not p.stem.startswith("_")}
    return sorted(f"{PARAMS_PACKAGE}.{name}" for name in names)


def _normalise_module_name(name: str) -> str:
    """Accept ``params.x``, ``x`` and a path to ``params/x.py`` (relative or absolute); return a dotted name.

    A ``.py`` path reaching here names a file of the project's ``params/`` folder (:func:`_outside_file`
    takes the others), so its module is ``params.<stem>`` however the path was written.
    """
    if name.endswith(".py"):
        return f"{PARAMS_PACKAGE}.{Path(name).stem}"
    return name if "." in name else f"{PARAMS_PACKAGE}.{name}"


def _outside_file(name: str) -> Path | None:
    """The file ``name`` points at when it is a ``.py`` path outside ``<cwd>/params``, else None."""
    if not name.endswith(".py"):
        return None
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = _search_root() / path
    path = path.resolve()
    if path.parent == (_search_root() / PARAMS_PACKAGE).resolve():
        return None  # the project's own parameter file: imported by module name below
    if not path.is_file():
        raise UsageError(f"parameter file '{name}' not found (looked for {path})")
    return path


def _load_file(path: Path) -> ModuleType:
    """Execute the parameter file at ``path`` as module ``<stem>`` (not added to ``sys.modules``)."""
    if not path.stem.isidentifier():
        raise UsageError(
            f"parameter file name '{path.name}' must be a Python identifier plus .py, e.g. my_sac.py"
        )
    for folder in (str(_search_root()), str(path.parent)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise _user_code_error(f"params module '{path.stem}' does not load", error, str(path)) from None
    return module


def load_params_module(name: str) -> ModuleType:
    """Import a parameter file and check it has ``cpanel`` and ``gen_params``.

    Args:
        name: a module name or a path to a ``.py`` file (module doc).

    Raises:
        UsageError: the module or file does not exist (the message lists the project's parameter
            files) or lacks a part.
    """
    file = _outside_file(name)
    if file is not None:
        module = _load_file(file)
        module_name = module.__name__
    else:
        module_name = _normalise_module_name(name)
        root = str(_search_root())
        if root not in sys.path:
            sys.path.insert(0, root)
        importlib.invalidate_caches()
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and not module_name.startswith(error.name):
                raise  # the params file exists but imports something missing: a real bug, show it
            choices = (
                ", ".join(available_params())
                or "none found (no params package under the current folder or installed)"
            )
            raise UsageError(f"params module '{module_name}' not found; available: {choices}") from None
        except Exception as error:  # a syntax error, or an exception while the file runs
            file = _origin(module_name)
            raise _user_code_error(f"params module '{module_name}' does not load", error, file) from None
    if not isinstance(getattr(module, "cpanel", None), dict) or not callable(
        getattr(module, "gen_params", None)
    ):
        raise UsageError(
            f"params module '{module_name}' must define a dict 'cpanel' and a function 'gen_params(cpanel)'"
        )
    return module


def parse_cpanel(text: str | None) -> dict[str, Any]:
    """Parse the ``--cpanel`` JSON object.

    Raises:
        UsageError: invalid JSON (naming line, column and character) or not a JSON object.
    """
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(
            f"invalid --cpanel JSON at line {error.lineno} column {error.colno} (char {error.pos}): {error.msg}"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"--cpanel must be a JSON object like '{{\"seed\": 1}}', got {type(value).__name__}")
    return value


def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _accepts(default: Any, value: Any) -> bool:
    """Whether ``value`` may replace ``default``: same JSON type; an int may stand for a float."""
    if default is None or value is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    if isinstance(default, int):
        return isinstance(value, int)
    if isinstance(default, list | tuple):
        return isinstance(value, list)
    return isinstance(value, type(default))


def apply_cpanel(defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return ``defaults`` updated with ``overrides`` after checking every key and type.

    Raises:
        UsageError: an unknown key (naming the closest valid key and all valid keys) or a wrong type.
    """
    cpanel = dict(defaults)
    for key, value in overrides.items():
        if key not in defaults:
            close = difflib.get_close_matches(key, defaults, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UsageError(f"unknown cpanel key '{key}'; {hint}valid keys: {', '.join(sorted(defaults))}")
        if not _accepts(defaults[key], value):
            raise UsageError(
                f"cpanel key '{key}' expects {_type_name(defaults[key])}, got {_type_name(value)} ({json.dumps(value)})"
            )
        cpanel[key] = float(value) if isinstance(defaults[key], float) and isinstance(value, int) else value
    return cpanel


def resolve_params(
    name: str,
    cpanel_json: str | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    device: str | None = None,
) -> ResolvedParams:
    """Load a parameter file, apply the cpanel overrides and generate the params tree.

    Args:
        name: ``params.<name>``, ``<name>``, ``params/<name>.py`` or a path to a ``.py`` file anywhere.
        cpanel_json: the ``--cpanel`` JSON text, if any.
        overrides: cpanel overrides already parsed (applied after ``cpanel_json``).
        device: the run's ``--device``, if any: it overrides ``session.device`` of the params tree,
            which is then not checked.
    """
    module = load_params_module(name)
    requested = {**parse_cpanel(cpanel_json), **(overrides or {})}
    cpanel = apply_cpanel(module.cpanel, requested)
    check_sizes(cpanel)  # before gen_params: num_workers 0 would divide by zero there
    params = _generate(module, cpanel)
    file = getattr(module, "__file__", None)
    check_tree_sizes(module, cpanel, requested, params, _shown(file) if file else None)
    _check_session_device(module.__name__, params, device)
    return ResolvedParams(module=module.__name__, cpanel=cpanel, params=params, file=file)


def _check_session_device(module: str, params: dict[str, Any], device: str | None) -> None:
    """Check ``session.device`` of the params tree (unless ``device``, ``--device``, overrides it).

    Raises:
        UsageError: the device is malformed or does not exist on this machine.
    """
    from digideep.pipeline.devices import check_device

    session = params.get("session")
    params_device = session.get("device") if isinstance(session, dict) else None
    if params_device is None or device:
        return
    try:
        check_device(params_device)
    except UsageError as error:
        raise UsageError(f"session.device of '{module}': {error}") from None


def _origin(module_name: str) -> str | None:
    """The file of module ``module_name`` (None when its package does not import either)."""
    try:
        spec = importlib.util.find_spec(module_name)
    except Exception:  # the package's own __init__ fails: the error names its file anyway
        return None
    return spec.origin if spec is not None else None


def _generate(module: ModuleType, cpanel: dict[str, Any]) -> dict[str, Any]:
    """``module.gen_params(cpanel)``, checked to be a dict.

    Raises:
        UsageError: gen_params raised (naming the file, the line and the error) or returned no dict.
    """
    try:
        params = module.gen_params(dict(cpanel))
    except Exception as error:
        raise _user_code_error(
            f"gen_params() of '{module.__name__}' failed", error, getattr(module, "__file__", None)
        ) from None
    if not isinstance(params, dict):
        raise UsageError(
            f"gen_params() of '{module.__name__}' returned {type(params).__name__}, expected dict"
        )
    return params


def _user_code_error(what: str, error: Exception, file: str | None) -> UsageError:
    """One line for an exception raised by a parameter file: ``<what>: <error> (<file>, line <n>)``.

    The line is where a syntax error is, or the innermost frame of the traceback in the parameter
    file's folder (its helpers, such as ``params/_common.py``), else in the file's code anywhere.
    The traceback is logged at DEBUG level (``--log-level DEBUG``).
    """
    log.debug("%s", what, exc_info=error)
    if isinstance(error, SyntaxError):
        where: tuple[str | None, int | None] = (error.filename, error.lineno)
        text = f"{type(error).__name__}: {error.msg}"
    else:
        frames = traceback.extract_tb(error.__traceback__)
        folder = Path(file).resolve().parent if file else None
        near = [f for f in frames if folder is not None and Path(f.filename).resolve().parent == folder]
        frame = (near or frames)[-1] if frames else None
        where = (frame.filename, frame.lineno) if frame is not None else (file, None)
        lines = str(error).strip().splitlines()
        text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    filename, line = where
    place = f" ({_shown(filename)}, line {line})" if filename and line else ""
    return UsageError(f"{what}: {text}{place}")


def _shown(filename: str) -> str:
    """``filename`` relative to the current folder when it lies below it, else as it is."""
    try:
        return str(Path(filename).resolve().relative_to(_search_root().resolve()))
    except ValueError:
        return filename


def write_params(
    session: Session,
    module: str,
    cpanel: dict[str, Any],
    params: dict[str, Any],
    import_paths: dict[str, str] | None = None,
) -> None:
    """Write ``cpanel.json``, ``params.json`` and ``session.json`` of ``session`` (each atomically).

    ``import_paths`` (``{top-level module: folder}``, see :mod:`digideep.utility.user_code`) goes
    to ``session.json``: the folders that put the run's own code back on ``sys.path``.
    """
    for filename, value in (("cpanel.json", cpanel), ("params.json", params)):
        (session.location / filename).write_json(value)
        if session.remote:  # a local copy for MLflow's session artifacts
            atomic_write_json(session.path / filename, value)
    session.update_info(
        params_module=module,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        version=__version__,
        import_paths=dict(import_paths or {}),
    )
