"""What runs inside Dask workers: deisa's services on a worker and their install.

Runs in a Dask worker process (the preload, at its start), in rank 0 and in the analytics (the
installs). Imports :mod:`deisa.wire`, :mod:`deisa._dask_internals` and its own modules.

- :mod:`.services`: :class:`~.services.WorkerServices`, the :class:`distributed.WorkerPlugin`
  that starts the two services below on every worker;
- :mod:`.shm`: the shared-memory listener that receives the blocks of the ranks of its node;
- :mod:`.relay`: rank 0's calls to the scheduler, relayed by the first worker of its node;
- this module: the preload (``dask worker --preload deisa.worker``, or its older name
  ``deisa.bridge.worker``) and the installs (:func:`install` for a client, the Adapter's;
  :func:`install_on_scheduler` for rank 0 and the relay).

A worker started with this preload registers the services with its scheduler before it joins,
so that they run on every worker of the job from the start, instead of from rank 0's
connection: the ranks of its node can then send their blocks through shared memory, and a rank
0 on its node calls the scheduler through it (:mod:`deisa.bridge.link.relay`) without importing
distributed. ``deisa-run`` starts its workers with it. Without it, the first of the two sides
to connect registers the services: the analytics' :class:`~deisa.Adapter` (:func:`install`, which
imports distributed anyway), or rank 0, with distributed (0.4 s of CPU), saying so in one log
line; the ranks of the next runs on the same workers get the relay.

Registering is idempotent: the scheduler keeps the first registration and hands it to each
worker when it joins. What the two sides exchange is in :mod:`deisa.wire` (:mod:`deisa.wire.shm`,
:mod:`deisa.wire.relay`); this package imports the scheduler's side only to install it.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import _dask_internals

logger = logging.getLogger(__name__)


def install(client: Any) -> None:
    """Register the services through ``client`` (a :class:`distributed.Client`; the Adapter's),
    on the present and future workers of its scheduler: idempotent."""
    from .services import WorkerServices

    client.register_plugin(WorkerServices())


async def install_on_scheduler(pool: Any, address: str, shared_memory: bool = True) -> None:
    """Install deisa's scheduler extension and, with ``shared_memory``, the workers' services on
    the scheduler at ``address`` through ``pool`` (``pool(address).<route>(**kwargs)``): what
    rank 0 asks of the scheduler when it connects, itself or through a worker's relay."""
    from .services import install_on_the_scheduler

    await install_on_the_scheduler(pool, address, shared_memory)


async def dask_setup(worker: Any) -> None:
    """Register the services with ``worker``'s scheduler (a failure is logged: the worker still
    starts, and rank 0 registers the services itself)."""
    from .services import register

    pool, scheduler = _dask_internals.worker_pool(worker)
    try:
        await register(pool, scheduler)
    except Exception as exc:
        logger.warning("deisa: could not register the worker services with %s: %r", scheduler, exc)
