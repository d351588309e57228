"""How a channel's ring grows, populates and shrinks its part of the rank's warm pool
(:mod:`.pool`), on the channel's own thread: :class:`WarmRing`, which
:class:`~deisa.bridge.shm.channel.Channel` is.

Runs in a simulation rank, on each channel's preparer thread (under the channel's lock). Imports
:mod:`.pool` and :mod:`deisa.wire.shm`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ...wire.shm import FREE, slot_bytes
from .pool import HUGETLB, SMALL, SlotPool, meminfo, page_kind, round_up
from .ring_size import STEADY_HELD

logger = logging.getLogger(__name__)

__all__ = ["WarmRing"]


class WarmRing:
    """How a channel (:class:`~deisa.bridge.shm.channel.Channel`, which defines the attributes used
    here) grows, populates and shrinks its part of the pool, on its preparer thread.

    The ring's own slots are adopted as they are used (held by the worker or free). The pool
    is populated ahead only once the ring has needed more slots than it keeps without a pool
    (``_outran``: a third slot taken while the others were held, a burst): in a steady state
    and at the start it populates nothing, neither the rank's core nor its start pays for
    slots no block needs."""

    pool: SlotPool
    slots: list[Any]
    _cold: bool
    _no_huge: bool
    _outran: bool
    _kind_for: tuple[int, str] = (0, SMALL)  # the pages of the last block's size
    _want: int
    _lock: threading.Condition

    def _has_room(self) -> bool:  # pragma: no cover - the channel's
        raise NotImplementedError

    def _new_slot(self, nbytes: int, kind: str = SMALL, size: int = 0) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _retire(self, slot: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def _grow(self) -> Any:
        """Under the lock: a new slot of the last block's size for the pool, lent to the
        preparer (which populates it), if the pool's budget allows one; else ``None``."""
        if not self._may_grow():
            return None
        nbytes = self._want
        kind, huge = page_kind(nbytes)
        if kind == HUGETLB and self._no_huge:  # the reserve ran short once: small pages
            kind = page_kind(nbytes, {**meminfo(), "HugePages_Free": 0})[0]
        size = round_up(slot_bytes(nbytes), huge) if kind == HUGETLB else slot_bytes(nbytes)
        if not self.pool.grant(size):
            if kind != HUGETLB or not self.pool.grant(slot_bytes(nbytes)):
                return None
            size = slot_bytes(nbytes)  # what _may_grow counted: no spin on a rounded size
            kind = page_kind(nbytes, {**meminfo(), "HugePages_Free": 0})[0]
        try:
            slot = self._new_slot(nbytes, kind, size)
        except OSError:  # no huge page left: small ones
            self.pool.release(size - slot_bytes(nbytes))
            slot = self._new_slot(nbytes)
        slot.keep_warm()
        slot.lend()
        return slot

    def _warm_up(self, slot: Any) -> None:
        """The preparer thread: allocate and map ``slot``'s pages with their page tables, off
        the publish path (a hugetlb slot reserves its huge pages first)."""
        try:
            slot.fill()
            self.pool.made(slot.kind)
        except OSError as exc:  # no memory for it: the ring goes on without this slot
            with self._lock:
                if slot.kind == HUGETLB:  # the huge pages ran short: small ones from now on
                    self._no_huge = True
                else:
                    logger.info("deisa bridge: the shared-memory pool stops growing: %s", exc)
                    self._cold = True
                self.pool.release(slot.size)
                self.slots.remove(slot)
                slot.close()
        finally:
            with self._lock:
                slot.lend(False)

    def _may_grow(self) -> bool:
        """Under the lock: whether the pool has room for one more slot of the last block, to
        populate ahead, once the ring has outrun the worker (a burst): in huge pages at once
        (:func:`page_kind`, looked at once per block size), in 4 KiB pages only between two
        bursts (:meth:`_between_bursts`): populating 4 KiB pages zeroes them, work on a core
        that a burst's copies need (the burst's own fresh slots are adopted instead), but a
        pool populated to its budget before the next burst spares that burst every fresh
        slot."""
        if self._cold or not self._outran or not self._want or not self._has_room():
            return False
        if self._block_kind() == SMALL and not self._between_bursts():
            return False
        return self._pool_room() >= slot_bytes(self._want)

    def _block_kind(self) -> str:
        """Under the lock: the pages the pool's slots for the last block's size are made of
        (:func:`page_kind`, looked at once per block size)."""
        if self._kind_for[0] != self._want:
            self._kind_for = (self._want, page_kind(self._want)[0])
        return self._kind_for[1]

    def _pool_room(self) -> int:
        """Under the lock: bytes the pool may still take."""
        return self.pool.allowed() - self.pool.held

    def _between_bursts(self) -> bool:
        """Under the lock: no slot lent here, and the worker holds no more than a steady
        state's slots (:data:`STEADY_HELD` of each of the rank's arrays: the analytics may keep
        its last steps for a while)."""
        held = sum(1 for slot in self.slots if slot.head[0] != FREE)
        steady = STEADY_HELD * self.pool.arrays
        return held <= steady and not any(slot.taken for slot in self.slots)

    def _pool_waits(self) -> bool:
        """Under the lock: the pool would grow once the worker gives its slots back (nothing
        tells this rank when: the channel's thread looks again every ``POLL_S``)."""
        if self._cold or not self._outran or not self._want or self._between_bursts():
            return False
        return self._pool_room() >= slot_bytes(self._want)

    def _adoptable(self) -> list[Any]:
        """Under the lock: slots out of the pool (their pages written, 4 KiB pages) that its
        budget can keep, not lent: a burst's, and in a steady state the ones the ring keeps
        (kept mapped, a slot costs no mmap, no munmap and no page-table fill per block: on 2
        cores the channel's thread doing them beside the copy halved its speed). Held by the
        worker or free; only free ones where the node offers huge pages for the block (the
        pool's budget is kept for slots in huge pages, populated ahead)."""
        if not self.pool.budget or not self._want:
            return []
        room, slots, small = self._pool_room(), [], self._block_kind() == SMALL
        for slot in self.slots:
            fits = slot.kind == SMALL and slot.fits(self._want) and slot.size <= room
            if not slot.taken and not slot.warm and fits and (small or slot.free):
                room -= slot.size
                slots.append(slot)
        return slots

    def _adopt(self) -> None:
        """Under the lock: keep :meth:`_adoptable`'s slots in the pool (mapped, for the run)."""
        for slot in self._adoptable():
            if self.pool.grant(slot.size):
                slot.keep_warm()
                self.pool.made(slot.kind)

    def _shrink(self) -> None:
        """Under the lock: give back free warm slots past what memory pressure allows."""
        for slot in [s for s in self.slots if s.free and s.warm]:
            if not self.pool.over():
                return
            self.pool.release(slot.size)
            self._retire(slot)
