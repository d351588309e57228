"""One of this rank's blocks on its way to its worker, in ``mode="async"``: :class:`Send`
(:mod:`._async` keeps one per publication of the rank, by sequence number). The main thread
owns it; the loop thread's send fills its future."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._publisher import Entry
from .boxes import Geometry


@dataclass
class Send:
    """One of this rank's blocks on its way to its worker."""

    entry: Entry
    buffer: np.ndarray | None  # None once given back (the send succeeded, or failed reported)
    future: concurrent.futures.Future[dict[Any, int]] | None = None
    worker: str = ""
    reported: bool = False
    failed_at: float | None = None  # when a failure was first held back (its worker may leave)
    lost: bool = False  # its worker left and none is left to take it
    geometry: Geometry | None = None  # a parcel of boxes (deisa.bridge.boxes): their geometry
    empty: bool = False  # a parcel with no element: nothing sent, only its geometry reported
