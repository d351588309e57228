"""deisa: in situ analytics of MPI simulations with Dask.

Data flow: a simulation rank publishes its blocks through a :class:`Bridge`; an analytics
client rebuilds global dask arrays with an :class:`Adapter`; :func:`split` groups the blocks
each worker holds into partitions, and :class:`IncrementalPCA` reduces them where they are.
"""

from __future__ import annotations

from .adapter import Adapter, ArrayDescriptor, EndOfStreamError, StepNotAvailableError
from .bridge import Bridge, BridgeError, PublishTiming
from .decomposition import ArraySpec, Decomposition, DecompositionError
from .options import BridgeOptionError, BridgeOptions
from .pca import IncrementalPCA
from .splitter import (
    Factoring,
    OverDecomposition,
    Partition,
    PartitionPolicy,
    Split,
    Static,
    TransferMeasurement,
    measure_incoming_transfers,
    split,
)

__version__ = "0.1.0"

__all__ = [
    "Adapter",
    "ArrayDescriptor",
    "ArraySpec",
    "Bridge",
    "BridgeError",
    "BridgeOptionError",
    "BridgeOptions",
    "Decomposition",
    "DecompositionError",
    "EndOfStreamError",
    "Factoring",
    "IncrementalPCA",
    "OverDecomposition",
    "Partition",
    "PartitionPolicy",
    "PublishTiming",
    "Split",
    "Static",
    "StepNotAvailableError",
    "TransferMeasurement",
    "measure_incoming_transfers",
    "split",
]
