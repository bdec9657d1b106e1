"""Export folders: the runs of a selection as plain JSON files, which a report reads beside MLflow.

An export folder holds ``runs/<run_id>.json``, one :class:`~digideep.report.records.RunRecord` each
(id, experiment, status, tags, params and every point of its ``eval/*`` metrics), and
``manifest.json``: the format and its version, the selection in words and as criteria, the store it
was read from (without credentials), the time of the export and the list of run files. A folder is
written under a temporary hidden sibling, its manifest last, and renamed into place, so a folder at
the named path is a complete export; a reader refuses one without a manifest, of another format or
version, or with a run file missing or damaged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digideep.errors import UsageError
from digideep.report.records import Criteria, Point, RunRecord, read_store, store_name
from digideep.report.selection import check_criteria, select_records
from digideep.storage.files import fsync_dir

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = [
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "Export",
    "check_new_folder",
    "describe_exports",
    "export_runs",
    "read_export",
    "read_exports",
]

FORMAT = "digideep-runs-export"
VERSION = 1
"""The version this digideep writes and reads; a reader refuses any other."""
MANIFEST = "manifest.json"
RUNS = "runs"


@dataclass(frozen=True)
class Export:
    """An export folder as read: its selection in words and its runs (``source`` = the folder)."""

    folder: Path
    description: str
    records: list[RunRecord]


def check_new_folder(folder: Path) -> None:
    """Refuse an export into anything but a new or empty folder.

    Raises:
        UsageError: ``folder`` is a file or a folder that is not empty.
    """
    if folder.is_dir() and any(folder.iterdir()):
        raise UsageError(f"--out {folder} exists and is not empty; name a new folder")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--out {folder} is a file; name a new folder")


def export_runs(
    client: MlflowClient, criteria: Criteria, folder: Path, finished_only: bool = False
) -> Export:
    """Write the runs of the store at ``client`` that match ``criteria`` into the new ``folder``.

    Parent runs are left out; runs that did not finish are written with their status (a report
    counts them as left out, and reads them with ``--at`` once they reached it), or, with
    ``finished_only``, left out too: a folder kept as a record of results holds no run that a later
    export would show further on. The runs must pass every check of a report first.

    Raises:
        UsageError: no criterion, ``folder`` not new or empty, or any refusal of
            :func:`~digideep.report.selection.select_records`.
    """
    check_criteria(criteria.benchmark, criteria.experiment, criteria.tags)
    check_new_folder(folder)
    source = store_name(client.tracking_uri)
    records = [r for r in read_store(client, criteria) if r.is_cell]
    select_records(records, criteria.describe(), [source])  # refuses what a report would refuse
    description = criteria.describe()
    if finished_only:
        records = [r for r in records if r.status == "FINISHED"]
        description += ", finished runs only"
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "selection": description,
        "criteria": criteria.as_dict(),
        "store": source,
        "exported": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": [f"{RUNS}/{r.run_id}.json" for r in records],
    }
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.partial-"))
    try:
        (partial / RUNS).mkdir()
        for record in records:
            _write_text(partial / RUNS / f"{record.run_id}.json", _run_text(record))
        _write_text(partial / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")  # last
        partial.chmod(0o755)  # mkdtemp's 0o700 would hide the folder from the people it is made for
        os.rename(partial, folder)  # replaces an empty folder; fails on one filled meanwhile
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    fsync_dir(folder.parent)
    return Export(folder, description, [replace(r, source=str(folder)) for r in records])


def describe_exports(exports: list[Export]) -> str:
    """The selections of ``exports`` in words, each said once, in order; selections that differ only
    in the benchmark's name are said together, e.g. ``benchmarks a, b, c (finished runs only)``."""
    descriptions = list(dict.fromkeys(export.description for export in exports))
    found = [re.fullmatch(r"benchmark (\S+?)((?:, .*)?)", text) for text in descriptions]
    if len(descriptions) < 2 or not all(found) or len({match[2] for match in found}) > 1:
        return " and ".join(descriptions)
    rest = found[0][2].removeprefix(", ")
    return f"benchmarks {', '.join(match[1] for match in found)}" + (f" ({rest})" if rest else "")


