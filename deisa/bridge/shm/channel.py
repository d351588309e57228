"""The rank's side of the shared-memory path: one :class:`Channel` per worker of its node.

A channel is a Unix socket to the worker's listener (:mod:`deisa.worker.shm`) and a ring of
slots, each an anonymous ``memfd`` mapped here and there (:mod:`deisa.wire.shm`). A block is
copied into a
free slot (by ``publish`` itself in ``mode="async"``: the copy the Bridge makes anyway), then a
``put`` message names its key, dtype and shape; the worker's ``stored`` answer means the block is
in its memory, as after a TCP send. The ring grows while every slot is held by the worker (steps
waiting for the analytics), up to the slots the rank's arrays can have alive at once
(:func:`~deisa.bridge.shm.ring_size.ring_slots`, :data:`MAX_SLOTS` at least), then
:meth:`Channel.take` gives ``None`` and the block goes by TCP (counted:
:meth:`~deisa.bridge.shm.pool.SlotPool.fell_back`); a slot comes back when the worker has
dropped the block.

Bookkeeping (:meth:`Channel.take`, :meth:`Channel.untake`) may run on any thread, under the
channel's lock; the socket is used from the Bridge's event-loop thread only.

Runs in a simulation rank, on its main thread (bookkeeping), its event-loop thread (the socket) and
the channel's own thread. Imports :mod:`deisa.wire.shm`, :mod:`deisa.wire.names` and this wing's
pool, slot and warm ring.
"""

from __future__ import annotations

import array
import asyncio
import collections
import logging
import socket
import threading
from typing import Any

import numpy as np

from ...wire.names import connect_own, rank_secrets
from ...wire.shm import (
    FREE,
    MAX_MESSAGE,
    decode,
    encode,
    key_to_wire,
    slot_bytes,
    socket_names,
)
from .pool import SMALL, SlotPool
from .slot import Slot
from .warm_ring import WarmRing

logger = logging.getLogger(__name__)

MAX_SLOTS = 32
"""Slots per channel at most, unless the rank's arrays need more
(:attr:`~deisa.bridge.shm.pool.SlotPool.ring`); past them, blocks go by TCP until the worker
frees one."""
SPARE = 1
"""Free slots a channel keeps mapped ahead of the next block, by a thread of its own: slots
the worker has given back, whose pages exist (a mapping costs about a third of a memcpy of
them). A fresh slot is not prepared: :meth:`Slot.write` fills it faster than a first touch
through a mapping, which zeroes every page before the copy."""
KEEP_FREE = 2
"""Free slots a channel keeps allocated (the pool's free ones counted); more are given back (the
memory of a burst). The warm pool's slots (:mod:`deisa.bridge.shm.pool`) stay, free or not."""
POLL_S = 0.005
"""How often the preparer looks for a slot the worker has given back, while it waits for one."""
WARM_POLL_S = 0.05
"""How often the preparer looks for a pool slot the worker gives back that is not mapped here
(to map it before the next burst: slower than :data:`POLL_S`, as an analytics may hold its last
steps for the whole run)."""
HELLO_WAIT_S = 10.0
"""Seconds the worker's listener may take to answer ``hello`` (it answers from its event
loop, which a busy worker runs late)."""


