"""The policy of a checkpoint as an MLflow model and a TorchScript file.

:func:`export_policy` turns a checkpoint folder into a model folder::

    <out>/MLmodel, python_model.py, ...   an MLflow pyfunc (``mlflow.pyfunc.load_model``), with a
                                           signature and an input example
    <out>/artifacts/policy.pt              the same policy as TorchScript (plain ``torch.jit.load``)

The model is the *deterministic* policy with the run's observation normaliser inside: it takes the
observations the vector env's ``NormalizeObservation`` receives (the raw env observations for the
shipped parameter files), ``(batch, obs_dim) float32``, and returns the actions the test explorer
would take, ``(batch, *act_shape)`` (float32 for Box actions, int64 for Discrete). Per-worker
wrappers that act on the env side (``ClipAction``, ``RescaleAction``) stay outside the model, as
they stay outside the agent. The normaliser is applied in float64 and cast to float32, as
:class:`~digideep.environment.wrappers.NormalizeObservation` does, so the model's actions are
bit-equal to the checkpoint's agent on the CPU. Not exported (one-line error): several agents,
Dict or image observations, recurrent policies.

:func:`log_policy_models` logs the last and the best checkpoint of a finished run as MLflow 3 *logged
models* named ``model`` and ``best_model``, linked to the run as its outputs: MLflow lists them with
``search_logged_models`` and in the run's Models column, and loads them as ``models:/<model_id>`` or
``runs:/<run_id>/model``. The final one is registered when ``tracking.register_model`` names a
registered model; ``digideep runs register RUN [--name N] [--alias A]`` (:func:`register_model`)
registers one afterwards. Loading needs torch, numpy and mlflow only: the
pyfunc is saved as code (:mod:`digideep.tracking.policy_pyfunc`), so neither digideep nor Prefect
is imported. Checkpoints on object storage (``s3://...``) are read through their
:class:`~digideep.storage.location.Location`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from digideep.agents.base import OnDevice
from digideep.agents.update_modes import acting_only
from digideep.errors import UsageError
from digideep.storage.checkpoint import load_checkpoint, read_runner_info
from digideep.storage.codec import decode
from digideep.storage.location import Location, location_of
from digideep.utility.user_code import IMPORT_PATHS, use_code_folders

__all__ = [
    "MODEL_ARTIFACTS",
    "MODEL_TAG",
    "PolicyModule",
    "export_policy",
    "find_logged_model",
    "log_policy_models",
    "register_model",
]

log = logging.getLogger(__name__)

MODEL_ARTIFACTS = {"final": "model", "best": "best_model"}
"""Which checkpoint -> the name of its logged model (``runs:/<run_id>/<name>``)."""
MODEL_TAG = "digideep.model"
"""Tag of a logged model and of its registered versions: which checkpoint it is (``final``, ``best``)."""
TORCHSCRIPT = "policy.pt"
_NORMALIZER = "NormalizeObservation"


class PolicyModule(nn.Module):
    """Raw observations -> deterministic actions: the normaliser, then the agent's ``_act``.

    Args:
        agent: a built agent (its policy is a submodule, so tracing keeps its weights as parameters).
        normalizer: ``{"mean", "var"}`` float64 arrays and ``epsilon``, ``clip`` of the run's
            ``NormalizeObservation``, or None.
    """

    def __init__(self, agent: Any, normalizer: dict[str, Any] | None) -> None:
        super().__init__()
        self.policy = agent.policy
        self._act = agent._act
        self.hidden_size = int(agent.hidden_size)
        self.normalize = normalizer is not None
        self.epsilon = float(normalizer["epsilon"]) if normalizer else 0.0
        self.clip = normalizer.get("clip") if normalizer else None
        mean = np.asarray(normalizer["mean"], dtype=np.float64) if normalizer else np.zeros(0)
        var = np.asarray(normalizer["var"], dtype=np.float64) if normalizer else np.zeros(0)
        self.register_buffer("obs_mean", torch.from_numpy(mean))
        self.register_buffer("obs_var", torch.from_numpy(var))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs: (B, obs_dim) float32`` -> actions ``(B, *act_shape)``."""
        x = obs
        if self.normalize:  # as NormalizeObservation: float64 arithmetic, float32 result, then clip
            x = ((x.to(torch.float64) - self.obs_mean) / torch.sqrt(self.obs_var + self.epsilon)).to(
                torch.float32
            )
            if self.clip is not None:
                x = torch.clamp(x, -self.clip, self.clip)
        column = torch.zeros_like(x[:, :1])
        hidden = column.repeat(1, self.hidden_size)
        return self._act(x, hidden, column + 1.0, True)["actions"]


