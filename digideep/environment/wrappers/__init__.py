"""Environment wrappers that Gymnasium lacks, each with state dicts where it holds state.

Per-worker wrappers (``gymnasium.Wrapper``): :class:`ImageTranspose`, :class:`FlattenDictObservation`,
:class:`StructuredObservation`,
:class:`VideoRecorder`, :class:`EnvState`. Vector wrappers (``gymnasium.vector.VectorWrapper``):
:class:`NormalizeObservation`, :class:`NormalizeReward`, :class:`SingleAgentAdapter`. Gymnasium's own
``RescaleAction``, ``FrameStackObservation`` and ``ClipAction`` cover the rest.
"""

from digideep.environment.wrappers.env_state import EnvState
from digideep.environment.wrappers.normalizers import NormalizeObservation, NormalizeReward
from digideep.environment.wrappers.transforms import (
    FlattenDictObservation,
    ImageTranspose,
    SingleAgentAdapter,
    StructuredObservation,
)
from digideep.environment.wrappers.video import VideoRecorder

__all__ = [
    "EnvState",
    "FlattenDictObservation",
    "ImageTranspose",
    "NormalizeObservation",
    "NormalizeReward",
    "SingleAgentAdapter",
    "StructuredObservation",
    "VideoRecorder",
]
