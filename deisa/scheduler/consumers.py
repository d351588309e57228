"""Consumers and groups: the routes ``deisa_attach`` and ``deisa_detach``, and the scheduler's
``remove_client`` hook (see "Consumers and groups" in :mod:`._streams`).

Runs in the Dask scheduler process, on its event loop. Imports :mod:`._state`, :mod:`._streams`
and :mod:`deisa.wire`.
"""

from __future__ import annotations

import logging
from typing import Any

from ..wire import Reply, ok
from ._state import StreamState
from ._streams import UNCLAIMED, End, Reader, Step, Stream

logger = logging.getLogger(__name__)


class Consumers(StreamState):
    """Readers attach (a consumer, or its group) and detach (their steps released or kept)."""

    def _attach(self, stream: Stream, consumer: str, client: str, group: str | None) -> Reader:
        """The reader of ``consumer`` in ``stream``, attaching it (or its group) if new."""
        self.consumers[consumer] = client
        name = consumer if group is None else f"group:{group}"
        reader = stream.readers.get(name)
        if reader is not None:
            reader.members.add(consumer)
            return reader
        if stream.run is None or stream.consumed:
            reader = Reader(name, {consumer})  # waits for the next run
        elif (held := stream.unclaimed_reader()) is not None:  # it takes the steps that waited
            del stream.readers[held.name]
            reader = Reader(name, {consumer}, held.queue, held.run)
        else:  # joins mid-run: starts at the next step
            reader = Reader(name, {consumer}, run=stream.run)
            if stream.closed:
                reader.queue.append(End(stream.published, stream.run))
        stream.readers[name] = reader
        logger.info(
            "deisa: %s attached to %r (%d reader(s))", name, stream.name, len(stream.readers)
        )
        return reader

    def _detach_reader(self, stream: Stream, reader: Reader) -> None:
        """``reader`` leaves: its steps are released unless another reader has to take them."""
        del stream.readers[reader.name]
        steps = [entry for entry in reader.queue if isinstance(entry, Step)]
        if not stream.readers and stream.run is not None and (steps or not stream.closed):
            # the last reader left mid-run: what it had not taken waits for the next one
            stream.readers[UNCLAIMED] = Reader(
                UNCLAIMED, set(), reader.queue, reader.run, waiting=True
            )
            return
        for step in steps:
            self._untake(stream, step)

    def _leave(self, consumer: str, names: list[str] | None = None) -> list[Stream]:
        """Detach ``consumer`` from the streams ``names`` (default: all); the streams touched."""
        touched = []
        for stream in list(self.streams.values()):
            if names is not None and stream.name not in names:
                continue
            for reader in list(stream.readers.values()):
                if consumer in reader.members:
                    reader.members.discard(consumer)
                    if not reader.members:
                        self._detach_reader(stream, reader)
                    touched.append(stream)
                    logger.info("deisa: consumer %s left %r", consumer, stream.name)
        if names is None:
            self.consumers.pop(consumer, None)
        return touched

    async def attach(
        self, name: str, client: str, consumer: str, group: str | None = None
    ) -> Reply:
        self.calls["attach"] += 1
        self._attach(self._stream(name), consumer, client, group)
        return ok()

    async def detach(self, consumer: str, names: list[str] | None = None) -> Reply:
        self.calls["detach"] += 1
        for stream in self._leave(consumer, names):
            await stream.notify()
        return ok()

    def remove_client(self, scheduler: Any, client: str) -> None:
        """A client left the scheduler (closed, died, timed out): its consumers detach."""
        gone = [c for c, owner in self.consumers.items() if owner == client]
        touched = {id(s): s for consumer in gone for s in self._leave(consumer)}
        for stream in self.streams.values():
            for deferred in [k for k in stream.deferred if k[0] == client]:
                for entry in stream.deferred.pop(deferred):
                    self._untake(stream, entry)
        for stream in touched.values():  # a sync hook: wake the waiters from the loop
            self._soon(stream.notify())
