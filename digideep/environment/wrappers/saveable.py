"""The environment side's names for the state codec of :mod:`digideep.storage.codec`.

Wrappers, captured environments and the random agent encode their live state with
:func:`to_saveable` (numpy arrays and scalars, deques, tuples, numpy generators and Gymnasium's
``RunningMeanStd``) so that it loads with ``torch.load(..., weights_only=True)``; :func:`from_saveable`
inverts it. Both are the one codec that checkpoints use too: there is a single tag scheme.
"""

from __future__ import annotations

from digideep.storage.codec import SIMPLE_TYPES
from digideep.storage.codec import decode as from_saveable
from digideep.storage.codec import encode as to_saveable
from digideep.storage.codec import is_encodable as is_saveable

__all__ = ["SIMPLE_TYPES", "from_saveable", "is_saveable", "to_saveable"]
