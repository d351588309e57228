"""deisa: in situ analytics of MPI simulations with Dask.

Data flow: a simulation rank publishes its blocks through a :class:`Bridge`; an analytics
client rebuilds global dask arrays with an :class:`Adapter`.
"""

from __future__ import annotations

from .adapter import Adapter, ArrayDescriptor, EndOfStreamError, StepNotAvailableError
from .bridge import Bridge, BridgeError, PublishTiming
from .decomposition import ArraySpec, Decomposition, DecompositionError

__version__ = "0.1.0"

__all__ = [
    "Adapter",
    "ArrayDescriptor",
    "ArraySpec",
    "Bridge",
    "BridgeError",
    "Decomposition",
    "DecompositionError",
    "EndOfStreamError",
    "PublishTiming",
    "StepNotAvailableError",
]