def build_policy(checkpoint: str | Path | Location) -> tuple[PolicyModule, Any]:
    """The checkpoint's agent on the CPU as a :class:`PolicyModule`, and its observation space.

    Args:
        checkpoint: the checkpoint folder: a path, a URL (``s3://...``) or a Location.

    Raises:
        UsageError: a damaged checkpoint, or a run the export does not cover (module doc).
    """
    from digideep.environment.make_environment import MakeEnvironment

    path = location_of(checkpoint)
    info, states = load_checkpoint(path)
    params = info["params"]
    agents = params["agents"]
    if len(agents) != 1:
        raise UsageError(f"checkpoint {path} has {len(agents)} agents; exporting a model needs exactly one")
    ((name, spec),) = agents.items()
    use_code_folders(info[IMPORT_PATHS], params, f"checkpoint {path}")  # a user's own agent class
    observation_space, action_spaces = MakeEnvironment(**params["env"]).spaces()
    shape = getattr(observation_space, "shape", None)
    if shape is None or len(shape) != 1:
        raise UsageError(
            f"checkpoint {path}: exporting a model needs flat Box observations, got {observation_space}"
        )
    module_name, _, class_name = spec["type"].rpartition(".")
    agent = getattr(import_module(module_name), class_name)(
        name=name,
        session=OnDevice("cpu"),  # rebuilt for export: the CPU
        observation_space=observation_space,
        action_space=action_spaces[name],
        **acting_only(spec.get("args", {})),
    )
    agent.load_state_dict(states["agents"][name])
    if int(agent.hidden_size) > 1:
        raise UsageError(f"checkpoint {path}: exporting a recurrent policy is not supported")
    agent.policy.eval()
    module = PolicyModule(agent, _normalizer(params, states, path))
    return module.eval(), observation_space


def _normalizer(params: dict[str, Any], states: dict[str, Any], path: Location) -> dict[str, Any] | None:
    """The train explorer's NormalizeObservation statistics and settings, or None without one."""
    wrappers = states.get("explorers", {}).get("train", {}).get("wrappers", {})
    found = [state for key, state in wrappers.items() if key.split(":", 1)[-1] == _NORMALIZER]
    if not found:
        return None
    statistics = decode(found[0]["statistics"])
    if set(statistics) != {""}:
        raise UsageError(
            f"checkpoint {path}: exporting a policy with a Dict observation normaliser is not supported"
        )
    entry = next(
        w for w in params["env"].get("vector_wrappers", []) if w["name"].rsplit(".", 1)[-1] == _NORMALIZER
    )
    args = {"epsilon": 1e-8, "clip": 10.0, **entry.get("args", {})}
    return {"mean": statistics[""]["mean"], "var": statistics[""]["var"], **args}


def export_policy(
    checkpoint: str | Path | Location, out: str | Path, examples: int = 5, mlflow_model: Any = None
) -> Path:
    """Write the checkpoint's policy as an MLflow pyfunc model (with ``artifacts/policy.pt``) at ``out``.

    Args:
        checkpoint: a checkpoint folder (``.../checkpoints/checkpoint-<iteration>``, a path or a URL).
        out: the model folder to create (must not exist).
        examples: rows of the input example (observations drawn from the observation space, seed 0).
        mlflow_model: the ``mlflow.models.Model`` to save into (a logged model's, so that its
            ``MLmodel`` names its model id and run), or None for a standalone model.

    Returns:
        ``out``.
    """
    import mlflow
    from mlflow.models import infer_signature

    module, observation_space = build_policy(checkpoint)
    observation_space.seed(0)
    example = np.stack([observation_space.sample() for _ in range(examples)]).astype(np.float32)
    with (
        tempfile.TemporaryDirectory(prefix="digideep-model-") as scratch,
        torch.inference_mode(),
        _quiet_mlflow(),
    ):
        traced = torch.jit.trace(module, torch.from_numpy(example), check_trace=False)
        script = Path(scratch) / TORCHSCRIPT
        traced.save(str(script))
        actions = module(torch.from_numpy(example)).numpy()
        mlflow.pyfunc.save_model(
            path=str(out),
            python_model=str(Path(__file__).with_name("policy_pyfunc.py")),
            artifacts={"torchscript": str(script)},
            signature=infer_signature(example, actions),
            input_example=example,
            mlflow_model=mlflow_model,
            pip_requirements=[
                f"torch=={torch.__version__.split('+')[0]}",
                f"mlflow=={mlflow.__version__}",
                "numpy",
            ],
        )
    return Path(out)


@contextlib.contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """Save a model without what MLflow prints on its own at every save: its artifact-copy progress
    bars (unless ``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR`` is set) and its INFO line on validating the
    input example. Its warnings still show."""
    variable = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    pyfunc_log = logging.getLogger("mlflow.pyfunc")
    unset, level = variable not in os.environ, pyfunc_log.level
    if unset:
        os.environ[variable] = "false"
    pyfunc_log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        pyfunc_log.setLevel(level)
        if unset:
            os.environ.pop(variable, None)


