"""The report as plain text: the per-environment table, the aggregates and P(A > B).

Columns of the table: environment, group (algorithm, ``@variant`` when not the default), seeds, mean
score over seeds, its 95 % interval, each run's score, each run's resumes (how many times it continued
from a checkpoint, its ``digideep.resumes`` tag; ``?`` for a run tracked before they were counted),
and the published values of the same method at the same frame budget (within 1 %, the budget named
where it differs) with their source names; where a row's whole interval lies below one of them, a
last column marks it ``BELOW``. After the sources, where the runs recorded them, the machines each
run's attempts ran on (:func:`machine_lines`).
"""

from __future__ import annotations

from collections.abc import Sequence

from digideep.report.build import Report, Row
from digideep.report.references import Published
from digideep.report.selection import Selection

__all__ = [
    "BELOW_MARK",
    "HEADERS",
    "format_report",
    "machine_lines",
    "published_text",
    "table_headers",
    "table_rows",
]

BELOW_MARK = "BELOW"
HEADERS = (
    "env",
    "algorithm",
    "seeds",
    "mean",
    "95% CI",
    "runs (seed: score)",
    "resumes (seed: count)",
    "published (same budget)",
)
"""The table's columns; a last one, ``vs published``, is added where a row is ``BELOW``."""


def table_headers(report: Report) -> tuple[str, ...]:
    """The table's column names: :data:`HEADERS`, and ``vs published`` where some row is below one."""
    return (*HEADERS, "vs published") if any(row.below for row in report.rows) else HEADERS


def table_rows(report: Report) -> list[tuple[str, ...]]:
    """The table's cells as text, one tuple per row (the HTML page shows the same cells)."""
    marked = any(row.below for row in report.rows)
    budget = report.selection.protocol.frame_budget
    return [_cells(row, marked, budget) for row in report.rows]


def _cells(row: Row, marked: bool, budget: int) -> tuple[str, ...]:
    published = "; ".join(published_text(p, budget) for p in row.published) or "-"
    cells = (
        row.env,
        row.group,
        str(row.seeds),
        f"{row.score.point:.1f}",
        f"[{row.score.low:.1f}, {row.score.high:.1f}]",
        ", ".join(f"{seed}: {score:.1f}" for seed, score in row.runs),
        ", ".join(f"{seed}: {'?' if count is None else count}" for seed, count in row.resumes),
        published,
    )
    return (*cells, BELOW_MARK if row.below else "") if marked else cells


def published_text(published: Published, budget: int) -> str:
    """A published value with its name and environment, and its budget where it is not the run's."""
    other = f", {published.frames:,} frames" if published.frames != budget else ""
    return f"{published.value:.1f} ({published.name}, {published.measured_on}{other})"


def machine_lines(selection: Selection) -> list[str]:
    """Which machines the runs' attempts ran on (their ``digideep.machine.<n>`` tags), in lines: each
    machine lettered ``M1``, ``M2``, ... (in the order of the runs by environment, group and seed) with
    its description, the count of runs whose attempts all ran on one machine, each run whose attempts
    did not (``?``: an attempt with no tag), and the count of runs with none recorded. Empty when no
    run has a machine recorded."""
    if not any(run.machines for run in selection.runs):
        return []
    runs = sorted(selection.runs, key=lambda r: (r.env, r.group, len(r.seed), r.seed))  # seed 2 before 10
    labels: dict[str, str] = {}
    for run in runs:
        for machine in run.machines:
            if machine is not None and machine not in labels:
                labels[machine] = f"M{len(labels) + 1}"
    lines = [f"{label}  {machine}" for machine, label in labels.items()]
    alone: dict[str, int] = {}
    crossed, unrecorded = [], 0
    for run in runs:
        named = [labels[m] if m is not None else "?" for m in run.machines]
        if not named:
            unrecorded += 1
        elif "?" not in named and len(set(named)) == 1:
            alone[named[0]] = alone.get(named[0], 0) + 1
        else:
            crossed.append(f"{run.env} {run.group} seed {run.seed}: {', '.join(named)}")
    lines += [f"every attempt on {label}: {count} run{'s' * (count != 1)}" for label, count in alone.items()]
    lines += crossed
    if unrecorded:
        lines.append(
            f"not recorded (tracked before machines were): {unrecorded} run{'s' * (unrecorded != 1)}"
        )
    return lines


def format_report(report: Report) -> str:
    """The whole report as text for the terminal."""
    protocol = report.selection.protocol
    lines = [
        f"report of {report.selection.description}: {len(report.selection.runs)} runs{_left_out(report)}, "
        f"{budget_words(report.selection)}, evaluation every {protocol.frame_interval} frames over "
        f"{protocol.episodes} episodes; score = mean eval/return of the last {report.last} evaluation(s)",
        "",
        _align([table_headers(report), *table_rows(report)]),
    ]
    if report.aggregates:
        lines += ["", f"aggregates ({report.scale}, 95% CI over {report.reps} bootstrap resamples)"]
        lines += [f"  {note}" for note in report.scale_notes]
        lines.append(_align([("algorithm", "metric", "value", "95% CI"), *_aggregate_cells(report)]))
    for a, b, p in report.improvements:
        lines += ["", f"P({a} > {b}) = {p.point:.2f}  95% CI [{p.low:.2f}, {p.high:.2f}]"]
    if report.sources:
        lines += ["", "sources:", *(f"  {source}" for source in report.sources)]
    machines = machine_lines(report.selection)
    if machines:
        lines += ["", "machines (each run's attempts in order):", *(f"  {line}" for line in machines)]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def _left_out(report: Report) -> str:
    count = report.selection.left_out
    return f" ({count} {left_out_words(report.selection)}, left out)" if count else ""


def budget_words(selection: Selection) -> str:
    """``frame budget N``, or ``scored at N frames of a budget of M`` for a selection scored early."""
    if selection.trained_budget is None:
        return f"frame budget {selection.protocol.frame_budget}"
    return f"scored at {selection.protocol.frame_budget} frames of a budget of {selection.trained_budget}"


def left_out_words(selection: Selection) -> str:
    """What the runs left out of ``selection`` lack."""
    if selection.trained_budget is None:
        return "not finished"
    return f"not finished nor evaluated at {selection.protocol.frame_budget} frames yet"


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
