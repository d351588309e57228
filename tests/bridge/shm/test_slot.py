"""deisa.bridge.shm.slot: one slot of a rank's ring, alone (no channel, no worker)."""

from __future__ import annotations

import mmap

import numpy as np

from deisa.bridge.shm.pool import SMALL
from deisa.bridge.shm.slot import Slot
from deisa.wire.shm import FREE, HEADER, HELD


def test_a_slot_stays_mapped_while_a_view_of_it_lives() -> None:
    """The rank unmaps a slot off its thread once no view is left; a view that did not hold
    the mapping's export let it be unmapped under a live array (a segfault, when a worker died
    mid-run and the rank re-sent a block from its slot)."""
    slot = Slot(None, 0, HEADER + 4096)  # type: ignore[arg-type]
    try:
        view = slot.view((4, 8), np.dtype("f8"))
        view[:] = 7.0
        slot.unmap()
        assert slot.data is not None and view.sum() == 7.0 * 32
        del view
        slot.unmap()
        assert slot.data is None
    finally:
        slot.close()


def test_a_slot_filled_for_the_pool_is_prepared_and_keeps_what_is_written() -> None:
    """``fill`` (the pool's warm-up) allocates and maps the pages with their page tables: the
    slot is prepared, its pages exist in the memfd; a block copied into it reads back whole."""
    slot = Slot(None, 1, HEADER + 64 * mmap.PAGESIZE, SMALL)  # type: ignore[arg-type]
    try:
        assert not slot.prepared and not slot.warm
        slot.keep_warm()
        slot.fill()
        assert slot.warm and slot.prepared and slot.data is not None
        block = np.arange(64 * mmap.PAGESIZE // 8, dtype="f8")
        np.copyto(slot.view(block.shape, block.dtype), block)
        again = np.frombuffer(slot.data, dtype="f8", count=block.size, offset=HEADER)
        np.testing.assert_array_equal(again, block)
    finally:
        slot.close()


def test_lending_and_handing_over_decide_whether_a_slot_is_free() -> None:
    slot = Slot(None, 2, HEADER + mmap.PAGESIZE)  # type: ignore[arg-type]
    try:
        assert slot.free
        slot.lend()
        assert not slot.free
        slot.lend(False)
        slot.hand_over()  # the worker holds it until it writes FREE
        assert slot.head[0] == HELD and not slot.free
        slot.hand_over(False)
        assert slot.head[0] == FREE and slot.free
        assert not slot.shared
        slot.mark_shared()
        assert slot.shared
    finally:
        slot.close()
