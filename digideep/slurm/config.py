"""The job config of ``digideep slurm``: the resources and behaviour of a run's Slurm job.

A small YAML (or JSON) file, every key optional; a key left out is left to the cluster's defaults::

    partition: gpu            # --partition (default: the cluster's default partition)
    account: my-lab           # --account
    qos: normal               # --qos
    time: "24:00:00"          # --time, the job's wall-clock limit
    cpus: 8                   # --cpus-per-task
    mem: 32G                  # --mem
    gres: gpu:1               # --gres
    signal_seconds: 300       # --signal=B:USR1@300: warning before the limit, time to checkpoint
    requeue: true             # requeue the job when the run stopped before finishing
    prefect: false            # run the Prefect train flow in the job instead of the plain loop
    log_dir: /shared/logs     # the job's output file (default: <session-path>/slurm)
    setup: module load cuda   # shell lines run before digideep (modules, conda activate, ...)
    env: {MLFLOW_TRACKING_URI: http://mlflow.lab:5000}   # exported in the job
    sbatch: [--constraint=a100]                          # further sbatch options, verbatim
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from digideep.errors import UsageError

__all__ = ["SlurmConfig", "load_config"]

_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^(\d+-\d+)$|^UNLIMITED$|^INFINITE$", re.I)


@dataclass(frozen=True)
class SlurmConfig:
    """What a run's job asks Slurm for, and how the job behaves at its time limit.

    Attributes:
        partition: ``--partition``; None: the cluster's default.
        account: ``--account``; None: the user's default.
        qos: ``--qos``; None: the default.
        time: ``--time`` in a form Slurm reads (``MM``, ``HH:MM:SS``, ``D-HH``); None: the
            partition's default.
        cpus: ``--cpus-per-task``.
        mem: ``--mem``, e.g. ``16G``.
        gres: ``--gres``, e.g. ``gpu:1``.
        signal_seconds: Slurm warns the job's shell this many seconds before the time limit
            (``--signal=B:USR1@N``), and digideep has that long to finish its iteration and write a
            checkpoint.
        requeue: requeue the job when the warning stopped digideep before the run finished; the
            requeued job resumes the session.
        prefect: run the Prefect ``train`` flow in the job (reporting to ``PREFECT_API_URL`` when
            set) instead of the plain ``Runner.train()`` loop.
        log_dir: folder of the job's output file; None: ``<session-path>/slurm``.
        setup: shell lines run in the job before digideep.
        env: variables exported in the job, beside the environment ``sbatch`` passes on.
        sbatch: further ``sbatch`` options, written verbatim as ``#SBATCH`` lines.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    cpus: int | None = None
    mem: str | None = None
    gres: str | None = None
    signal_seconds: int = 300
    requeue: bool = True
    prefect: bool = False
    log_dir: str | None = None
    setup: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    sbatch: list[str] = field(default_factory=list)

    def sbatch_options(self) -> list[str]:
        """The resource options as ``sbatch`` reads them, e.g. ``["--partition=gpu", "--time=60"]``."""
        options = {
            "--partition": self.partition,
            "--account": self.account,
            "--qos": self.qos,
            "--time": self.time,
            "--cpus-per-task": self.cpus,
            "--mem": self.mem,
            "--gres": self.gres,
        }
        return [f"{name}={value}" for name, value in options.items() if value is not None] + list(self.sbatch)

    def replace(self, **changes: Any) -> SlurmConfig:
        """A copy with ``changes`` (the command line's overrides), checked like a file's keys."""
        return _checked(
            {**dataclasses.asdict(self), **{k: v for k, v in changes.items() if v is not None}}, ""
        )


_TYPES: dict[str, tuple[type, ...]] = {
    "partition": (str,),
    "account": (str,),
    "qos": (str,),
    "time": (str, int),
    "cpus": (int,),
    "mem": (str, int),
    "gres": (str,),
    "signal_seconds": (int,),
    "requeue": (bool,),
    "prefect": (bool,),
    "log_dir": (str,),
    "setup": (str,),
    "env": (dict,),
    "sbatch": (list,),
}


def load_config(path: str | Path | None) -> SlurmConfig:
    """The config in ``path`` (YAML or JSON), or the defaults when ``path`` is None.

    Raises:
        UsageError: the file is missing or unreadable, or a key is unknown (naming the closest) or
            has the wrong type.
    """
    if path is None:
        return SlurmConfig()
    import yaml  # (installed with prefect)

    try:
        values = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise UsageError(f"--slurm-config '{path}' cannot be read: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise UsageError(f"--slurm-config '{path}' is not valid YAML: {str(error).splitlines()[0]}") from None
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise UsageError(f"--slurm-config '{path}' must hold a mapping of keys such as partition and time")
    return _checked(values, f" in '{path}'")


def _checked(values: dict[str, Any], where: str) -> SlurmConfig:
    for key, value in values.items():
        if key not in _TYPES:
            close = difflib.get_close_matches(str(key), _TYPES, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UsageError(
                f"unknown Slurm config key '{key}'{where}; {hint}valid keys: {', '.join(_TYPES)}"
            )
        if value is None:
            continue
        types = _TYPES[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise UsageError(
                f"Slurm config key '{key}'{where} must be {' or '.join(t.__name__ for t in types)}, "
                f"not {type(value).__name__} ({value!r})"
            )
    if values.get("time") is not None and not _TIME.match(str(values["time"])):
        raise UsageError(
            f"Slurm config key 'time'{where} is '{values['time']}', not a Slurm time such as 60, 12:00:00 or 2-00:00:00"
        )
    if values.get("signal_seconds") is not None and not 0 < values["signal_seconds"] <= 65535:
        raise UsageError(f"Slurm config key 'signal_seconds'{where} must lie between 1 and 65535")
    for key in ("time", "mem"):
        if isinstance(values.get(key), int):
            values = {**values, key: str(values[key])}
    return SlurmConfig(**values)
