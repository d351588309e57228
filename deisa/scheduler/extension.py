"""Scheduler side of deisa: the steps of each array, fanned out to its consumers, with flow control.

The :class:`StreamExtension` is a :class:`~distributed.diagnostics.plugin.SchedulerPlugin`
installed (idempotently) by the first Bridge or Adapter that connects, whichever starts first.
It plays the role of the DEISA paper's Queue, but carries a whole step per message: the
Bridge's rank 0 aggregates the keys of all ranks over MPI and makes one ``deisa_publish`` call
per step and array, and each consumer one ``deisa_get`` per step, whatever the number of ranks.

How a stream serves its consumers and groups (fan-out, work queues, attach and detach, flow
control, runs, repeated and lost steps) is told in :mod:`._streams`, beside its records.

The extension is this module's class alone; its routes live in one module per concept, each a
class that extends the shared state (:mod:`._state`: the streams, counters and key transitions):
:mod:`.workers` (the workers watch, steps lost with a worker), :mod:`.consumers` (attach and
detach), :mod:`.publishing` (the simulation's side) and :mod:`.taking` (the analytics' side);
steering values and contracts are stores of their own (:mod:`.steering`, :mod:`.contracts`).

Routes (RPC handlers on the scheduler):

- ``deisa_workers()``: ``[[address, nthreads], ...]`` of the workers, sorted by address (a
  plain list, not a reply: it cannot fail).
- ``deisa_watch_workers(known, timeout)``: ``ok(workers=[[address, nthreads], ...])`` as soon
  as the workers' addresses differ from ``known``, else after ``timeout`` seconds; how a
  Bridge learns that a worker left or joined without waiting on a connection timeout.
- ``deisa_open(name, run, meta, buffer_nb, on_full, consumers=1)``: a Bridge announces an
  array, whose steps are held for ``consumers`` readers until they attach (see "Consumers and
  groups" in :mod:`._streams`).
- ``deisa_publish(name, run, step, blocks, timeout, contract=None, layout=None, attrs=None)``:
  register one step's blocks (``[key, worker, nbytes]`` triples) and queue it for every
  reader; a step whose blocks are not the array's declared decomposition (a moving array's,
  :mod:`deisa.wire.layout`) carries its ``layout`` (wire form, one parcel count per key, else
  refused), kept with the step and handed to each reader with it, forgotten with the step;
  while a reader has
  ``buffer_nb`` steps to take it waits (``on_full="block"``, up to ``timeout``) or releases the
  oldest step some reader has not taken (``on_full="drop_oldest"``, with a warning naming the
  step; readers that took it keep it). A step index published again does what a file's slice
  would (see "Repeated steps" in :mod:`._streams`): ``ok(replaced=True)`` or
  ``Status.DROPPED``. A step with a block on a worker that has left is refused with
  ``Status.LOST`` and ``workers`` (those that left): its keys are released and the readers
  find a lost marker in its place.
- ``deisa_publish_many(publications)``: several ``deisa_publish`` in one message (each a mapping
  of its arguments; of distinct arrays: a step's, which rank 0 registers together), registered
  concurrently; ``ok(replies=[...])``, each publication's reply in order.
- ``deisa_close(name, run, nsteps)``: end of stream.
- ``deisa_meta(name, timeout, client=None, consumer=None, group=None)``: the array's metadata,
  once a Bridge has opened it (a *consumed* run's metadata is not served: it waits for the next
  run). With ``consumer``, attaches it first.
- ``deisa_get(name, client, timeout, run, consumer=None, group=None)``: take the next step (or
  the end of stream) of ``run`` for ``consumer`` (default: the client id), whose keys go to
  ``client``; ``run=None`` (a consumer that has taken nothing yet) means the current run, or the
  next one if the current one is consumed. A step's record carries its block keys, the worker
  holding each block (``workers``, as the Bridge reported it) and those workers' thread counts
  (``nthreads``), so the analytics' splitter need not ask again. A step lost with a worker
  answers ``Status.LOST`` with ``step`` and ``workers``; the end answers ``Status.END``. A
  step's record and a timeout carry ``memory``, the lines of ``deisa_stats``'s, when a worker
  is paused or spilling for memory; a step published with a ``layout`` carries it, one with
  ``attrs`` (the array's attributes new or changed at that step, :mod:`deisa.wire.attributes`;
  those of a step dropped or lost ride with the next) carries them.
- ``deisa_attach(name, client, consumer, group=None)``: attach the consumer now (``zip``
  attaches to all its arrays before waiting for the first).
- ``deisa_detach(consumer, names=None)``: the consumer leaves those arrays (default: all).
- ``deisa_stats()``: message counts per route and per stream, with each stream's readers and
  its lost steps (``[step, worker]``), and ``memory``: a line per worker paused (or spilling)
  for memory, naming it and its limit; a plain dict, not a reply.
- ``deisa_set_value(name, value)``, ``deisa_get_value(name)``: steering values, the analytics'
  answers to the simulation (:mod:`deisa.analysis.steering`).
- ``deisa_set_contract``, ``deisa_get_contract``, ``deisa_watch_contracts``: what the analytics
  needs of an array (:mod:`deisa.contract`); ``deisa_open`` replies with the array's contract,
  a step's record carries the one it was sent under (``contract``, from ``deisa_publish``).


Runs in the Dask scheduler process, on its event loop. Imports its route groups and stores,
:mod:`deisa.wire` and distributed.
"""

