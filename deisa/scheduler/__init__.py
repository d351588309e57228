"""The scheduler side: the :class:`StreamExtension` that queues steps between the two others.

Installed on the Dask scheduler by the first Bridge or Adapter that connects
(``register_scheduler_plugin``, idempotent). It holds the streams (:mod:`.extension`, whose
routes live in :mod:`.publishing`, :mod:`.taking`, :mod:`.consumers` and :mod:`.workers`,
over the shared state of ``_state`` and the streams' records of ``_streams``), the steering
values (:mod:`.steering`) and the contracts (:mod:`.contracts`); the routes and replies it
speaks are in :mod:`deisa.wire`.

Runs in the Dask scheduler process, on its event loop (every route, every transition). Imports
:mod:`deisa.wire`, :mod:`deisa.contract` and :mod:`deisa._dask_internals` only.
"""

from .extension import StreamExtension

__all__ = ["StreamExtension"]
