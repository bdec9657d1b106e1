"""Import objects named by dotted paths in parameter files (``digideep.agents.sac.SAC``)."""

from __future__ import annotations

import pkgutil
from types import ModuleType
from typing import Any

__all__ = ["class_path", "import_object"]


def import_object(path: str) -> Any:
    """Return the object that ``path`` (``package.module.Name`` or ``package.module:Name``) names.

    :func:`pkgutil.resolve_name` does the lookup; this adds messages that name ``path``.

    Raises:
        ImportError: with a message naming ``path`` when the module or the name does not exist.
    """
    if not isinstance(path, str) or ("." not in path and ":" not in path):
        raise ImportError(f"'{path}' is not a dotted path like 'package.module.Name'")
    try:
        return pkgutil.resolve_name(path)
    except ValueError:
        raise ImportError(f"'{path}' is not a dotted path like 'package.module.Name'") from None
    except ImportError as error:
        raise ImportError(f"'{path}': {error}") from None
    except AttributeError as error:
        owner = getattr(error.obj, "__name__", type(error.obj).__name__)
        kind = "module" if isinstance(error.obj, ModuleType) else "object"
        raise ImportError(f"'{path}': {kind} '{owner}' has no '{error.name}'") from None


def class_path(obj: object) -> str:
    """The dotted path of ``obj``'s class, the inverse of :func:`import_object`."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"
