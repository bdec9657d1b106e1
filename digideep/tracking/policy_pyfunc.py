"""The MLflow pyfunc of a digideep policy, saved *as code* into every exported model.

MLflow copies this file into the model folder (``mlflow.pyfunc.save_model(python_model=<this
file>)``, MLflow's "models from code"), so loading a model needs torch, numpy and mlflow only: not
digideep, not Prefect. The model wraps the TorchScript export (``artifacts/policy.pt``): raw
observations ``(batch, obs_dim) float32`` in, deterministic actions ``(batch, *act_shape)`` out, with
the observation normaliser of the run applied inside (see :mod:`digideep.tracking.model`).
"""

from __future__ import annotations

import mlflow
import numpy as np
import torch


class TorchScriptPolicy(mlflow.pyfunc.PythonModel):
    """Runs ``artifacts["torchscript"]`` on the CPU under ``torch.inference_mode``."""

    def load_context(self, context) -> None:
        self.module = torch.jit.load(context.artifacts["torchscript"], map_location="cpu")
        self.module.eval()

    def predict(self, context, model_input: np.ndarray, params=None) -> np.ndarray:
        """Deterministic actions for ``model_input``: ``(batch, obs_dim)`` observations (array or frame).

        The ``np.ndarray`` hint tells MLflow that the saved signature, not the hint, describes the input
        (without a hint MLflow warns at every save)."""
        obs = np.ascontiguousarray(np.asarray(model_input, dtype=np.float32))
        with torch.inference_mode():
            return self.module(torch.from_numpy(obs)).numpy()


mlflow.models.set_model(TorchScriptPolicy())
