"""The analytics side: the :class:`Adapter` rebuilds global dask arrays (a :class:`Replay` the
same from saved files), :func:`split` groups their blocks by worker, :class:`IncrementalPCA`
reduces them where they are.

Names are imported on first use (PEP 562). Nothing here imports :mod:`deisa.bridge`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:
    from .adapter import (
        Adapter,
        ArrayDescriptor,
        EndOfStreamError,
        StepLostError,
        StepNotAvailableError,
    )
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
    **dict.fromkeys(["Replay", "ReplayArray", "ReplayError"], "replay"),
    "split": "splitter",
}

__all__ = [
    "Adapter",
    "ArrayDescriptor",
    "EndOfStreamError",
    "IncrementalPCA",
    "Replay",
    "ReplayArray",
    "ReplayError",
    "StepLostError",
    "StepNotAvailableError",
    "split",
]


__getattr__, __dir__ = attach(__name__, _LAZY)
