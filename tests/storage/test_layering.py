"""The storage layer imports nothing of the layers above it (see ``digideep/storage/__init__.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import digideep.storage

ROOT = Path(digideep.storage.__file__).parent
ABOVE = ("digideep.pipeline", "digideep.memory", "digideep.tracking", "digideep.agents")


def imported_modules(source: Path) -> set[str]:
    """Every module ``source`` imports, function-level imports included; for ``from a import b``
    both ``a`` and ``a.b`` (``b`` may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{source}: a relative import; write it absolute"
            found.add(node.module or "")
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def is_above(module: str) -> bool:
    return any(module == layer or module.startswith(f"{layer}.") for layer in ABOVE)


def test_storage_imports_no_layer_above_it():
    modules = sorted(ROOT.rglob("*.py"))
    assert len(modules) > 5
    crossing = {
        path.relative_to(ROOT).as_posix(): sorted(filter(is_above, imported_modules(path)))
        for path in modules
    }
    assert {path: names for path, names in crossing.items() if names} == {}


def test_the_check_sees_an_import_from_above(tmp_path: Path):
    source = tmp_path / "example.py"
    source.write_text("def f():\n    from digideep import memory\n    import digideep.pipeline.runner\n")
    assert {"digideep.memory", "digideep.pipeline.runner"} <= set(filter(is_above, imported_modules(source)))
