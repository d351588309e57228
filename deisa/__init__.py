"""deisa: in situ analytics of MPI simulations with Dask.

Data flow: a simulation rank publishes its blocks through a :class:`Bridge`; an analytics
client rebuilds global dask arrays with an :class:`Adapter`; :func:`split` groups the blocks
each worker holds into partitions, and :class:`IncrementalPCA` reduces them where they are.

The names below are imported on first use (PEP 562), so that a simulation rank importing
``deisa.bridge`` (or the PDI plugin) does not pay for the analytics' dask.array, scipy and
scikit-learn imports.

The package reads as the data flow, one sub-package per process it runs in:
:mod:`deisa.bridge` (the simulation side, one Bridge per rank), :mod:`deisa.worker` (inside the
Dask workers), :mod:`deisa.scheduler` (the scheduler extension), :mod:`deisa.analysis`
(Adapter, splitter, PCA), sharing only :mod:`deisa.wire` (what they send each other),
:mod:`deisa.contract` (what a contract is), :mod:`deisa._dask_internals` (the one door to
distributed's private API) and :mod:`deisa._lazy` (names imported on first use).
:mod:`deisa.insitu` is deisa-core's backend over both sides; :mod:`deisa.pca_app` the built-in
PCA that :mod:`deisa.launcher` (``deisa-run``) runs; :mod:`deisa.doctor` what a run needs
(``python -m deisa doctor``). Nothing imports the launcher. docs/architecture.md is the map.

Runs in every process that imports deisa; imports nothing at import time (PEP 562).
"""

from __future__ import annotations

from pkgutil import extend_path
from typing import TYPE_CHECKING

# `deisa` is also the PEP 420 namespace of deisa-core, deisa-dask and deisa-ray (deisa.core,
# deisa.dask, deisa.ray): this package takes their parts in, wherever they are installed
__path__ = extend_path(__path__, __name__)

from ._lazy import attach

if TYPE_CHECKING:
    from .analysis.adapter import (
        Adapter,
        ArrayDescriptor,
        EndOfStreamError,
        StepLostError,
        StepNotAvailableError,
    )
    from .analysis.compat import Deisa
    from .analysis.pca import IncrementalPCA
    from .analysis.replay import Replay, ReplayArray, ReplayError
    from .analysis.splitter import (
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
    from .bridge.arrays.decomposition import ArraySpec, Decomposition, DecompositionError
    from .bridge.bridge import Bridge, BridgeError, PublishTiming
    from .bridge.group import BridgeGroup
    from .bridge.options import BridgeOptionError, BridgeOptions

__version__ = "0.1.0"

# public name -> the submodule defining it
_LAZY = {
    **dict.fromkeys(["Adapter", "ArrayDescriptor", "EndOfStreamError", "StepLostError",
                     "StepNotAvailableError"], "analysis.adapter"),
    **dict.fromkeys(["Bridge", "BridgeError", "PublishTiming"], "bridge.bridge"),
    "BridgeGroup": "bridge.group",
    "Deisa": "analysis.compat",  # the released DEISA client's entry point (docs/migrating.md)
    **dict.fromkeys(
        ["ArraySpec", "Decomposition", "DecompositionError"], "bridge.arrays.decomposition"
    ),
    **dict.fromkeys(["BridgeOptionError", "BridgeOptions"], "bridge.options"),
    "IncrementalPCA": "analysis.pca",
    **dict.fromkeys(["Replay", "ReplayArray", "ReplayError"], "analysis.replay"),
    **dict.fromkeys(["Factoring", "OverDecomposition", "Partition", "PartitionPolicy", "Split",
                     "Static", "TransferMeasurement", "measure_incoming_transfers", "split"],
                    "analysis.splitter"),
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
    "Deisa",
    "EndOfStreamError",
    "Factoring",
    "IncrementalPCA",
    "OverDecomposition",
    "Partition",
    "PartitionPolicy",
    "PublishTiming",
    "Replay",
    "ReplayArray",
    "ReplayError",
    "Split",
    "Static",
    "StepLostError",
    "StepNotAvailableError",
    "TransferMeasurement",
    "measure_incoming_transfers",
    "split",
]


__getattr__, __dir__ = attach(__name__, _LAZY)
