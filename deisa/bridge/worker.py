"""``dask worker --preload deisa.bridge.worker``: the older name of :mod:`deisa.worker`.

The workers' side of the Bridge lives in :mod:`deisa.worker`; this name stays for the command
lines and job scripts that preload it (``deisa-run``'s among them).
"""

from __future__ import annotations

from ..worker import dask_setup, install

__all__ = ["dask_setup", "install"]
