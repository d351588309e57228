"""The workers watch: the routes ``deisa_workers`` and ``deisa_watch_workers``, and the
scheduler's worker hooks (a step with a block on a worker that left is lost for the readers that
had not taken it)."""

from __future__ import annotations

from typing import Any

from ..wire import WATCH_SECONDS, Reply, ok
from . import _streams
from ._state import StreamState
from ._streams import Lost


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
