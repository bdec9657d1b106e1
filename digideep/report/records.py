"""Tracked runs as a report reads them, whether from an MLflow store or from an export folder.

A :class:`RunRecord` holds what MLflow keeps of one run that a report needs: its id, experiment
name, status, tags, params and the histories of its ``eval/*`` metrics as logged (every point, with
its timestamp, so that a resumed run's repeated steps are resolved the same way wherever it is read).
:func:`read_store` makes records from a store and :func:`digideep.report.export.read_export` from a
folder; :func:`digideep.report.selection.select_records` turns records of either into the checked
:class:`~digideep.report.selection.Selection` every statistic is computed from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from digideep.errors import UsageError
from digideep.tracking.tags import RESUMES_TAG

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = [
    "BENCHMARK_TAG",
    "EVAL_PREFIX",
    "KIND_TAG",
    "RESUMES_TAG",
    "Criteria",
    "Point",
    "RunRecord",
    "parent_run_id",
    "read_store",
    "search_runs",
    "store_name",
]

KIND_TAG = "digideep.kind"
BENCHMARK_TAG = "digideep.benchmark"
EVAL_PREFIX = "eval/"
"""Metrics whose histories a record keeps (the report reads ``eval/return``)."""


class Point(NamedTuple):
    """One logged value of a metric: ``step`` (training frames), ``timestamp`` (ms) and ``value``."""

    step: int
    timestamp: int
    value: float


@dataclass(frozen=True)
class RunRecord:
    """One tracked run: two records are equal when everything but where they were read is equal."""

    run_id: str
    experiment: str  # the experiment's name
    status: str  # MLflow's: FINISHED, RUNNING, FAILED, KILLED, SCHEDULED
    tags: Mapping[str, str]
    params: Mapping[str, str]
    metrics: Mapping[str, tuple[Point, ...]]  # eval/* key -> its points in the order MLflow returned them
    source: str = field(default="", compare=False)  # the store's URI or the export folder it was read from

    @property
    def is_cell(self) -> bool:
        """Whether this is a run that trained (not a benchmark's or study's parent run)."""
        return KIND_TAG not in self.tags

    def history(self, key: str) -> tuple[Point, ...]:
        """The points of metric ``key`` (empty when the run never logged it)."""
        return self.metrics.get(key, ())


@dataclass(frozen=True)
class Criteria:
    """Which runs to read: those matching every given criterion (none given: every run). A tag key
    given more than once matches any of its values (``env=A``, ``env=B``: runs on A or on B).

    Raises:
        UsageError: a tag that is not ``KEY=VALUE`` (on construction).
    """

    benchmark: str | None = None
    experiment: str | None = None
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for pair in self.tags:
            key, sep, _ = pair.partition("=")
            if not sep or not key:
                raise UsageError(f"--tag '{pair}' is not KEY=VALUE; write e.g. --tag env=Hopper-v5")

    @property
    def given(self) -> bool:
        """Whether any criterion is given."""
        return bool(self.benchmark or self.experiment or self.tags)

    def wanted(self) -> list[tuple[str, tuple[str, ...]]]:
        """What a run must carry: ``(key, values)``, a tag ``key`` with one of ``values``, each pair
        required; the benchmark's tag first, then each ``--tag`` key with its values in order."""
        values: dict[str, tuple[str, ...]] = {}
        for key, _, value in (pair.partition("=") for pair in self.tags):
            values[key] = tuple(dict.fromkeys((*values.get(key, ()), value)))
        benchmark = [(BENCHMARK_TAG, (self.benchmark,))] if self.benchmark else []
        return benchmark + list(values.items())

    def describe(self) -> str:
        """The criteria in words, e.g. ``experiment E, benchmark B, tag env=Hopper-v5 or env=Ant-v5``."""
        words = [f"experiment {self.experiment}"] if self.experiment else []
        words += [f"benchmark {self.benchmark}"] if self.benchmark else []
        tags = self.wanted()[1:] if self.benchmark else self.wanted()
        words += ["tag " + " or ".join(f"{key}={value}" for value in values) for key, values in tags]
        return ", ".join(words)

    def matches_tags(self, tags: Mapping[str, str]) -> bool:
        """Whether a run with ``tags`` carries every wanted tag, each with one of its values."""
        return all(tags.get(key) in values for key, values in self.wanted())

    def matches(self, record: RunRecord) -> bool:
        """Whether ``record`` meets every criterion (:func:`read_store` reads a store's runs by the same)."""
        if self.experiment and record.experiment != self.experiment:
            return False
        return self.matches_tags(record.tags)

    def as_dict(self) -> dict[str, Any]:
        """The criteria as plain values (an export's manifest records them)."""
        return {"benchmark": self.benchmark, "experiment": self.experiment, "tags": list(self.tags)}


