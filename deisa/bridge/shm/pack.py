"""A step's blocks for one worker packed into one shared-memory slot: :class:`StepPacks`.

Inside :meth:`deisa.Bridge.step` a rank publishes many arrays at once (openPMD's mesh
components and particle records: a dozen or more a step). Each block in a slot of its own costs
a slot's bookkeeping per block here, on the channel's thread and on the worker (its lease,
:mod:`deisa.worker.shm`), and as many slots in the ring as blocks alive; so a step's blocks for
one worker go one after another into one slot, the *pack*: one slot taken, one copy per block
at its offset (aligned to :data:`ALIGN` bytes), one ``puts`` hand-over naming each block's key
and offset, and the worker keeps each block as a view of the slot, which is free again once
the last of them is gone (issue 56 item 9: 20 arrays of 512 KiB cost what one array of 10 MiB
costs).

A pack's size is the bytes the step sent to that worker the last time (:attr:`StepPacks.learned`),
at first what the fixed arrays' declarations say: a step like the last fills one pack, and its
slot is the one the last step but a few used (the ring's slots then fit a whole step). A step
that outgrows the last one (moving arrays) starts a new pack for the block that does not fit; a
block beyond :data:`MAX_BLOCKS` in a pack too (a ``puts`` message stays within its size).

Runs in a simulation rank, on its main thread only (the Bridge's copies), like
:meth:`~deisa.bridge.shm.transport.Transport.copy_in`. Imports :mod:`.slot` only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .slot import Slot

__all__ = ["ALIGN", "MAX_BLOCKS", "Pack", "StepPacks", "aligned"]

ALIGN = 64
"""Bytes a block's offset in a pack is a multiple of (a cache line: every dtype aligned)."""
MAX_BLOCKS = 256
"""Blocks in one pack at most: their ``puts`` (about 150 bytes each) fits one message."""


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to :data:`ALIGN`."""
    return -(-nbytes // ALIGN) * ALIGN


@dataclass
class Pack:
    """One slot taking the blocks of a step for one worker: the bytes used so far."""

    slot: Slot
    used: int = 0
    count: int = 0

    def room(self, nbytes: int) -> bool:
        """Whether a block of ``nbytes`` fits after the blocks packed so far."""
        return self.count < MAX_BLOCKS and self.used + nbytes <= self.slot.capacity

    def place(self, nbytes: int) -> int:
        """Count a block of ``nbytes`` in; its offset."""
        offset = self.used
        self.used += aligned(nbytes)
        self.count += 1
        return offset


class StepPacks:
    """The packs of the step being published (:meth:`begin` .. :meth:`end`), per worker.

    Attributes
    ----------
    open : bool
        Inside a step: blocks go into packs.
    learned : dict
        Bytes (aligned) each worker took in the last step: the size of its next pack.
    """

    def __init__(self) -> None:
        self.open = False
        self.learned: dict[str, int] = {}
        self._packs: dict[str, Pack] = {}
        self._bytes: dict[str, int] = {}
        self._expected: Callable[[], Mapping[str, int]] | None = None

    def begin(self, expected: Callable[[], Mapping[str, int]] | None = None) -> None:
        """A step starts: its blocks go into packs. ``expected``: the bytes a step is declared
        to send to each worker (the fixed arrays' blocks), the size of a worker's first pack
        before a step to it is learnt (asked when a pack needs it, once a step)."""
        self.open = True
        self._expected = expected

    def pack_for(self, worker: str, nbytes: int) -> Pack | None:
        """The open pack for ``worker`` with room for a block of ``nbytes``, or ``None``: take
        a slot of :meth:`size_for` bytes and :meth:`start` one."""
        self._bytes[worker] = self._bytes.get(worker, 0) + aligned(nbytes)
        pack = self._packs.get(worker)
        return pack if pack is not None and pack.room(nbytes) else None

    def size_for(self, worker: str, nbytes: int) -> int:
        """The bytes of a new pack for ``worker`` whose first block has ``nbytes``: the last
        step's bytes for that worker, less those packed already this step, at least the
        block's."""
        packed = self._bytes.get(worker, 0) - aligned(nbytes)
        if worker not in self.learned and self._expected is not None:  # asked once a step
            for known, declared in self._expected().items():
                self.learned.setdefault(known, declared)
            self._expected = None
        return max(nbytes, self.learned.get(worker, 0) - packed)

    def start(self, worker: str, slot: Slot) -> Pack:
        """A new pack for ``worker`` in ``slot``; the one before it (if any) is full: it is
        closed, and its slot the caller's to give back once its blocks are (returned)."""
        self.close(worker)
        slot.packing = True
        pack = self._packs[worker] = Pack(slot)
        return pack

    def close(self, worker: str) -> Slot | None:
        """Close ``worker``'s open pack: its slot (whose ``blocks`` still out decide when it is
        given back), or ``None`` without one."""
        pack = self._packs.pop(worker, None)
        if pack is None:
            return None
        pack.slot.packing = False
        return pack.slot

    def end(self) -> list[Slot]:
        """The step is over: learn each worker's bytes, close every pack; their slots."""
        self.open = False
        self.learned.update(self._bytes)
        self._bytes.clear()
        return [slot for worker in list(self._packs) if (slot := self.close(worker)) is not None]
