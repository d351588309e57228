"""The blocks of a saved run, from where they start: what :class:`deisa.Replay` chunks by.

HDF5 chunks are all of one size, so a file's chunks are the ranks' blocks only when the
decomposition is even (10 rows over 3 ranks are blocks of 4, 3 and 3, chunks of 4, 4 and 2).
A run that saves where each block starts, a 2-D integer dataset :data:`BLOCKS_DATASET` with one
row per block (each rank's ``local_start``, as ``configs/heat_both.yml`` writes it at ``init``),
gives them back for any decomposition.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

__all__ = ["BLOCKS_DATASET", "chunks_from_starts", "is_block_starts"]

logger = logging.getLogger(__name__)

#: the name of the dataset holding where each block of the run starts (one row per block)
BLOCKS_DATASET = "block_start"


def is_block_starts(name: str, info: Any) -> bool:
    """Whether the dataset ``name`` (``info``: its ``shape`` and ``dtype``) holds the starts of
    the run's blocks: :data:`BLOCKS_DATASET`, 2-D, of integers. Not an array of the run, then."""
    return name == BLOCKS_DATASET and len(info.shape) == 2 and info.dtype.kind in "iu"


def chunks_from_starts(
    rows: Any, shape: tuple[int, ...], name: str, source: str, *, empty: bool = False
) -> tuple[tuple[int, ...], ...] | None:
    """The chunks of an array of spatial ``shape`` whose blocks start at ``rows`` (those of
    :data:`BLOCKS_DATASET`): on each axis, from one start to the next. None where they do not fit
    it (another number of axes, a first block not at 0, a start past the end): its file's
    chunks then. ``empty``: a start at the end is an empty block (a rank with no particle this
    step, of a per-step array), left out."""
    starts = np.asarray(rows, dtype=np.int64)
    if starts.ndim != 2 or starts.shape[1] != len(shape) or not starts.size:
        logger.debug(
            "deisa replay: %r has %d spatial axes, %r starts blocks of %d: its file's chunks",
            name, len(shape), BLOCKS_DATASET, starts.shape[-1] if starts.ndim else 0,
        )  # fmt: skip
        return None
    chunks = []
    for axis, extent in enumerate(shape):
        bounds = sorted({int(s) for s in starts[:, axis] if not (empty and s == extent)})
        if empty and extent == 0 and not bounds:
            bounds = [0]
        if not bounds or bounds[0] != 0 or bounds[-1] >= (max(extent, 1) if empty else extent):
            logger.info(
                "deisa replay: %r of %s does not fit %r (axis %d of %d elements starts blocks "
                "at %s): its file's chunks are used",
                BLOCKS_DATASET, source, name, axis, extent, bounds,
            )  # fmt: skip
            return None
        chunks.append(tuple(np.diff([*bounds, extent]).tolist()))
    return tuple(chunks)
