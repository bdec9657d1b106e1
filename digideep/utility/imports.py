"""Import objects named by dotted paths in parameter files (``digideep.agents.sac.SAC``)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["class_path", "import_object"]


def import_object(path: str) -> Any:
    """Return the object that ``path`` (``package.module.Name`` or ``package.module:Name``) names.

    Raises:
        ImportError: with a message naming ``path`` when the module or the name does not exist.
    """
    module_name, _, name = path.replace(":", ".").rpartition(".")
    if not module_name:
        raise ImportError(f"'{path}' is not a dotted path like 'package.module.Name'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ImportError(f"'{path}': module '{module_name}' not found ({error})") from None
    try:
        return getattr(module, name)
    except AttributeError:
        raise ImportError(f"'{path}': module '{module_name}' has no '{name}'") from None


def class_path(obj: object) -> str:
    """The dotted path of ``obj``'s class, the inverse of :func:`import_object`."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"