def log_policy_models(
    client: Any,
    run_id: str,
    checkpoints: dict[str, str | Path | Location],
    register_as: str | None = None,
) -> dict[str, str]:
    """Log ``checkpoints`` (``{"final": folder, "best": folder}``) as logged models of the run.

    The final model is registered as ``register_as`` when given. Failures are logged, never
    raised: the checkpoints hold the policy either way.

    Returns:
        ``{"final": "models:/<model_id>", ...}`` for the models logged.
    """
    logged: dict[str, str] = {}
    for which, checkpoint in checkpoints.items():
        try:
            logged[which] = f"models:/{_log_model(client, run_id, which, checkpoint)}"
        except Exception as error:
            log.warning("could not log the %s policy of %s as an MLflow model: %s", which, checkpoint, error)
    if register_as and "final" in logged:
        try:
            version = register_model(client, run_id, register_as)
            log.info("registered %s as model '%s' version %s", logged["final"], register_as, version)
        except UsageError as error:
            log.warning("%s", error)
    return logged


def _log_model(client: Any, run_id: str, which: str, checkpoint: str | Path | Location) -> str:
    """Create the logged model ``MODEL_ARTIFACTS[which]`` of the run from ``checkpoint``; its id.

    What ``mlflow.pyfunc.log_model`` does inside an active run, with this client and run instead of
    the process's global ones: create the logged model, link it to the run as an output at the
    checkpoint's step (frames), save the pyfunc into it, and mark it READY (FAILED when a step fails).
    """
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.models import Model

    run = client.get_run(run_id)
    name = MODEL_ARTIFACTS[which]
    step = int(read_runner_info(checkpoint)["counters"]["frames"])
    model = client.create_logged_model(
        run.info.experiment_id,
        name=name,
        source_run_id=run_id,
        tags={MODEL_TAG: which, "digideep.checkpoint": str(location_of(checkpoint))},
    )
    try:
        client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step)])
        frame = Model(
            artifact_path=model.artifact_location,
            run_id=run_id,
            model_id=model.model_id,
            model_uuid=model.model_id,
        )
        with tempfile.TemporaryDirectory(prefix="digideep-model-") as scratch:
            export_policy(checkpoint, Path(scratch) / name, mlflow_model=frame)
            with _quiet_mlflow():
                client.log_model_artifacts(model.model_id, str(Path(scratch) / name))
        client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    except BaseException:
        with contextlib.suppress(Exception):
            client.finalize_logged_model(model.model_id, LoggedModelStatus.FAILED)
        raise
    return model.model_id


def find_logged_model(client: Any, run: Any, which: str) -> Any | None:
    """The newest READY logged model ``MODEL_ARTIFACTS[which]`` of ``run``, or None."""
    from mlflow.entities import LoggedModelStatus

    name = MODEL_ARTIFACTS[which]
    found = client.search_logged_models(  # the status is not filtered on: the sqlite store ignores it
        experiment_ids=[run.info.experiment_id],
        filter_string=f"source_run_id = '{run.info.run_id}' AND name = '{name}'",
        order_by=[{"field_name": "creation_time", "ascending": False}],
    )
    return next((model for model in found if model.status == LoggedModelStatus.READY), None)


def register_model(
    client: Any, run_id: str, name: str, which: str = "final", alias: str | None = None
) -> str:
    """Register the run's logged ``which`` model (``final`` or ``best``) as ``name``; return the version.

    Args:
        alias: also point this alias of the registered model at the new version
            (``models:/<name>@<alias>``), e.g. ``champion``.

    Raises:
        UsageError: no such run, no such logged model, or a name MLflow refuses.
    """
    from digideep.tracking.failures import one_line

    if which not in MODEL_ARTIFACTS:
        raise UsageError(f"unknown model '{which}'; choose one of {sorted(MODEL_ARTIFACTS)}")
    try:
        run = client.get_run(run_id)
    except Exception:
        raise UsageError(
            f"no run '{run_id}' at {client.tracking_uri}; list runs with 'digideep runs'"
        ) from None
    if not name or not name.strip():
        raise UsageError("a registered model needs a non-empty --name")
    source, model_id = _model_source(client, run, which)
    try:
        try:
            client.get_registered_model(name)
        except Exception:
            client.create_registered_model(name)
        version = client.create_model_version(
            name, source, run_id=run_id, tags={MODEL_TAG: which}, model_id=model_id
        )
        if alias:
            client.set_registered_model_alias(name, alias, version.version)
    except Exception as error:
        raise UsageError(f"MLflow refused to register model '{name}': {one_line(error)}") from None
    return str(version.version)


def _model_source(client: Any, run: Any, which: str) -> tuple[str, str]:
    """``(source URI, model id)`` of the run's ``which`` logged model.

    Raises:
        UsageError: the run has no such logged model.
    """
    model = find_logged_model(client, run, which)
    if model is None:
        raise UsageError(
            f"run {run.info.run_id} has no logged '{MODEL_ARTIFACTS[which]}' model; models are logged when "
            "a run finishes ('digideep runs sync SESSION' logs those of a finished session)"
        )
    # its artifact location, not "models:/<id>": MLflow's sqlite registry would look that URI up
    # through the process's global tracking URI, not this client's store
    return model.artifact_location, model.model_id