def read_store(client: MlflowClient, criteria: Criteria) -> list[RunRecord]:
    """The runs of the store at ``client`` that match ``criteria``, parent runs included.

    Raises:
        UsageError: ``criteria`` names an experiment the store does not have.
    """
    if criteria.experiment:
        found = client.get_experiment_by_name(criteria.experiment)
        if found is None:
            raise UsageError(
                f"no experiment '{criteria.experiment}' at {client.tracking_uri}; list them with 'digideep runs'"
            )
        names = {found.experiment_id: found.name}
    else:
        names = {e.experiment_id: e.name for e in client.search_experiments()}
    # the search is over the chosen experiment only; it has no OR for tags, so a key of several
    # values is matched on each run found (matches_tags checks every key, the searched ones again)
    wanted = criteria.wanted()
    filters = [f"tags.`{key}` = '{_quoted(values[0])}'" for key, values in wanted if len(values) == 1]
    source = store_name(client.tracking_uri)
    records = []
    for run in search_runs(client, list(names), filters):
        if not criteria.matches_tags(run.data.tags):
            continue
        histories = {
            key: tuple(
                Point(m.step, m.timestamp, m.value) for m in client.get_metric_history(run.info.run_id, key)
            )
            for key in sorted(run.data.metrics)
            if key.startswith(EVAL_PREFIX)
        }
        records.append(
            RunRecord(
                run_id=run.info.run_id,
                experiment=names.get(run.info.experiment_id, run.info.experiment_id),
                status=run.info.status,
                tags=dict(run.data.tags),
                params=dict(run.data.params),
                metrics=histories,
                source=source,
            )
        )
    return records


def search_runs(client: MlflowClient, experiment_ids: list[str], filters: list[str]) -> list[Any]:
    """Every MLflow run of ``experiment_ids`` matching all ``filters``, over every page."""
    runs: list[Any] = []
    token = None
    while True:  # a benchmark may hold more cells than one page
        page = client.search_runs(
            experiment_ids, filter_string=" and ".join(filters), max_results=1000, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def parent_run_id(client: MlflowClient, benchmark: str | None) -> str | None:
    """The benchmark's parent run, in whatever experiment it is (the cells live in their own).

    Raises:
        UsageError: the benchmark has more than one parent run.
    """
    if not benchmark:
        return None
    filters = f"tags.`{KIND_TAG}` = 'benchmark' and tags.`{BENCHMARK_TAG}` = '{_quoted(benchmark)}'"
    ids = [e.experiment_id for e in client.search_experiments()]
    parents = search_runs(client, ids, [filters])
    if len(parents) > 1:
        listed = ", ".join(p.info.run_id for p in parents)
        raise UsageError(
            f"benchmark {benchmark} has {len(parents)} parent runs ({listed}); delete the extra ones"
        )
    return parents[0].info.run_id if parents else None


def store_name(uri: str) -> str:
    """A tracking URI without its user and password, fit to print or write into an export."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _quoted(value: str) -> str:
    return value.replace("'", "\\'")
