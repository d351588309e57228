"""The analytics' side of a stream: the routes ``deisa_meta`` and ``deisa_get``, and the
``deisa_step_taken`` message (key ownership moves from the stream to the taker's client).

Runs in the Dask scheduler process, on its event loop. Imports :mod:`._streams`,
:mod:`.consumers`, :mod:`deisa.wire` and :mod:`deisa._dask_internals`.
"""

from __future__ import annotations

from collections import Counter

from .. import _dask_internals
from ..wire import Reply, Status, error, ok
from ._streams import End, Lost, Reader, Step, Stream, end_reply
from .consumers import Consumers


class Taking(Consumers):
    """A consumer waits for an array's metadata, then takes its steps one by one."""

    async def array_meta(
        self,
        name: str,
        timeout: float | None = None,
        client: str | None = None,
        consumer: str | None = None,
        group: str | None = None,
    ) -> Reply:
        self.calls["meta"] += 1
        stream = self._stream(name)
        if consumer is not None and client is not None:
            self._attach(stream, consumer, client, group)
        if not await stream.wait_for(
            lambda: stream.meta is not None and not stream.consumed, timeout
        ):
            return error(f"no simulation opened array {name!r} within {timeout} s", Status.TIMEOUT)
        return ok(meta=stream.meta, run=stream.run)

    async def get_step(
        self,
        name: str,
        client: str,
        timeout: float | None = None,
        run: str | None = None,
        consumer: str | None = None,
        group: str | None = None,
    ) -> Reply:
        self.calls["get"] += 1
        stream = self._stream(name)
        consumer = client if consumer is None else consumer

        def replaced() -> bool:
            return run is not None and stream.run != run

        if replaced():  # its end marker went with the run it finished
            return end_reply(name, None, run)  # type: ignore[arg-type]
        reader = self._attach(stream, consumer, client, group)

        def current() -> Reader | None:
            # the reader may be replaced meanwhile (detached, then attached again)
            return stream.readers.get(reader.name)

        def ready() -> bool:
            mine = current()
            return replaced() or mine is None or bool(mine.queue)

        if not await stream.wait_for(ready, timeout):
            return error(
                f"no step of {name!r} came within {timeout} s",
                Status.TIMEOUT,
                open=stream.run is not None and not stream.consumed,
                published=0 if stream.consumed else stream.published,
                memory=self.pressure(),
            )
        if replaced():  # its end marker went with the run it finished
            return end_reply(name, None, run)  # type: ignore[arg-type]
        if client not in self.scheduler.clients:  # left while waiting: the step stays queued
            return error(f"client {client} is not connected")
        mine = current()
        if mine is None:
            return error(f"consumer {consumer} was detached from {name!r}")
        entry = mine.queue[0]
        if isinstance(entry, (Lost, End)):
            return await self._pass_marker(stream, mine, entry, consumer)
        return await self._hand_over(stream, mine, entry, client)

    async def _pass_marker(
        self, stream: Stream, mine: Reader, entry: Lost | End, consumer: str
    ) -> Reply:
        """The reader's next entry is a marker: a lost step, which it passes, or the run's end."""
        name = stream.name
        if isinstance(entry, Lost):  # its place: the reader learns it was lost, and passes it
            mine.queue.popleft()
            stream.passed(entry.step)
            await stream.notify()
            return entry.reply(name)
        mine.members.discard(consumer)  # this consumer is done with the run
        if mine.members:  # a group: its other members read the end too
            await stream.notify()
            return entry.reply(name)
        del stream.readers[mine.name]
        if not any(r.run == stream.run for r in stream.readers.values()):
            self._retire(stream)  # in place: readers of the next run may already wait on it
        await stream.notify()
        return entry.reply(name)

    async def _hand_over(self, stream: Stream, mine: Reader, entry: Step, client: str) -> Reply:
        """The reader's next step ``entry``: its keys shared with ``client``, its description."""
        mine.queue.popleft()
        _dask_internals.share_keys(self.scheduler, entry.keys, client)
        again = client in entry.clients
        if again:
            # another consumer of this client took the step before: a release the client sent
            # for it may still be on its way (on its batched stream, not on this connection) and
            # undo the share above. The stream keeps the keys until ``deisa_step_taken`` comes
            # on that batched stream, after any such release.
            stream.deferred.setdefault((client, entry.run, entry.step), []).append(entry)
        else:
            entry.clients.add(client)
            self._untake(stream, entry)
        mine.taken += 1
        stream.taken += 1
        self.totals.setdefault(stream.name, Counter())["taken"] += 1
        stream.passed(entry.step)
        await stream.notify()
        pressure = self.pressure()
        return ok(
            **({"memory": pressure} if pressure else {}),
            step=entry.step,
            keys=entry.keys,
            workers=entry.workers,
            run=entry.run,
            meta=stream.meta,
            nthreads=self._nthreads(entry.workers),
            confirm=again,
            contract=entry.contract,
            **({"layout": entry.layout} if entry.layout is not None else {}),
            **({"attrs": entry.attrs} if entry.attrs else {}),
        )

    def step_taken(self, client: str, name: str, run: str, step: int) -> None:
        """Batched-stream message of a client confirming a step it took again (see get_step)."""
        self.calls["step_taken"] += 1
        stream = self.streams.get(name)
        waiting = stream.deferred.get((client, run, step)) if stream is not None else None
        if not waiting or stream is None:
            return
        entry = waiting.pop()
        if not waiting:
            del stream.deferred[(client, run, step)]
        if client in self.scheduler.clients:
            _dask_internals.share_keys(self.scheduler, entry.keys, client)
        self._untake(stream, entry)

    def _nthreads(self, holders: list[str]) -> dict[str, int]:
        """Threads of the workers holding a step's blocks (the splitter sizes partitions by it)."""
        workers = self.scheduler.workers
        return {w: workers[w].nthreads for w in set(holders) if w in workers}
