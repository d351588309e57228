"""deisa's services on a Dask worker: a :class:`distributed.WorkerPlugin` that starts the
shared-memory listener for the ranks of its node (:mod:`.shm`) and, on the first worker of a
node, the relay of rank 0's calls to the scheduler (:mod:`.relay`).

Runs in a Dask worker process, on the worker's event loop (``setup``, ``teardown``); its
:func:`install_on_the_scheduler` and :func:`register` run wherever the scheduler is asked to
install them (rank 0's loop thread, a worker's relay, the analytics' client). Imports
:mod:`deisa.wire`, :mod:`deisa.scheduler` (the extension it installs) and its siblings.

The services also keep the worker's memory flat over a long run: every :data:`FOLD_DIGESTS_S`
they fold the metrics distributed keeps per computation, one set per step's analytics, into one
per task prefix (:func:`deisa._dask_internals.fold_span_digests`).

Rank 0 registers :class:`WorkerServices` on the scheduler beside the stream extension
(:func:`install_on_the_scheduler`), so every worker, present or future, runs it; nothing is
added to the worker's command line (``dask worker --preload deisa.worker`` registers it before
the ranks connect).
"""

from __future__ import annotations

import logging
from typing import Any

from distributed import WorkerPlugin

from .. import _dask_internals
from ..wire.shm import SERVICES_NAME
from .relay import RelayServer
from .shm import Listener

logger = logging.getLogger(__name__)

__all__ = ["WorkerServices", "install_on_the_scheduler", "register"]

FOLD_DIGESTS_S = 10.0
"""How often a worker folds its metrics per computation (see the module)."""


class WorkerServices(WorkerPlugin):
    """deisa's services on a worker: the shared-memory listener and rank 0's relay (see the
    module). Registered under :data:`~deisa.wire.shm.SERVICES_NAME`; idempotent."""

    name = SERVICES_NAME
    idempotent = True

    def __init__(self) -> None:
        self._server: Listener | None = None
        self._relay: RelayServer | None = None
        self._fold: Any = None

    async def setup(self, worker: Any) -> None:
        from tornado.ioloop import PeriodicCallback

        def fold() -> None:
            _dask_internals.fold_span_digests(worker)

        self._fold = PeriodicCallback(fold, FOLD_DIGESTS_S * 1000)
        self._fold.start()
        try:
            self._server = Listener(worker)
        except OSError as exc:  # the ranks fall back to TCP
            logger.warning("deisa: no shared-memory listener on worker %s: %s", worker.address, exc)
        try:
            self._relay = await RelayServer.start(worker, install_on_the_scheduler)
        except OSError as exc:  # rank 0 connects with distributed
            logger.warning("deisa: no relay for rank 0 on worker %s: %s", worker.address, exc)

    def teardown(self, worker: Any) -> None:
        if self._fold is not None:
            self._fold.stop()
            self._fold = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._relay is not None:
            self._relay.close()
            self._relay = None


async def register(pool: Any, address: str) -> None:
    """Register :class:`WorkerServices` with the scheduler at ``address`` through ``pool``
    (``pool(address).<route>(**kwargs)``): idempotent, on its present and future workers."""
    from distributed.protocol.pickle import dumps

    await pool(address).register_worker_plugin(
        plugin=dumps(WorkerServices()), name=WorkerServices.name, idempotent=True
    )


async def install_on_the_scheduler(pool: Any, address: str, shared_memory: bool = True) -> None:
    """Install the :class:`~deisa.scheduler.StreamExtension` (idempotent) and, with
    ``shared_memory``, :class:`WorkerServices` on present and future workers: what rank 0
    asks of the scheduler when it connects, itself or through a worker's relay."""
    from distributed.protocol.pickle import dumps

    from ..scheduler import StreamExtension
    from ..wire import EXTENSION_NAME

    await pool(address).register_scheduler_plugin(
        plugin=dumps(StreamExtension()), name=EXTENSION_NAME, idempotent=True
    )
    if shared_memory:
        await register(pool, address)
