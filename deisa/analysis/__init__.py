"""The analytics side: the :class:`Adapter` rebuilds global dask arrays (a :class:`Replay` the
same from saved files), :func:`split` groups their blocks by worker, :class:`IncrementalPCA`
reduces them where they are.

Runs in the analytics' process (a :class:`distributed.Client`'s; the PCA's kernels and the
warm-up preload, :mod:`.warm`, in the Dask workers). Imports :mod:`deisa.wire`,
:mod:`deisa.contract`, :mod:`deisa._dask_internals`, :mod:`deisa.scheduler` (the Adapter may
install the extension) and the :mod:`deisa.worker` package's install; never :mod:`deisa.bridge`.
Names are imported on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:
    from ._reading import NoFixedShapeError, StepArray, StepShapesDifferError
    from .adapter import (
        Adapter,
        ArrayDescriptor,
        EndOfStreamError,
        StepLostError,
        StepNotAvailableError,
    )
    from .moving import MissingRegionError
    from .pca import IncrementalPCA
    from .replay import Replay, ReplayArray, ReplayError
    from .splitter import split

_LAZY = {
    **dict.fromkeys(
        [
            "Adapter",
            "ArrayDescriptor",
            "EndOfStreamError",
            "StepLostError",
            "StepNotAvailableError",
        ],
        "adapter",
    ),
    "IncrementalPCA": "pca",
    "MissingRegionError": "moving",
    **dict.fromkeys(["NoFixedShapeError", "StepArray", "StepShapesDifferError"], "_reading"),
    **dict.fromkeys(["Replay", "ReplayArray", "ReplayError"], "replay"),
    "split": "splitter",
}

__all__ = [
    "Adapter",
    "ArrayDescriptor",
    "EndOfStreamError",
    "IncrementalPCA",
    "MissingRegionError",
    "NoFixedShapeError",
    "Replay",
    "ReplayArray",
    "ReplayError",
    "StepArray",
    "StepLostError",
    "StepNotAvailableError",
    "StepShapesDifferError",
    "split",
]


__getattr__, __dir__ = attach(__name__, _LAZY)
