"""The older path of :mod:`deisa.bridge.arrays.placement` (which worker receives a rank's block).

Runs in a simulation rank, on whichever thread imports it; imports
:mod:`deisa.bridge.arrays.placement` only. Kept for the shared-memory pool
(:mod:`deisa.bridge.shm.pool`), which imports a rank's host from here until it names the wing.
"""

from __future__ import annotations

from .arrays.placement import Host, this_host

__all__ = ["Host", "this_host"]
