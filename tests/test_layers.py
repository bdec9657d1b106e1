"""Layers point one way: no import cycle between the packages of ``digideep/``, nor between its modules.

The import graph is read from the source with :mod:`ast`: every import that runs, function-level ones
included; imports under ``if TYPE_CHECKING:`` never run and are left out. ``from a import b`` is an
edge to the module ``a.b`` where there is one, else to ``a``. A package cycle is a cycle between the
children of one package (``digideep.pipeline`` -> ``digideep.tracking`` -> ``digideep.pipeline``, or
between ``digideep.memory.durable`` and a module of ``digideep.memory``) once each module is counted
as the child it lies under.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path

import digideep

ROOT = Path(digideep.__file__).parent


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file under the package ``root`` (a package is its ``__init__``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree`` that run, the bodies of ``if TYPE_CHECKING:`` left out."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.orelse:
                yield from runtime_imports(ast.Module(body=[child], type_ignores=[]))
        else:
            yield from runtime_imports(node)


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports."""
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in runtime_imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, node.module] if node.module else parts)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules.keys()
            targets.update(submodules)
            if len(submodules) < len(node.names):
                targets.add(base)
        edges = set()
        for target in targets:
            while target not in modules and "." in target:  # import a.b.name: the module a.b
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def package_graphs(graph: Mapping[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """Package -> the graph between its children, each module counted as the child it lies under."""
    packages = {name.rpartition(".")[0] for name in graph if "." in name}
    result = {}
    for package in sorted(packages):
        prefix = f"{package}."

        def child(module: str, prefix: str = prefix) -> str | None:
            if not module.startswith(prefix):
                return None
            return prefix + module[len(prefix) :].split(".")[0]

        edges: dict[str, set[str]] = {}
        for source, targets in graph.items():
            a = child(source)
            for target in targets:
                b = child(target)
                if a and b and a != b:
                    edges.setdefault(a, set()).add(b)
        result[package] = edges
    return result


def shortest_cycle(graph: Mapping[str, set[str]], start: str) -> list[str] | None:
    """The shortest path ``start -> ... -> start`` in ``graph``, or None."""
    parents: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parents[path[-1]])
                return [*reversed(path), start]
            if nxt not in parents:
                parents[nxt] = node
                queue.append(nxt)
    return None


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph`` (``[a, b, a]``), each found once, from its first member in sorted order."""
    found: dict[frozenset[str], list[str]] = {}
    for node in sorted(graph):
        cycle = shortest_cycle(graph, node)
        if cycle and frozenset(cycle) not in found:
            found[frozenset(cycle)] = cycle
    return sorted(found.values())


def all_cycles(root: Path) -> list[str]:
    """One line per cycle between modules, and between children of a package where one is a package
    (a cycle of modules alone is already named as a module cycle)."""
    modules = module_files(root)
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph = import_graph(modules)
    lines = [f"module cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    for package, edges in package_graphs(graph).items():
        lines += [
            f"package cycle in {package}: {' -> '.join(cycle)}"
            for cycle in cycles(edges)
            if packages.intersection(cycle)
        ]
    return lines


def test_digideep_has_no_import_cycle():
    assert len(module_files(ROOT)) > 50
    assert all_cycles(ROOT) == []


def test_the_check_names_a_package_cycle_and_a_module_cycle(tmp_path: Path):
    package = tmp_path / "lib"
    for folder in ("low", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "high" / "run.py").write_text("from lib.low import store\n")
    (package / "low" / "store.py").write_text("def f():\n    from lib.high.run import g\n")
    (package / "low" / "a.py").write_text("from . import b\n")
    (package / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import lib.high\n"
    )
    (package / "low" / "c.py").write_text("import lib.low.d\n")
    (package / "low" / "d.py").write_text("from lib.low.c import name\n")
    assert all_cycles(package) == [
        "module cycle: lib.high.run -> lib.low.store -> lib.high.run",
        "module cycle: lib.low.c -> lib.low.d -> lib.low.c",
        "package cycle in lib: lib.high -> lib.low -> lib.high",
    ]
