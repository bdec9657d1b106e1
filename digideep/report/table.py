"""The report as plain text: the per-environment table, the aggregates and P(A > B).

Columns of the table: environment, group (algorithm, ``@variant`` when not the default), seeds, mean
score over seeds, its 95 % interval, and the published values of the same method at the same frame
budget with their source names; ``BELOW`` marks a row whose whole interval lies below one of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from digideep.report.build import Report, Row

__all__ = ["BELOW_MARK", "format_report", "table_rows"]

BELOW_MARK = "BELOW"
HEADERS = ("env", "algorithm", "seeds", "mean", "95% CI", "published (same budget)", "")


def table_rows(report: Report) -> list[tuple[str, ...]]:
    """The table's cells as text, one tuple per row (the HTML page shows the same cells)."""
    return [_cells(row) for row in report.rows]


def _cells(row: Row) -> tuple[str, ...]:
    published = "; ".join(f"{p.value:.1f} ({p.name}, {p.measured_on})" for p in row.published) or "-"
    return (
        row.env,
        row.group,
        str(row.seeds),
        f"{row.score.point:.1f}",
        f"[{row.score.low:.1f}, {row.score.high:.1f}]",
        published,
        BELOW_MARK if row.below else "",
    )


def format_report(report: Report) -> str:
    """The whole report as text for the terminal."""
    protocol = report.selection.protocol
    lines = [
        f"report of {report.selection.description}: {len(report.selection.runs)} runs{_left_out(report)}, "
        f"frame budget {protocol.frame_budget}, evaluation every {protocol.frame_interval} frames over "
        f"{protocol.episodes} episodes; score = mean eval/return of the last {report.last} evaluation(s)",
        "",
        _align([HEADERS, *table_rows(report)]),
    ]
    if report.aggregates:
        lines += ["", f"aggregates ({report.scale}, 95% CI over {report.reps} bootstrap resamples)"]
        lines.append(_align([("algorithm", "metric", "value", "95% CI"), *_aggregate_cells(report)]))
    for a, b, p in report.improvements:
        lines += ["", f"P({a} > {b}) = {p.point:.2f}  95% CI [{p.low:.2f}, {p.high:.2f}]"]
    sources = sorted({p.source for row in report.rows for p in row.published})
    if sources:
        lines += ["", "sources:", *(f"  {source}" for source in sources)]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def _left_out(report: Report) -> str:
    count = report.selection.left_out
    return f" ({count} not finished, left out)" if count else ""


def _aggregate_cells(report: Report) -> list[tuple[str, ...]]:
    return [
        (group, name, f"{value.point:.3f}", f"[{value.low:.3f}, {value.high:.3f}]")
        for group, metrics in report.aggregates.items()
        for name, value in metrics.items()
    ]


def _align(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
