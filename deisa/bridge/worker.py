"""``dask worker --preload deisa.bridge.worker``: the older name of :mod:`deisa.worker`.

The workers' side of the Bridge lives in :mod:`deisa.worker`, which ``deisa-run`` and its Slurm
job preload; this name stays for users' own command lines and job scripts that preload it.

Runs in a Dask worker process at its start (the preload), on the worker's event-loop thread.
Imports the :mod:`deisa.worker` package only.
"""

from __future__ import annotations

from ..worker import dask_setup, install

__all__ = ["dask_setup", "install"]