from __future__ import annotations

import logging
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from ..wire import EXTENSION_NAME, Route
from .contracts import ContractStore
from .publishing import Publishing
from .steering import SteeringValues
from .taking import Taking
from .workers import Workers

logger = logging.getLogger(__name__)

__all__ = ["EXTENSION_NAME", "StreamExtension"]


class StreamExtension(Publishing, Taking, Workers, SchedulerPlugin):
    """Holds the steps published by Bridges until Adapters take them. See module docstring."""

    name = EXTENSION_NAME
    idempotent = True

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        handlers = {
            Route.WORKERS: self.workers,
            Route.OPEN: self.open_stream,
            Route.PUBLISH: self.publish_step,
            Route.PUBLISH_MANY: self.publish_many,
            Route.CLOSE: self.close_stream,
            Route.META: self.array_meta,
            Route.GET: self.get_step,
            Route.ATTACH: self.attach,
            Route.DETACH: self.detach,
            Route.STATS: self.stats,
            Route.WATCH_WORKERS: self.watch_workers,
        }
        scheduler.handlers.update({route.value: handler for route, handler in handlers.items()})
        scheduler.stream_handlers[Route.STEP_TAKEN.value] = self.step_taken
        self.steering = SteeringValues()  # deisa_set_value, deisa_get_value
        self.contracts = ContractStore(self._open_meta)  # deisa_*_contract(s)
        for group in (self.steering, self.contracts):
            scheduler.handlers.update(group.handlers())
        logger.info("deisa stream extension installed on %s", scheduler.address)

    def stats(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "totals": {name: dict(counts) for name, counts in self.totals.items()},
            "steering": self.steering.stats(),
            "contracts": self.contracts.stats(),
            "memory": self.pressure(),
            "streams": {
                name: {
                    "run": s.run,
                    "published": s.published,
                    "taken": s.taken,
                    "queued": s.queued_steps(),
                    "closed": s.closed,
                    "dropped": list(s.dropped),
                    "lost": [list(lost) for lost in s.lost],
                    "consumers": {
                        r.name: {
                            "members": sorted(r.members),
                            "taken": r.taken,
                            "queued": r.queued_steps(),
                        }
                        for r in s.readers.values()
                        if not r.waiting
                    },
                }
                for name, s in self.streams.items()
            },
        }