def fitting(blocks: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``blocks`` (the fields of a ``put`` each) in groups whose ``puts`` message fits in
    :data:`MAX_MESSAGE`, in order."""
    groups: list[list[dict[str, Any]]] = [[]]
    size = len(encode(op="puts", blocks=[]))
    for block in blocks:
        more = len(encode(**block)) + 1
        if groups[-1] and size + more > MAX_MESSAGE:
            groups.append([])
            size = len(encode(op="puts", blocks=[]))
        groups[-1].append(block)
        size += more
    return groups


def answers(answer: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The worker's answer as ``(put id, answer to that put)`` pairs: one for a ``put``'s
    ``stored`` or ``error``, one per block of a ``puts`` (its ``stored`` pairs, its errors)."""
    if answer.get("op") != "stored-many":
        return [(int(answer.get("id", -1)), answer)]
    stored = [(int(i), {"op": "stored", "nbytes": int(n)}) for i, n in answer.get("stored", ())]
    failed = [(int(i), {"op": "error", "message": str(m)}) for i, m in answer.get("errors", ())]
    return stored + failed


class ChannelError(ConnectionError):
    """The worker's end of a channel failed or closed (it may have left): an ``OSError``, as a
    failed TCP send, so that the loss policy applies the same."""


class Channel(WarmRing):
    """This rank's shared memory with one worker of its node (see the module docstring).

    Use :meth:`open`, on the Bridge's event loop.
    """

    def __init__(self, worker: str, sock: socket.socket, pool: SlotPool | None = None) -> None:
        self.worker = worker
        self.sock = sock
        self.pool = SlotPool() if pool is None else pool
        self._cold = False  # the pool failed to grow here: no more tries
        self._no_huge = False  # a hugetlb slot could not get its pages: no more tries
        self._outran = False  # the ring needed more slots than it keeps without a pool
        self.slots: list[Slot] = []
        self.broken: str | None = None
        self._lock = threading.Condition()
        self._next_id = 0
        self._next_put = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reading: asyncio.AbstractEventLoop | None = None  # the loop that reads the socket
        self._retired: collections.deque[int] = collections.deque()  # to drop on the worker
        self._want = 0  # bytes of the last block: the size of the spare slot to prepare
        self._unmap_later: set[Slot] = set()
        self._settle_pending = False
        self._outbox: list[dict[str, Any]] = []  # puts of this loop turn (_hand_over)
        self._sharing = asyncio.Lock()  # a slot's descriptor sent once, before its blocks
        self._preparer = threading.Thread(
            target=self._prepare, name=f"deisa-shm-{worker}", daemon=True
        )
        self._preparer.start()

    @classmethod
    async def open(cls, worker: str, pool: SlotPool | None = None) -> Channel | None:
        """A channel to ``worker``'s listener, or ``None`` when none of this account answers
        here (another node, a worker without the plugin): the blocks then go by TCP."""
        loop = asyncio.get_running_loop()
        groups = [socket_names(worker, secret) for secret in rank_secrets()]
        sock = await connect_own(socket.SOCK_SEQPACKET, groups)
        if sock is None:  # no listener of this account here: by TCP
            return None
        try:
            await loop.sock_sendall(sock, encode(op="hello"))
            reply = decode(await asyncio.wait_for(loop.sock_recv(sock, MAX_MESSAGE), HELLO_WAIT_S))
        except (OSError, ValueError, asyncio.TimeoutError, TimeoutError) as exc:
            logger.debug("deisa bridge: no shared memory with worker %s: %r", worker, exc)
            sock.close()
            return None
        if reply.get("worker") != worker:
            logger.warning(
                "deisa bridge: the shared-memory listener for %s answered as %r; sending by TCP",
                worker, reply.get("worker"),
            )  # fmt: skip
            sock.close()
            return None
        channel = cls(worker, sock, pool)
        channel._reading = loop
        loop.add_reader(sock, channel._readable)
        return channel

    # -- any thread --------------------------------------------------------------------------

    def take(self, nbytes: int, mapped: bool = True, usual: bool = True) -> Slot | None:
        """A free slot for ``nbytes``, lent to the caller until :meth:`untake` (after
        :meth:`put`, or instead of it); ``None`` when the ring is full, the channel broken or
        the memory short. Mapped, unless ``mapped=False`` and no prepared slot is free (the
        caller then fills it with :meth:`Slot.write`). ``usual=False``: a block copied here
        only once (one the rank held before the channel opened), whose size is not the one
        the preparer makes ready and the pool grows for."""
        with self._lock:
            if self.broken is not None:
                return None
            fitting = [slot for slot in self.slots if slot.free and slot.fits(nbytes)]
            if fitting:  # a prepared one if any
                slot = max(fitting, key=lambda s: (s.prepared, -s.capacity))
            elif len(self.slots) < self.most_slots:
                self._outran |= usual and len(self.slots) >= max(KEEP_FREE, SPARE)  # pool grows
                slot = self._new_slot(nbytes)
            else:
                return None
            slot.lend()
            if usual:
                self._want = nbytes  # the next settle() prepares a slot of this size
        if not mapped and not slot.prepared:
            return slot
        try:
            slot.map()
        except OSError as exc:  # no memory for it: this block goes by TCP
            logger.warning("deisa bridge: mapping a shared-memory slot failed: %s", exc)
            self.untake(slot)
            return None
        return slot

    @property
    def most_slots(self) -> int:
        """The slots this ring may hold: the pool's :attr:`~.pool.SlotPool.ring`, sized for
        the rank's arrays, :data:`MAX_SLOTS` at least."""
        return max(MAX_SLOTS, self.pool.ring)

    def full(self) -> bool:
        """Whether the ring has its most slots (:attr:`most_slots`): a block that finds none
        of them free goes by TCP."""
        with self._lock:
            return len(self.slots) >= self.most_slots

    def untake(self, slot: Slot) -> None:
        """Give back a slot :meth:`take` lent (handed to the worker or not): the preparer
        thread unmaps its data here, unless it is warm or free and kept as the spare, once no
        view of it is left, when :meth:`settle` wakes it."""
        with self._lock:
            slot.lend(False)
            self._unmap_later.add(slot)
            self._settle_pending = True

    def settle(self) -> None:
        """Wake the preparer: it unmaps the slots given back whose views are gone since,
        prepares a spare for the last block's size, grows or shrinks the pool. :meth:`take`
        and :meth:`untake` do not wake it: the caller settles once its copy is done (the
        thread's munmap or page-table fill of a big slot beside the copy slows the copy)."""
        with self._lock:
            self._settle_pending = bool(self._unmap_later)
            self._lock.notify()

    def _settle(self) -> None:
        """The preparer thread: unmap what :meth:`untake` left (a munmap of a block's pages is
        not free: off the caller's thread)."""
        with self._lock:
            self._settle_pending = False
            slots = []
            for slot in list(self._unmap_later):
                ready = [s for s in self.slots if s.free and s.prepared and s is not slot]
                if slot.taken or slot not in self.slots or slot.data is None or slot.warm:
                    self._unmap_later.discard(slot)
                elif slot.head[0] != FREE or len(ready) >= SPARE or not slot.populated:
                    slot.lend()  # not lent while it is unmapped
                    slots.append(slot)
                else:
                    self._unmap_later.discard(slot)  # free: the spare
        for slot in slots:
            slot.unmap()
            with self._lock:
                slot.lend(False)
                if slot.data is None:
                    self._unmap_later.discard(slot)

    def _new_slot(self, nbytes: int, kind: str = SMALL, size: int = 0) -> Slot:
        slot = Slot(self, self._next_id, size or slot_bytes(nbytes), kind)
        self._next_id += 1
        self.slots.append(slot)
        return slot

    def _prepare(self) -> None:
        """The preparer thread: keep :data:`SPARE` free slots of the last block's size mapped,
        and give back free slots past :data:`KEEP_FREE`."""
        while True:
            with self._lock:
                while self.broken is None and not self._work():
                    # a slot the worker gives back says nothing: look again while one is held
                    polls = self._awaiting_slot() or self._pool_waits()
                    self._lock.wait(POLL_S if polls else WARM_POLL_S if self._warm_held() else None)
                if self.broken is not None:
                    return
                self._shrink()
                self._adopt()  # before settling: a slot kept warm stays mapped
                settle = self._settle_pending
            if settle:
                self._settle()
            with self._lock:
                self._retire_surplus()
                grown = self._grow()
            if grown is not None:
                self._warm_up(grown)
                continue
            with self._lock:
                if not self._want:
                    continue
                nbytes = self._want
                unmapped = self._to_map(nbytes)
                if not unmapped:  # a fresh slot is filled by write(), never zeroed first
                    self._retire_surplus()
                    continue
                slot = unmapped[0]
                slot.lend()
            try:
                slot.map()  # the page faults, off the caller's thread
            except OSError as exc:  # out of memory: take() maps what it needs itself
                logger.warning("deisa bridge: preparing a shared-memory slot failed: %s", exc)
                with self._lock:
                    self._want = 0
            finally:
                with self._lock:
                    slot.lend(False)

    def _work(self) -> bool:
        """Under the lock: whether the preparer has something to do."""
        if self._settle_pending:
            return True
        if not self._want:
            return False
        if self._may_grow() or (self.pool.over() and any(s.free and s.warm for s in self.slots)):
            return True
        if self._adoptable() or self._to_map(self._want):
            return True
        return bool(self._surplus())  # never the pool's warm slots: the thread would spin

    def _ready(self, nbytes: int) -> int:
        """Under the lock: free slots for ``nbytes`` that are mapped (prepared)."""
        return sum(1 for s in self.slots if s.free and s.fits(nbytes) and s.prepared)

    def _unprepared(self, nbytes: int) -> list[Slot]:
        """Under the lock: free slots for ``nbytes`` the worker gave back, not mapped ahead
        (what the preparer maps; a fresh slot is filled by :meth:`Slot.write` instead)."""
        return [s for s in self.slots if s.free and s.fits(nbytes) and s.shared and not s.prepared]

    def _to_map(self, nbytes: int) -> list[Slot]:
        """Under the lock: the slots the preparer maps next, the pool's first (all of them stay
        mapped), then a spare while fewer than :data:`SPARE` are ready."""
        unmapped = self._unprepared(nbytes)
        warm = [s for s in unmapped if s.warm]
        return warm or (unmapped if self._ready(nbytes) < SPARE else [])

    def _awaiting_slot(self) -> bool:
        """Under the lock: fewer than :data:`SPARE` slots are ready while the worker holds
        some, which it may give back at any time."""
        if not self._want:
            return False
        return self._ready(self._want) < SPARE and any(s.head[0] != FREE for s in self.slots)

    def _warm_held(self) -> bool:
        """Under the lock: the worker holds a slot of the pool that is not mapped here (a
        burst's fresh slot, written unmapped, then adopted): mapped once it comes back, before
        the next burst, which would otherwise map it beside a copy."""
        return any(s.warm and not s.prepared and not s.taken and not s.free for s in self.slots)

    def _surplus(self) -> list[Slot]:
        """Under the lock: the free slots out of the pool past :data:`KEEP_FREE` free ones,
        the pool's counted (the unprepared first): with a pool, the ring keeps at least what it
        keeps without one (slots given back mid-burst reused while the pool's are held)."""
        free = sorted((s for s in self.slots if s.free and not s.warm), key=lambda s: s.prepared)
        warm = sum(1 for s in self.slots if s.free and s.warm and s.fits(self._want))
        keep = max(0, max(KEEP_FREE, SPARE) - warm)
        return free[: max(0, len(free) - keep)]

    def _retire_surplus(self) -> None:
        """Under the lock: close the free slots :meth:`_surplus` names."""
        for slot in self._surplus():
            self._retire(slot)

    def _has_room(self) -> bool:
        return len(self.slots) < self.most_slots

    def _retire(self, slot: Slot) -> None:
        self.slots.remove(slot)
        if slot.shared:
            self._retired.append(slot.id)
        slot.close()

    # -- the event-loop thread ---------------------------------------------------------------

    async def put(
        self, slot: Slot, key: Any, shape: tuple[int, ...], dtype: np.dtype[Any], offset: int = 0
    ) -> int:
        """Hand the block in ``slot`` (``offset`` bytes into its data: a step's pack holds
        several) to the worker under ``key``; its size in the worker's memory. A
        :class:`ChannelError` if the worker's end fails (the slot is then free)."""
        loop = asyncio.get_running_loop()
        wired = key_to_wire(key)
        if wired is None:
            raise ValueError(f"no shared-memory path for key {key!r}")
        ident = self._next_put
        self._next_put += 1
        reply: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._waiting[ident] = reply
        try:
            self._check()
            await self._forget_retired()
            if not slot.shared:
                async with self._sharing:  # the other blocks of a pack wait for its descriptor
                    if not slot.shared:
                        await self._send_fd(encode(op="slot", id=slot.id, size=slot.size), slot.fd)
                        slot.mark_shared()
            slot.hand_over()
            block = {"id": ident, "slot": slot.id, "key": wired, "dtype": dtype.str,
                     "shape": list(shape)}  # fmt: skip
            if offset:
                block["offset"] = offset
            self._outbox.append(block)
            if len(self._outbox) == 1:  # the puts of this loop turn go together, after it
                loop.call_soon(self._hand_over)
            answer = await reply
        except OSError as exc:
            slot.hand_over(False)
            self._break(f"{type(exc).__name__}: {exc}")
            raise ChannelError(
                f"the shared-memory channel to worker {self.worker} failed: {exc}"
            ) from exc
        finally:
            self._waiting.pop(ident, None)
        if answer.get("op") != "stored":
            raise RuntimeError(f"worker {self.worker} refused the block: {answer.get('message')}")
        return int(answer["nbytes"])

    def _hand_over(self) -> None:
        """The loop thread, after the turn that queued puts: hand them to the worker, one
        ``put`` message for one block, ``puts`` messages for several (a step's blocks, which
        :class:`~deisa.bridge.step_scope.StepScope` sends in one loop turn: one hand-over and
        one answer a step, not one a block), each within :data:`MAX_MESSAGE`."""
        blocks, self._outbox = self._outbox, []
        if len(blocks) == 1:
            messages = [encode(op="put", **blocks[0])]
        else:
            messages = [encode(op="puts", blocks=group) for group in fitting(blocks)]
        for data in messages:
            if self.broken is not None:
                return  # _break() failed every put waiting
            try:
                sent = self.sock.send(data)
                if sent != len(data):
                    raise ConnectionError(f"a message of {len(data)} bytes sent as {sent}")
            except (BlockingIOError, InterruptedError):  # the socket's buffer is full: wait
                task = asyncio.get_running_loop().create_task(self._send_later(data))
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
            except OSError as exc:
                self._break(f"{type(exc).__name__}: {exc}")

    async def _send_later(self, data: bytes) -> None:
        try:
            await asyncio.get_running_loop().sock_sendall(self.sock, data)
        except OSError as exc:
            self._break(f"{type(exc).__name__}: {exc}")

    async def _send_fd(self, data: bytes, fd: int) -> None:
        fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
        while True:
            try:
                self.sock.sendmsg([data], fds)
                return
            except (BlockingIOError, InterruptedError):
                await asyncio.sleep(0.001)

    async def _forget_retired(self) -> None:
        while self._retired:
            await asyncio.get_running_loop().sock_sendall(
                self.sock, encode(op="drop", id=self._retired.popleft())
            )

    def _readable(self) -> None:
        """The loop thread, the socket readable: the worker's answers there, each to the put
        waiting for it, in the same loop turn (no task of its own to wake per answer)."""
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
                if not data:
                    raise ConnectionResetError("the worker closed the channel")
                answer = decode(data)
            except (BlockingIOError, InterruptedError):
                return
            except Exception as exc:
                self._stop_reading()
                self._break(f"{type(exc).__name__}: {exc}")
                return
            for ident, one in answers(answer):
                waiting = self._waiting.get(ident)
                if waiting is not None and not waiting.done():
                    waiting.set_result(one)

    def _stop_reading(self) -> None:
        loop, self._reading = self._reading, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self.sock)

    def _check(self) -> None:
        if self.broken is not None:
            raise ConnectionResetError(self.broken)

    def _break(self, why: str) -> None:
        with self._lock:
            if self.broken is None:
                self.broken = why
                logger.info(
                    "deisa bridge: shared memory with worker %s ended: %s", self.worker, why
                )
            self._lock.notify()
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(ConnectionResetError(why))

    async def close(self) -> None:
        """Close the socket and this rank's mappings (the worker keeps what it holds)."""
        self._break("closed")
        self._stop_reading()
        self.sock.close()
        with self._lock:
            for slot in self.slots:
                if slot.warm:
                    self.pool.release(slot.size)
                slot.close()
            self.slots.clear()
