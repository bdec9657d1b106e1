"""Where a run's own code came from, so that resume and play import it from any folder.

A params tree names code by dotted path: agent and memory classes (``"type"``), env wrappers
(``"name"``) and the env's ``from_module``. Shipped classes and installed packages import from
anywhere; a user's own (``redq.agent.REDQ`` in ``~/research/redq/agent.py``) imports only while its
folder is on ``sys.path``, as the current folder was when ``digideep train`` started in
``~/research``. :func:`code_folders` writes down, for each top-level module that needs it, that
folder (the session keeps it as ``import_paths`` in ``session.json`` and every ``runner.json``);
:func:`use_code_folders` puts the folders back on ``sys.path`` before a resume, a play or an export
imports the classes, and fails with one line naming the module and its folder when that is not
enough.

Not recorded: modules found inside site-packages or the standard library, and modules an import
hook maps by name wherever the current folder is (editable installs: digideep, ``flows`` and the
shipped ``params`` of a repository checkout, or the user's own ``pip install -e`` package).
"""

from __future__ import annotations

import importlib
import importlib.util
import site
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from typing import Any

from digideep.errors import UsageError
from digideep.utility.imports import import_object

__all__ = ["FIX", "IMPORT_PATHS", "code_folders", "named_code", "use_code_folders"]

IMPORT_PATHS = "import_paths"
"""The key of ``{top-level module: folder}`` in ``session.json`` and ``runner.json``."""

FIX = "make it importable: pip install -e your package, or run from the folder that holds it"
"""How a user makes their own code importable again (the end of each one-line message)."""


def named_code(params: Mapping[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """``(what, dotted, is_module)`` for each class or module that ``params`` names.

    ``what`` says where in the tree (``agent 'agent'``); ``is_module`` is True for ``from_module``
    (a module to import), False for class paths (``package.module.Name``).
    """
    for name, spec in (params.get("agents") or {}).items():
        if isinstance(spec, Mapping) and isinstance(spec.get("type"), str):
            yield f"agent '{name}' class", spec["type"], False
    for name, spec in (params.get("memory") or {}).items():
        if isinstance(spec, Mapping) and isinstance(spec.get("type"), str):
            yield f"memory '{name}' class", spec["type"], False
    env = params.get("env") or {}
    if isinstance(env.get("from_module"), str) and env["from_module"]:
        yield "env from_module", env["from_module"], True
    for stack, what in (("wrappers", "env wrapper"), ("vector_wrappers", "env vector wrapper")):
        for entry in env.get(stack) or []:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                yield what, entry["name"], False


def code_folders(
    params: Mapping[str, Any], params_module: str | None = None, params_file: str | Path | None = None
) -> dict[str, str]:
    """``{top-level module: absolute folder}`` that must be on ``sys.path`` to import the run's code.

    Call it where the code imports (after the parameter file loaded, before training starts).

    Args:
        params: the resolved params tree; its class paths and ``from_module`` are looked up.
        params_module: the parameter file's module name (``my_params``, ``params.pendulum_sac``).
        params_file: the parameter file's path (``module.__file__``).
    """
    found: dict[str, str] = {}
    if params_module and params_file:
        file = Path(params_file).resolve()
        depth = params_module.count(".")  # params.x in <folder>/params/x.py: <folder>/params is 1 up
        top = params_module.split(".")[0]
        if depth < len(file.parents):
            location = file.parents[depth - 1] if depth else file  # the top-level module's file or folder
            if not _installed(top, location):
                found[top] = str(location.parent)
    for _, dotted, _ in named_code(params):
        top = dotted.replace(":", ".").split(".")[0]
        if top and top not in found:
            folder = _folder_of(top)
            if folder is not None:
                found[top] = str(folder)
    return found


def use_code_folders(folders: Mapping[str, str] | None, params: Mapping[str, Any], where: str) -> None:
    """Put a run's recorded folders on ``sys.path`` and import the code its ``params`` name.

    Folders that still exist go first on ``sys.path`` (the code a run trained with wins over a
    namesake in the current folder); a folder that is gone is skipped, and fails only if something
    in it is needed. Code with no recorded folder (installed packages, digideep's own classes) is
    left to the caller's own check, e.g. :func:`~digideep.pipeline.components.check_classes`.

    Args:
        folders: the run's ``import_paths`` (None or empty: nothing to put back).
        params: the params tree whose classes are about to be built.
        where: the session or checkpoint, for the message.

    Raises:
        UsageError: one line naming the class or module of a recorded folder that cannot be
            imported, that folder (and whether it is gone), and how to fix it.
    """
    folders = dict(folders or {})
    for folder in reversed(list(dict.fromkeys(folders.values()))):
        if Path(folder).is_dir() and folder not in sys.path:
            sys.path.insert(0, folder)
    importlib.invalidate_caches()
    for what, dotted, is_module in named_code(params):
        try:
            if is_module:
                importlib.import_module(dotted)
            else:
                import_object(dotted)
        except ImportError as error:
            top = dotted.replace(":", ".").split(".")[0]
            folder = folders.get(top)
            if folder is None:
                continue  # installed code: the builder reports what does not import
            reason = str(error).removeprefix(f"'{dotted}': ")
            if not Path(folder).is_dir():
                recorded = f"{where} recorded module '{top}' in {folder}, which no longer exists"
            elif not (Path(folder, top).is_dir() or Path(folder, f"{top}.py").is_file()):
                recorded = f"module '{top}' is no longer in {folder}, the folder {where} recorded"
            else:  # there, but something in or under it does not import
                recorded = f"imported from {folder}, the folder {where} recorded for module '{top}'"
            raise UsageError(f"cannot import {what} '{dotted}' ({reason}): {recorded}; {FIX}") from None


def _folder_of(top: str) -> Path | None:
    """The folder to put on ``sys.path`` for top-level module ``top``, None when not needed.

    None also for a module that does not import (the Runner's own check reports it).
    """
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    location = _location(spec)
    if location is None or _installed(top, location):
        return None
    return location.parent


def _location(spec: ModuleSpec | None) -> Path | None:
    """The file of a top-level module, or the folder of a package (a namespace package's first)."""
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package: its folder
        return Path(next(iter(spec.submodule_search_locations))).resolve()
    if spec.origin and spec.has_location:
        return Path(spec.origin).resolve()
    return None  # built in, frozen


def _installed(top: str, location: Path) -> bool:
    """Whether ``top``, found at ``location``, imports without the folder that holds it on sys.path.

    True inside site-packages and the standard library, and when an import hook other than the
    path finder maps ``top`` to the same place (setuptools' editable installs).
    """
    if location.name == "__init__.py":
        location = location.parent
    if any(location.is_relative_to(root) for root in _install_roots()):
        return True
    for finder in sys.meta_path:
        if finder is PathFinder or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec(top, None)
        except Exception:  # a third-party hook that cannot answer this question
            continue
        found = _location(spec)
        if found is not None:
            found = found.parent if found.name == "__init__.py" else found
            if found == location:
                return True
    return False


def _install_roots() -> list[Path]:
    """site-packages (system and user) and the standard library folders."""
    roots = [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]
    paths = sysconfig.get_paths()
    roots += [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
    return [Path(root).resolve() for root in dict.fromkeys(roots) if root]
