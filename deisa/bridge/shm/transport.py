"""How a rank's blocks reach their workers: shared memory on the node, TCP otherwise.

With ``transport="auto"`` (the default) a rank tries, once per worker, the handshake with that
worker's shared-memory listener (:mod:`deisa.bridge.shm.channel`, :mod:`deisa.worker.shm`): where it
succeeds (the worker is on this node, runs as the same account and has the listener, which rank 0
installs on every worker), the blocks for that worker go through a ring of shared slots, one copy,
and the worker keeps them as they are; elsewhere they go over distributed's connection (TCP, or
TLS), as a ``transport="tcp"`` Bridge sends them all. A handshake that fails is tried again
after :data:`CHANNEL_RETRY_S` (a worker that has just joined may not have the listener yet).
Everything after the send (registration, flow control, contracts, loss handling) is the same
either way.

In ``mode="async"`` the Bridge copies a block with :meth:`Transport.copy_in`: into a slot of
the worker's ring when there is one, so that the copy ``publish`` makes anyway is the only one.
Between :meth:`Transport.begin_step` and :meth:`Transport.end_step` (``bridge.step(t)``) the
blocks for one worker go one after another into one slot (:mod:`.pack`).

The main thread copies blocks in (``copy_in``) and gives slots back; the loop thread sends
(``send``) and opens the channels.

Runs in a simulation rank, on its main thread and its event-loop thread. Imports
:mod:`deisa._dask_internals`, :mod:`deisa.wire.shm`, the arrays wing's boxes, the Bridge's options
and this wing's channel, pack, pool and slot.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import numpy as np

from ... import _dask_internals
from ...wire.shm import key_to_wire, plain_dtype
from ..arrays.boxes import Parcel
from ..options import TRANSPORTS
from .channel import Channel
from .pack import StepPacks
from .pool import SlotPool
from .slot import Slot

logger = logging.getLogger(__name__)

__all__ = ["CHANNEL_RETRY_S", "SHARED_MEMORY", "SLOT_PATHS", "TCP", "TRANSPORTS", "Transport"]

SHARED_MEMORY, TCP = "shared memory", "tcp"
CHANNEL_RETRY_S = 5.0
"""Seconds before a failed shared-memory handshake with a worker is tried again."""
Spawn = Callable[[Coroutine[Any, Any, Any]], concurrent.futures.Future[Any]]
"""Runs a coroutine on the Bridge's event loop from another thread (``LoopThread.spawn``)."""
SLOT_PATHS = ("prepared", "given back", "fresh")
"""How :meth:`Transport.copy_in` placed a block, in its debug line's ``deisa_slot`` attribute:
copied into a slot mapped ahead, or written into a slot the worker gave back but not mapped
ahead yet, or into a fresh one (whose pages the kernel allocates then: the costly case)."""
OPEN_WAIT_S = 0.25
"""Seconds :meth:`Transport.copy_in` waits for a channel :meth:`Transport.open_soon` started
(a handshake on the node takes milliseconds; a block copied elsewhere meanwhile is copied
twice)."""


