"""The worker's side of the Bridge, for ``dask worker --preload deisa.bridge.worker``.

A worker started with this preload registers deisa's worker plugin
(:class:`~deisa.bridge._shm_worker.SharedMemoryPlugin`) with its scheduler before it joins, so
that the plugin runs on every worker of the job from the start, instead of from rank 0's
connection: the ranks of its node can then send their blocks through shared memory, and a rank
0 on its node calls the scheduler through it (:mod:`deisa.bridge._relay`) without importing
distributed. ``deisa-run`` starts its workers with it. Without it, the first of the two sides
to connect registers the plugin: the analytics' :class:`~deisa.Adapter` (:func:`install`, which
imports distributed anyway), or rank 0, with distributed (0.4 s of CPU), saying so in one log
line; the ranks of the next runs on the same workers get the relay.

Registering is idempotent: the scheduler keeps the first registration and hands it to each
worker when it joins.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import _dask_internals

logger = logging.getLogger(__name__)


def install(client: Any) -> None:
    """Register the plugin through ``client`` (a :class:`distributed.Client`; the Adapter's),
    on the present and future workers of its scheduler: idempotent."""
    from ._shm_worker import SharedMemoryPlugin

    client.register_plugin(SharedMemoryPlugin())


async def dask_setup(worker: Any) -> None:
    """Register the plugin with ``worker``'s scheduler (a failure is logged: the worker still
    starts, and rank 0 registers the plugin itself)."""
    from ._shm_worker import register

    pool, scheduler = _dask_internals.worker_pool(worker)
    try:
        await register(pool, scheduler)
    except Exception as exc:
        logger.warning("deisa: could not register the worker plugin with %s: %r", scheduler, exc)
