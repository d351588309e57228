"""The workers watch: the routes ``deisa_workers`` and ``deisa_watch_workers``, and the
scheduler's worker hooks (a step with a block on a worker that left is lost for the readers that
had not taken it; a worker paused for memory is named, with its limit: :meth:`Workers.pressure`).

Memory pressure: a worker whose process uses more than ``distributed.worker.memory.pause``
(80 %) of its memory limit stops running tasks until it frees some; the analytics' computations
then wait, the steps queue up to ``buffer_nb`` and flow control holds the simulation, as it does
for any slow analytics. The scheduler logs each pause (and its end), a publish that times out
names the paused workers, and so does every step record and timeout the analytics receives.

Runs in the Dask scheduler process, on its event loop. Imports :mod:`._state`, :mod:`._streams`
and :mod:`deisa.wire`.
"""

from __future__ import annotations

import logging
from typing import Any

from ..wire import WATCH_SECONDS, Reply, ok
from . import _streams
from ._state import StreamState, mib
from ._streams import Lost

logger = logging.getLogger(__name__)


class Workers(StreamState):
    """Who holds blocks: the workers' list, its changes, and the steps lost with a worker."""

    def _worker_list(self) -> list[tuple[str, int]]:
        return sorted((ws.address, ws.nthreads) for ws in self.scheduler.workers.values())

    def workers(self) -> list[tuple[str, int]]:
        self.calls["workers"] += 1
        return self._worker_list()

    async def watch_workers(self, known: list[str], timeout: float | None = WATCH_SECONDS) -> Reply:
        self.calls["watch_workers"] += 1
        changed = self._workers_changed
        await _streams.wait_for(changed, lambda: set(self.scheduler.workers) != set(known), timeout)
        return ok(workers=self._worker_list())

    def log_event(self, topic: Any, msg: Any) -> None:
        """distributed logs each change of a worker's status: a pause for memory, and its end,
        are logged here with the worker's limit."""
        if not isinstance(msg, dict) or msg.get("action") != "worker-status-change":
            return
        if msg.get("status") == "paused":
            ws = self.scheduler.workers.get(topic) if isinstance(topic, str) else None
            limit = f" (memory limit {mib(ws.memory_limit)})" if ws and ws.memory_limit else ""
            logger.warning(
                "deisa: worker %s paused for memory%s: the analytics' tasks wait, and flow "
                "control holds the simulation once buffer_nb steps are queued",
                topic,
                limit,
            )
        elif msg.get("prev-status") == "paused":
            logger.info("deisa: worker %s resumed (%s)", topic, msg.get("status"))

    def add_worker(self, scheduler: Any, worker: str) -> None:
        """A worker joined: wake the ``deisa_watch_workers`` callers."""
        self._soon(_streams.notify(self._workers_changed))

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        """A worker left: every queued step with a block on it is lost for the readers that
        had not taken it (the readers that took it hold the keys; dask reports them lost)."""
        for stream in self.streams.values():
            hit = sorted(
                (step for step in stream.pending.values() if worker in step.workers),
                key=lambda step: step.step,
            )
            for step in hit:
                readers = [r for r in stream.readers.values() if step in r.queue]
                self._lose(stream, Lost(step.step, (worker,), step.run), readers, step)
            if hit:
                self._soon(stream.notify())
        self._soon(_streams.notify(self._workers_changed))
