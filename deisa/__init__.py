"""deisa: in situ analytics of MPI simulations with Dask.

Data flow: a simulation rank publishes its blocks through a :class:`Bridge`; an analytics
client rebuilds global dask arrays with an :class:`Adapter`; :func:`split` groups the blocks
each worker holds into partitions, and :class:`IncrementalPCA` reduces them where they are.

The names below are imported on first use (PEP 562), so that a simulation rank importing
``deisa.bridge`` (or the PDI plugin) does not pay for the analytics' dask.array, scipy and
scikit-learn imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapter import Adapter, ArrayDescriptor, EndOfStreamError, StepNotAvailableError
    from .bridge import Bridge, BridgeError, PublishTiming
    from .bridge_group import BridgeGroup
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

# public name -> the submodule defining it
_LAZY = {
    **dict.fromkeys(["Adapter", "ArrayDescriptor", "EndOfStreamError", "StepNotAvailableError"],
                    "adapter"),
    **dict.fromkeys(["Bridge", "BridgeError", "PublishTiming"], "bridge"),
    "BridgeGroup": "bridge_group",
    **dict.fromkeys(["ArraySpec", "Decomposition", "DecompositionError"], "decomposition"),
    **dict.fromkeys(["BridgeOptionError", "BridgeOptions"], "options"),
    "IncrementalPCA": "pca",
    **dict.fromkeys(["Factoring", "OverDecomposition", "Partition", "PartitionPolicy", "Split",
                     "Static", "TransferMeasurement", "measure_incoming_transfers", "split"],
                    "splitter"),
}  # fmt: skip

__all__ = [
    "Adapter",
    "ArrayDescriptor",
    "ArraySpec",
    "Bridge",
    "BridgeError",
    "BridgeGroup",
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deisa' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
