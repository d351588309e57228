"""The older path of :mod:`deisa.bridge.arrays.boxes` (a rank's boxes of a moving step).

Runs in a simulation rank, on whichever thread imports it; imports
:mod:`deisa.bridge.arrays.boxes` only. Kept for the publish path's modules (``_async``, the
shared-memory transport), which import it from here until they name the wing.
"""

from __future__ import annotations

from .arrays.boxes import Geometry, Parcel

__all__ = ["Geometry", "Parcel"]
