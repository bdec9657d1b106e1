"""Griffe extension for the API reference: render the reST habits of digideep's docstrings in Markdown.

digideep's docstrings are Google style but keep a few reST habits that Markdown shows verbatim:
roles (``:class:`~digideep.memory.Memory```), ``Example::`` before a literal block, and simple
tables framed by ``=====  =====`` lines. This extension rewrites them when mkdocstrings loads the
code (``extensions`` in ``mkdocs.yml``): roles become inline code (``~`` keeps the last name), ``::``
becomes ``:``, and simple tables become Markdown tables. The source files are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|obj|exc|ref):`(~?)([^`]+)`")
_LITERAL = re.compile(r"(\S)::$", re.MULTILINE)
_BORDER = re.compile(r"^=+( +=+)+$")


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _columns(border: str) -> list[int]:
    """Start offsets of the columns of a simple-table border line."""
    return [m.start() for m in re.finditer(r"=+", border)]


def _cells(line: str, starts: list[int]) -> list[str]:
    ends = [*starts[1:], None]
    return [line[a:b].strip().replace("|", r"\|") for a, b in zip(starts, ends, strict=True)]


def simple_tables(text: str) -> str:
    """Rewrite reST simple tables (a border, rows, a border; optionally a header row and a second
    border) as Markdown tables; other lines pass unchanged."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _BORDER.match(lines[i].strip()):
            out.append(lines[i])
            i += 1
            continue
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        starts = _columns(lines[i].strip())
        block: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip():
            block.append(lines[i][len(indent) :])
            i += 1
        borders = sum(1 for line in block if _BORDER.match(line.strip()))
        rows = [_cells(line, starts) for line in block if not _BORDER.match(line.strip())]
        header = rows.pop(0) if borders >= 2 and rows else [""] * len(starts)
        out.append("")
        out.append(indent + "| " + " | ".join(header) + " |")
        out.append(indent + "|" + " --- |" * len(starts))
        out += [indent + "| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


class ReSTHabits(griffe.Extension):
    """Rewrite every loaded object's docstring (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is None:
            return
        value = _ROLE.sub(_role, docstring.value)
        value = _LITERAL.sub(r"\1:", value)
        docstring.value = simple_tables(value) if "==" in value else value