def read_exports(folder: Path) -> list[Export]:
    """The export at ``folder``, or, when ``folder`` is none, every export in the folders below it (a
    folder that collects exports, one per machine or per benchmark), in the order of their paths.
    Hidden folders are skipped (an export being written is a hidden sibling of its path).

    Raises:
        UsageError: as :func:`read_export`, for ``folder`` or an export below it; a folder that is no
            export and holds none; a folder below that holds run files without a manifest (an export
            cut short or damaged, whose runs would be left out unsaid).
    """
    if folder.is_dir() and not (folder / MANIFEST).is_file():

        def visible(path: Path) -> bool:
            return not any(part.startswith(".") for part in path.relative_to(folder).parts)

        below = sorted(path.parent for path in folder.rglob(MANIFEST) if visible(path))
        if below:
            for runs in sorted(folder.rglob(RUNS)):
                if visible(runs) and any(runs.glob("*.json")) and not (runs.parent / MANIFEST).is_file():
                    raise UsageError(
                        f"--from {folder}: {runs.parent} holds run files but no {MANIFEST}, so it is not "
                        f"a complete export; export it again, or move it out of {folder}"
                    )
            return [read_export(path) for path in below]
    return [read_export(folder)]


def read_export(folder: Path) -> Export:
    """The export at ``folder``, every run file read and checked.

    Raises:
        UsageError: no such folder, no manifest (not an export, or an interrupted one), another
            format or an unknown version, or a run file missing or damaged.
    """
    if not folder.is_dir():
        raise UsageError(f"--from {folder}: no such folder")
    path = folder / MANIFEST
    if not path.is_file():
        raise UsageError(
            f"--from {folder} has no {MANIFEST}: it is not a complete 'digideep runs export' folder, "
            "nor a folder that holds some"
        )
    manifest = _read_json(path, folder)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UsageError(
            f"--from {folder}: {MANIFEST} is not the manifest of a 'digideep runs export' folder"
        )
    if manifest.get("version") != VERSION:
        raise UsageError(
            f"--from {folder} is export format version {manifest.get('version')!r}; this digideep reads "
            f"version {VERSION}: export it again, or report with the digideep that wrote it"
        )
    try:
        description = str(manifest["selection"])
        records = [_record(_read_json(folder / name, folder), str(folder)) for name in manifest["runs"]]
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise UsageError(
            f"--from {folder} is damaged ({type(error).__name__}: {error}); export it again"
        ) from None
    return Export(folder, description, records)


def _run_text(record: RunRecord) -> str:
    """A run file: indented JSON, its metrics last with one point per line."""
    fields = {
        "run_id": record.run_id,
        "experiment": record.experiment,
        "status": record.status,
        "tags": dict(record.tags),
        "params": dict(record.params),
    }
    head = json.dumps(fields, indent=1, sort_keys=True).removesuffix("\n}")
    histories = ",\n".join(
        f"  {json.dumps(key)}: [\n" + ",\n".join(f"   {json.dumps(p._asdict())}" for p in points) + "\n  ]"
        for key, points in sorted(record.metrics.items())
    )
    return f'{head},\n "metrics": {{\n{histories}\n }}\n}}\n'


def _record(data: dict[str, Any], source: str) -> RunRecord:
    """A record from the JSON of a run file (AttributeError, KeyError, TypeError or ValueError if damaged)."""
    metrics = {
        str(key): tuple(Point(int(p["step"]), int(p["timestamp"]), float(p["value"])) for p in points)
        for key, points in data["metrics"].items()
    }
    return RunRecord(
        run_id=str(data["run_id"]),
        experiment=str(data["experiment"]),
        status=str(data["status"]),
        tags={str(k): str(v) for k, v in data["tags"].items()},
        params={str(k): str(v) for k, v in data["params"].items()},
        metrics=metrics,
        source=source,
    )


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())


def _read_json(path: Path, folder: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        name = path.relative_to(folder)
        raise UsageError(f"--from {folder}: {name} cannot be read ({error}); export it again") from None
