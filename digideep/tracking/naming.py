"""MLflow names and values: where a run is tracked, and how digideep's names become MLflow keys.

MLflow's limits (``mlflow/utils/validation.py`` of mlflow 3.x, the same on a tracking server):

* keys of params, metrics and tags: at most 250 characters (``MAX_ENTITY_KEY_LENGTH``), only
  alphanumerics, ``_ - . / :`` and spaces, and a key must equal its own ``posixpath.normpath`` (no
  leading ``/``, no ``//``, no ``.`` or ``..`` parts);
* param values: at most 6000 characters (``MAX_PARAM_VAL_LENGTH``); tag values: 8000
  (``MAX_TAG_VAL_LENGTH``);
* one ``log_batch`` call: at most 1000 metrics and 100 params or tags.

:func:`mlflow_key` turns any name into a valid key (the Monitor's ``/explore/train/episode_return``
becomes ``explore/train/episode_return``) and :func:`shorten` cuts long values with a visible
marker instead of failing, so a params tree of any shape can be logged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from digideep.storage.location import is_url
from digideep.utility.flat_keys import flatten_dict

__all__ = [
    "DEFAULT_CURVE_METRICS",
    "DEFAULT_DATA_ROOT",
    "EXPERIMENT_TAGS",
    "MAX_KEY_LENGTH",
    "MAX_METRICS_PER_BATCH",
    "MAX_PARAMS_PER_BATCH",
    "MAX_PARAM_VALUE_LENGTH",
    "MAX_TAG_VALUE_LENGTH",
    "artifact_location_of",
    "data_root_of",
    "ensure_store",
    "experiment_name",
    "flatten_params",
    "is_http_uri",
    "metrics_from_summary",
    "mlflow_key",
    "open_experiment",
    "resolve_tracking_uri",
    "shorten",
    "sqlite_path",
    "tracking_uri_of",
]

MAX_KEY_LENGTH = 250
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
DEFAULT_DATA_ROOT = Path("data")
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}
"""Tags of the experiments digideep creates: MLflow 3's UI opens them in its model-training view."""
TRAIN_RETURN_METRIC = "explore/train/episode_return"
"""The stochastic training return: what ``digideep runs`` lists by default."""
TEST_RETURN_METRIC = "explore/test/episode_return"
"""The deterministic test return, the score a run is judged by: what ``runs compare`` plots by default."""
DEFAULT_CURVE_METRICS = (TRAIN_RETURN_METRIC, TEST_RETURN_METRIC)
"""The metrics of a learning curve (the run's ``plots/learning_curve.png``, ``digideep runs compare``)."""

_BAD_CHARACTERS = re.compile(r"[^/\w.\- :]")


def mlflow_key(name: str) -> str:
    """A valid MLflow param/metric key for ``name``.

    Characters MLflow refuses become ``_``; leading, trailing and repeated ``/`` are dropped;
    ``.`` and ``..`` parts become ``_`` and ``__``; a key over 250 characters keeps its first 241
    and ends with ``_`` and 8 hex digits of its hash, so distinct long names stay distinct.

    >>> mlflow_key("/explore/train/episode_return")
    'explore/train/episode_return'
    >>> mlflow_key("losses//q(f)/../x")
    'losses/q_f_/__/x'
    """
    parts = [part for part in _BAD_CHARACTERS.sub("_", str(name)).split("/") if part]
    parts = ["_" * len(part) if part in (".", "..") else part for part in parts]
    key = "/".join(parts) or "_"
    if len(key) > MAX_KEY_LENGTH:
        digest = hashlib.sha1(key.encode()).hexdigest()[:8]
        key = key[: MAX_KEY_LENGTH - 9].rstrip("/") + "_" + digest
    return key


