"""The report as one self-contained HTML page: figures inlined as base64 PNG, no other file needed."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from digideep.report.build import Report
from digideep.report.table import (
    BELOW_MARK,
    budget_words,
    left_out_words,
    machine_lines,
    table_headers,
    table_rows,
)

__all__ = ["render_html"]

STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 70em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
td.below { color: #b00; font-weight: bold; }
img { display: block; max-width: 100%; margin: 1em 0; }
code, pre { background: #f4f4f4; padding: 0.2em 0.4em; }
"""

CAPTIONS = {
    "aggregates.png": "Aggregate metrics with 95 % stratified bootstrap intervals",
    "performance_profile.png": "Performance profiles: fraction of runs above each score",
    "sample_efficiency.png": "Sample efficiency: IQM against training frames, 95 % bands",
    "improvement.png": "Probability of improvement P(X > Y), 95 % interval",
}


def render_html(report: Report, command: str) -> str:
    """The page: the selection and protocol, the command, the table, aggregates, notes and figures."""
    selection, protocol = report.selection, report.selection.protocol
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>digideep report: {_e(selection.description)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>digideep report: {_e(selection.description)}</h1>",
        "<h2>Selection</h2>",
        _list(
            [
                f"{len(selection.runs)} runs ({selection.left_out} {left_out_words(selection)}, left out)",
                f"algorithms: {', '.join(selection.groups)}",
                f"environments: {', '.join(selection.envs)}",
                f"{budget_words(selection)}, evaluation every {protocol.frame_interval} frames "
                f"over {protocol.episodes} deterministic episodes",
                f"score: mean eval/return of the last {report.last} evaluation(s); intervals: rliable's "
                f"stratified bootstrap, 95 %, {report.reps} resamples, seed {report.seed}",
            ]
        ),
        f"<p>Command: <code>{_e(command)}</code></p>",
        "<h2>Per environment</h2>",
        _table(table_headers(report), table_rows(report)),
    ]
    if report.aggregates:
        cells = [
            (group, name, f"{v.point:.3f}", f"[{v.low:.3f}, {v.high:.3f}]")
            for group, metrics in report.aggregates.items()
            for name, v in metrics.items()
        ]
        parts += [
            f"<h2>Aggregates ({_e(report.scale)})</h2>",
            *([_list(report.scale_notes)] if report.scale_notes else []),
            _table(("algorithm", "metric", "value", "95% CI"), cells),
        ]
    for a, b, p in report.improvements:
        parts.append(f"<p>P({_e(a)} &gt; {_e(b)}) = {p.point:.2f}, 95 % CI [{p.low:.2f}, {p.high:.2f}]</p>")
    if report.notes:
        parts += ["<h2>Notes</h2>", _list(report.notes)]
    if report.sources:
        parts += ["<h2>Sources of published values</h2>", _list(report.sources)]
    machines = machine_lines(selection)
    if machines:
        parts += ["<h2>Machines</h2>", "<p>Each run's attempts in order.</p>", _list(machines)]
    for name, png in report.figures.items():
        data = base64.b64encode(png).decode("ascii")
        caption = CAPTIONS.get(name, name)
        parts += [f"<h2>{_e(caption)}</h2>", f'<img alt="{_e(caption)}" src="data:image/png;base64,{data}">']
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _e(text: str) -> str:
    return html.escape(str(text))


def _list(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{_e(item)}</li>" for item in items) + "</ul>"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(cell) for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(text: str) -> str:
    mark = ' class="below"' if text == BELOW_MARK else ""
    return f"<td{mark}>{_e(text)}</td>"