class Transport:
    """This rank's ways to its workers (see the module docstring).

    The TCP sends are the caller's (they need the rank's connection pool and its loss
    handling); this object counts them (:meth:`sent_by_tcp`).

    Parameters
    ----------
    kind
        ``"auto"`` (shared memory where a worker of this node answers) or ``"tcp"``.

    Attributes
    ----------
    blocks : collections.Counter
        Blocks sent so far, by ``"shared memory"`` and ``"tcp"``.
    slot_pool : deisa.bridge.shm.pool.SlotPool
        The rank's warm pool of slots, over all its channels (budget 0 until the Bridge sizes
        it: no pool).
    """

    def __init__(self, kind: str = "auto") -> None:
        if kind not in TRANSPORTS:
            raise ValueError(f"transport={kind!r}: choose one of {', '.join(TRANSPORTS)}")
        self.kind = kind
        self.blocks: Counter[str] = Counter()
        self.slot_pool = SlotPool()
        self._channels: dict[str, Channel] = {}
        self._opening: dict[str, asyncio.Future[Channel | None]] = {}
        self._tried_at: dict[str, float] = {}
        self._lent: dict[int, tuple[Slot, np.ndarray, int]] = {}  # id(view): slot, view, offset
        self._packs = StepPacks()
        self._starting: dict[str, concurrent.futures.Future[Channel | None]] = {}

    def pool_summary(self) -> dict[str, Any]:
        """The slot pool's :meth:`~deisa.bridge.shm.pool.SlotPool.summary` and how many blocks
        went each way so far (``"blocks by shared memory"``, ``"blocks by tcp"``)."""
        sent = {f"blocks by {kind}": self.blocks[kind] for kind in (SHARED_MEMORY, TCP)}
        return {**self.slot_pool.summary(), **sent}

    @property
    def used(self) -> str:
        """``"shared memory"``, ``"tcp"``, ``"shared memory and tcp"`` or ``"none"``: how this
        rank's blocks went so far."""
        kinds = [kind for kind in (SHARED_MEMORY, TCP) if self.blocks[kind]]
        return " and ".join(kinds) or "none"

    # -- the caller's thread -----------------------------------------------------------------

    def open_soon(self, worker: str, spawn: Spawn) -> None:
        """Start opening the channel to ``worker`` on the event loop (``spawn`` runs a coroutine
        there), as soon as the rank knows its worker: the next :meth:`copy_in` for it waits
        for the handshake up to :data:`OPEN_WAIT_S` instead of finding no channel yet."""
        if self.kind != "tcp" and worker not in self._channels and worker not in self._starting:
            self._starting[worker] = spawn(self.channel(worker))

    def copy_in(self, worker: str, block: np.ndarray) -> np.ndarray | None:
        """A copy of ``block`` in a slot of ``worker``'s ring, or ``None`` (no channel yet, the
        ring full, a dtype that needs pickling): use a buffer of your own then. Copied into a
        slot mapped ahead, else written into the slot's file
        (:meth:`~deisa.bridge.shm.channel.Slot.write`: a fresh slot's pages are not zeroed first),
        then mapped without filling its page tables (the view is read only if the block goes
        by TCP after all); a block that is not C-contiguous is copied into a mapped slot. Give it
        back with :meth:`give_back` once sent."""
        starting = self._starting.pop(worker, None)
        if starting is not None:  # at most once per worker: later blocks do not wait
            concurrent.futures.wait([starting], timeout=OPEN_WAIT_S)
        channel = self._channels.get(worker)
        if channel is None or channel.broken or not plain_dtype(block.dtype) or block.nbytes == 0:
            return None
        if self._packs.open:
            return self._copy_packed(worker, channel, block)
        slot = channel.take(block.nbytes, mapped=not block.flags.c_contiguous)
        if slot is None:
            return None
        path = "prepared" if slot.prepared else "given back" if slot.shared else "fresh"
        try:
            if not slot.prepared:  # written with pwrite, then mapped without page tables
                slot.write(block)
                view = slot.view(block.shape, block.dtype, populate=False)
            else:
                view = slot.view(block.shape, block.dtype)
                np.copyto(view, block)
        except OSError as exc:  # no memory for it: this block goes by TCP
            logger.warning("deisa bridge: writing a shared-memory slot failed: %s", exc)
            channel.untake(slot)
            return None
        logger.debug(
            "deisa bridge: a block of %d bytes into a %s slot (%d in the ring of worker %s)",
            block.nbytes, path, len(channel.slots), worker, extra={"deisa_slot": path},
        )  # fmt: skip
        slot.blocks = 1
        self._lent[id(view)] = (slot, view, 0)
        return view

    def _copy_packed(self, worker: str, channel: Channel, block: np.ndarray) -> np.ndarray | None:
        """:meth:`copy_in` inside a step: ``block`` after the step's blocks for ``worker`` in
        their pack (:mod:`.pack`), or in a new pack (a slot of the size the last step took)."""
        nbytes = block.nbytes
        pack = self._packs.pack_for(worker, nbytes)
        if pack is None:
            slot = channel.take(self._packs.size_for(worker, nbytes), mapped=False)
            if slot is None:
                return None
            self._release(self._packs.close(worker))
            pack = self._packs.start(worker, slot)
            path = "prepared" if slot.prepared else "given back" if slot.shared else "fresh"
            logger.debug(
                "deisa bridge: a step's blocks into a %s slot of %d bytes (%d in the ring of "
                "worker %s)", path, slot.size, len(channel.slots), worker,
                extra={"deisa_slot": path},
            )  # fmt: skip
        slot, offset = pack.slot, pack.used
        try:
            if not slot.prepared and block.flags.c_contiguous:  # pwrite: no page zeroed first
                slot.write(block, offset)
                view = slot.view(block.shape, block.dtype, populate=False, offset=offset)
            else:
                view = slot.view(block.shape, block.dtype, offset=offset)
                np.copyto(view, block)
        except OSError as exc:  # no memory for it: this block goes by TCP
            logger.warning("deisa bridge: writing a shared-memory slot failed: %s", exc)
            if not pack.count:
                self._release(self._packs.close(worker))
            return None
        pack.place(nbytes)
        slot.blocks += 1
        self._lent[id(view)] = (slot, view, offset)
        return view

    def begin_step(self, expected: Callable[[], Mapping[str, int]] | None = None) -> None:
        """A step of several arrays starts (``bridge.step(t)``): the blocks :meth:`copy_in`
        copies for one worker go into one slot until :meth:`end_step`; ``expected``: the
        bytes declared for each worker (:meth:`.pack.StepPacks.begin`)."""
        self._packs.begin(expected)

    def end_step(self) -> None:
        """The step's copies are over: its packs take no more blocks; each slot goes back once
        its blocks are given back (:meth:`give_back`)."""
        for slot in self._packs.end():
            self._release(slot)

    def _release(self, slot: Slot | None) -> None:
        """Give ``slot`` back to its channel if no block of it is out and no pack fills it."""
        if slot is not None and not slot.blocks and not slot.packing:
            slot.channel.untake(slot)

    def copy_parcel_in(self, worker: str, parcel: Parcel) -> np.ndarray | None:
        """A rank's boxes of a step (:class:`~deisa.bridge.arrays.boxes.Parcel`) packed into a
        slot of ``worker``'s ring, one copy per box straight from the caller's arrays, or
        ``None`` as :meth:`copy_in` (one box is a block: :meth:`copy_in`)."""
        if len(parcel.arrays) == 1:
            return self.copy_in(worker, parcel.arrays[0])
        starting = self._starting.pop(worker, None)
        if starting is not None:
            concurrent.futures.wait([starting], timeout=OPEN_WAIT_S)
        channel = self._channels.get(worker)
        dtype = parcel.arrays[0].dtype
        if channel is None or channel.broken or not plain_dtype(dtype) or not parcel.size:
            return None
        slot = channel.take(parcel.size * dtype.itemsize)
        if slot is None:
            return None
        try:
            view = slot.view(parcel.shape, dtype)
            parcel.pack(view)
        except OSError as exc:  # no memory for it: this parcel goes by TCP
            logger.warning("deisa bridge: writing a shared-memory slot failed: %s", exc)
            channel.untake(slot)
            return None
        slot.blocks = 1
        self._lent[id(view)] = (slot, view, 0)
        return view

    def give_back(self, buffer: np.ndarray) -> bool:
        """Return a copy from :meth:`copy_in` (``False`` for any other array); its slot goes
        back with the last block of it."""
        lent = self._lent.pop(id(buffer), None)
        if lent is None or lent[1] is not buffer:
            return False
        slot = lent[0]
        slot.blocks -= 1
        self._release(slot)
        return True

    def settle(self) -> None:
        """Wake the channels' threads: they unmap here the slots given back, prepare the next
        and grow the pools (:meth:`~deisa.bridge.shm.channel.Channel.settle`). Call it once the
        caller holds no view of the slots given back, and not right before a copy."""
        for channel in list(self._channels.values()):
            channel.settle()

    def node_local(self, worker: str) -> bool:
        """Whether blocks for ``worker`` go through shared memory now."""
        channel = self._channels.get(worker)
        return channel is not None and channel.broken is None

    # -- the event-loop thread ---------------------------------------------------------------

    async def send_shared(self, worker: str, key: Any, block: np.ndarray) -> int | None:
        """Send ``block`` to ``worker`` through shared memory: its size on the worker, or
        ``None`` when it cannot go that way (send it by TCP). A
        :class:`~deisa.bridge.shm.channel.ChannelError` (an ``OSError``) if the worker's end
        fails."""
        if not plain_dtype(block.dtype) or block.nbytes == 0 or key_to_wire(key) is None:
            return None
        channel = await self.channel(worker)
        if channel is None:
            return None
        lent = self._lent.get(id(block))
        slot, offset = (lent[0], lent[2]) if lent is not None and lent[1] is block else (None, 0)
        own = slot is None or slot.channel is not channel
        if own:  # a block of the caller's, or in the slot of a worker that has left: copy
            slot, offset = channel.take(block.nbytes, usual=False), 0
            if slot is None:
                if channel.broken is None and channel.full():
                    self.slot_pool.fell_back(worker, block.nbytes, len(channel.slots))
                return None
            np.copyto(slot.view(block.shape, block.dtype), block)
        assert slot is not None
        try:
            nbytes = await channel.put(slot, key, block.shape, block.dtype, offset)
        finally:
            if own:
                channel.untake(slot)
                channel.settle()
        self.blocks[SHARED_MEMORY] += 1
        return nbytes

    async def send(
        self, connections: Any, worker: str, key: Any, block: np.ndarray
    ) -> dict[Any, int]:
        """Send ``block`` to ``worker`` under ``key``, through shared memory if it can go that
        way, else over ``connections`` (the rank's
        :class:`~deisa.bridge.link.connect.Connections`); ``{key: its size on the worker}``, as
        :func:`deisa._dask_internals.send_blocks_to_worker`."""
        nbytes = await self.send_shared(worker, key, block)
        if nbytes is not None:
            return {key: nbytes}
        stored = await _dask_internals.send_blocks_to_worker(connections, worker, {key: block})
        self.sent_by_tcp()
        return stored

    def sent_by_tcp(self) -> None:
        """Count a block the caller sent by TCP."""
        self.blocks[TCP] += 1

    async def channel(self, worker: str) -> Channel | None:
        """The open channel to ``worker``, opening it if it is time to try; ``None`` if none."""
        if self.kind == "tcp":
            return None
        channel = self._channels.get(worker)
        if channel is not None and channel.broken is None:
            return channel
        if channel is not None:  # the worker's end failed: it may have left
            del self._channels[worker]
            self._tried_at[worker] = time.monotonic()
            await channel.close()
        opening = self._opening.get(worker)
        if opening is not None:
            return await asyncio.shield(opening)
        if time.monotonic() - self._tried_at.get(worker, -CHANNEL_RETRY_S) < CHANNEL_RETRY_S:
            return None
        opening = self._opening[worker] = asyncio.ensure_future(
            Channel.open(worker, self.slot_pool)
        )
        try:
            channel = await asyncio.shield(opening)
        finally:
            self._opening.pop(worker, None)
        self._tried_at[worker] = time.monotonic()
        if channel is not None:
            self._channels[worker] = channel
            logger.debug("deisa bridge: blocks to worker %s through shared memory", worker)
        return channel

    async def close(self) -> None:
        """Close every channel (the workers keep the blocks they hold)."""
        channels, self._channels = list(self._channels.values()), {}
        self._lent.clear()
        for channel in channels:
            await channel.close()