def shorten(value: str, limit: int = MAX_PARAM_VALUE_LENGTH) -> str:
    """``value`` cut to at most ``limit`` characters, ending with a marker that says how much was cut.

    >>> shorten("x" * 30, limit=24)
    'xxxxxx...[+24 chars cut]'
    """
    if len(value) <= limit:
        return value
    cut = len(value) - limit
    while True:  # the marker's own length changes how much must be cut (by a digit at most)
        marker = f"...[+{cut} chars cut]"
        keep = max(limit - len(marker), 0)
        if len(value) - keep == cut:
            return value[:keep] + marker
        cut = len(value) - keep


def _format_value(value: Any) -> str:
    """A param value as text: strings as they are, classes and functions by dotted name, else JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, type) or callable(value):
        module = getattr(value, "__module__", None)
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        if module and name:
            return f"{module}.{name}"
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)
    try:
        return json.dumps(value, default=_format_value, sort_keys=False)
    except (TypeError, ValueError):
        return repr(value)


def flatten_params(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a params tree into MLflow params: ``{"agents/sac/args/lr": "0.0003", ...}``.

    Nested dicts become ``/``-joined keys (see :func:`mlflow_key`); lists, tuples and other leaves
    become text (JSON where possible, classes and functions by dotted name), shortened to MLflow's
    value limit by :func:`shorten`. Keys that collide after cleaning keep their first value.

    Args:
        tree: the nested params (or cpanel) dict.
        prefix: prepended to every key, e.g. ``"cpanel"``.
    """
    flat: dict[str, str] = {}
    for path, value in flatten_dict(tree).items():
        key = mlflow_key(f"{prefix}/{path}" if prefix else path)
        flat.setdefault(key, shorten(_format_value(value)))
    return flat


def metrics_from_summary(
    summary: Mapping[str, Mapping[str, float]], stats: Iterable[str] = ("mean",), prefix: str = ""
) -> dict[str, float]:
    """Metrics from a Monitor or Profiler summary (``{name: {"mean": ..., "max": ..., ...}}``).

    The first statistic in ``stats`` is logged under the plain name, the others with a ``_<stat>``
    suffix: ``stats=("mean", "max")`` on ``/explore/train/episode_return`` gives
    ``explore/train/episode_return`` (the mean) and ``explore/train/episode_return_max``.
    Statistics a name lacks are skipped.

    Args:
        summary: ``monitor.summary()`` or ``profiler.summary()``.
        stats: which statistics to log, the plainly named one first.
        prefix: prepended to every name, e.g. ``"time"`` for profiler totals.
    """
    stats = list(stats)
    metrics: dict[str, float] = {}
    for name, values in summary.items():
        base = mlflow_key(f"{prefix}/{name}" if prefix else name)
        for index, stat in enumerate(stats):
            if stat in values:
                metrics[base if index == 0 else f"{base}_{stat}"] = float(values[stat])
    return metrics


def is_http_uri(uri: str) -> bool:
    """Whether ``uri`` names a tracking server (``http://`` or ``https://``)."""
    return uri.startswith(("http://", "https://"))


def resolve_tracking_uri(
    tracking_uri: str | None = None, data_root: str | Path = DEFAULT_DATA_ROOT
) -> tuple[str, str | None]:
    """The tracking URI to use and the artifact location for experiments this process creates.

    Precedence: ``tracking_uri`` when given, else the ``MLFLOW_TRACKING_URI`` environment variable,
    else the embedded store ``sqlite:///<data_root>/mlflow.db`` (absolute path). For a ``sqlite``
    store the artifacts go to ``mlartifacts/`` beside the database file (``<data_root>/mlartifacts``
    by default), and a missing store is created whole (:func:`ensure_store`); for a server the
    server decides (None).

    Returns:
        ``(uri, artifact_location)``; ``artifact_location`` is a ``file://`` URI or None.
    """
    uri = tracking_uri_of(tracking_uri, data_root)
    ensure_store(uri)
    return uri, artifact_location_of(uri)


def artifact_location_of(uri: str) -> str | None:
    """Where experiments created in the embedded store ``uri`` keep their artifacts (``mlartifacts/``
    beside the database, a ``file://`` URI); None for a server, which decides itself."""
    db_path = sqlite_path(uri)
    return None if db_path is None else (db_path.parent / "mlartifacts").as_uri()


def ensure_store(uri: str) -> None:
    """Create the embedded store of a ``sqlite:///`` ``uri`` when it is missing, whole or not at all.

    MLflow would create it on first use, migration by migration, and a process killed meanwhile left
    a store no command could use again (:mod:`digideep.tracking.stores`). Other URIs are left alone.
    """
    db_path = sqlite_path(uri)
    if db_path is not None:
        from digideep.tracking.stores import create_mlflow_store

        create_mlflow_store(db_path, artifact_location_of(uri))


def open_experiment(client: Any, name: str, artifact_location: str | None = None) -> str:
    """The id of experiment ``name``, created when missing, tagged to open in MLflow's training view.

    A missing experiment is created with its artifacts at ``artifact_location``; None means where the
    client's store keeps them (:func:`artifact_location_of`: beside an embedded store, not in the cwd;
    a server decides itself).

    MLflow 3's UI opens an experiment without the ``mlflow.experimentKind`` tag in its GenAI view
    (traces, prompts); digideep's runs are model training, so the tag is set, on an existing
    experiment that lacks it too.

    Raises:
        ValueError: the experiment is deleted.
    """
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        if artifact_location is None:
            artifact_location = artifact_location_of(client.tracking_uri)
        try:
            return client.create_experiment(name, artifact_location=artifact_location, tags=EXPERIMENT_TAGS)
        except Exception:  # created by another process meanwhile
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage != "active":
        raise ValueError(
            f"experiment '{name}' is deleted; restore it (mlflow experiments restore) or name another"
        )
    for key, value in EXPERIMENT_TAGS.items():
        if experiment.tags.get(key) != value:
            client.set_experiment_tag(experiment.experiment_id, key, value)
    return experiment.experiment_id


def data_root_of(session_root: str | Path) -> Path:
    """The folder of the embedded store that the runs of sessions under ``session_root`` use.

    The store lives beside the sessions folder: ``--session-path P`` keeps ``mlflow.db`` and
    ``mlartifacts/`` in ``P``'s parent (``data`` for the default ``data/sessions``). Sessions on
    object storage (``s3://...``) keep their working folders in ``data/cache``, so theirs is ``data``
    (relative to the folder the run started in). ``$MLFLOW_TRACKING_URI`` or a ``tracking_uri``
    option, when set, replace the embedded store altogether (:func:`tracking_uri_of`).
    """
    if is_url(session_root):
        return DEFAULT_DATA_ROOT
    text = str(session_root)
    path = Path(text[len("file://") :] if text.lower().startswith("file://") else text)
    return path.parent


def tracking_uri_of(tracking_uri: str | None = None, data_root: str | Path = DEFAULT_DATA_ROOT) -> str:
    """The URI :func:`resolve_tracking_uri` picks, without creating anything."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    return uri or "sqlite:///" + str((Path(data_root) / "mlflow.db").resolve())


def sqlite_path(uri: str) -> Path | None:
    """The absolute database path of a ``sqlite:///`` URI, None for other URIs."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :]).expanduser().resolve()


def experiment_name(params_module: str, cpanel: Mapping[str, Any] | None = None) -> str:
    """One experiment per parameter file unless the cpanel names another (key ``"experiment"``)."""
    named = (cpanel or {}).get("experiment")
    return str(named) if named else params_module


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--tracking-uri``, and ``--session-path`` or ``--data-root``: which MLflow store to read."""
    parser.add_argument(
        "--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or the embedded store)"
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--session-path",
        metavar="PATH",
        help="the --session-path the runs trained with: read the embedded store beside it (PATH/../mlflow.db)",
    )
    store.add_argument(
        "--data-root",
        default=str(DEFAULT_DATA_ROOT),
        help="folder of the embedded store (default: %(default)s)",
    )
