"""A step's blocks for one worker packed into one slot (deisa.bridge.shm.pack): offsets aligned
one after another, a new pack for a block that does not fit, sizes learnt from the last step or,
before any, from the declarations. With real slots: tests/bridge/shm/test_transport.py."""

from __future__ import annotations

from typing import Any

from deisa.bridge.shm.pack import ALIGN, MAX_BLOCKS, StepPacks, aligned


class Slot:
    """What a pack reads of a slot: its capacity, and whether a pack fills it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.packing = False


def test_blocks_follow_one_another_at_aligned_offsets() -> None:
    assert aligned(1) == ALIGN and aligned(ALIGN) == ALIGN and aligned(0) == 0
    packs = StepPacks()
    packs.begin()
    assert packs.pack_for("w", 100) is None  # nothing open: take a slot of size_for's bytes
    assert packs.size_for("w", 100) == 100  # nothing learnt: the block's
    slot: Any = Slot(4096)
    pack = packs.start("w", slot)
    assert slot.packing and pack.place(100) == 0
    assert packs.pack_for("w", 200) is pack and pack.place(200) == aligned(100)
    assert packs.pack_for("w", 4096) is None  # does not fit: a new pack, the rest of the step
    assert packs.size_for("w", 4096) == 4096
    assert packs.end() == [slot] and not slot.packing and not packs.open
    assert packs.learned == {"w": aligned(100) + aligned(200) + 4096}


def test_the_next_step_takes_one_pack_of_the_learnt_size() -> None:
    packs = StepPacks()
    packs.learned = {"w": 3 * 1024}
    packs.begin(lambda: {"w": 1})  # asked only for a worker with nothing learnt
    assert packs.pack_for("w", 1024) is None and packs.size_for("w", 1024) == 3 * 1024
    assert packs.learned == {"w": 3 * 1024}
    pack = packs.start("w", Slot(3 * 1024))  # type: ignore[arg-type]
    for _ in range(3):
        pack.place(1024)
    assert packs.pack_for("v", 8) is None  # another worker: its own pack
    assert packs.end()[0].capacity == 3 * 1024


def test_the_first_packs_are_sized_from_the_declarations() -> None:
    packs, asked = StepPacks(), []
    packs.begin(lambda: asked.append(1) or {"w": 10 * 1024, "v": 64})  # type: ignore[func-returns-value]
    assert asked == []  # asked when a pack needs it (the connection may come with the step)
    assert packs.pack_for("w", 512) is None and packs.size_for("w", 512) == 10 * 1024
    assert packs.pack_for("v", 64) is None and packs.size_for("v", 64) == 64 and asked == [1]


def test_a_pack_takes_max_blocks_at_most() -> None:
    packs = StepPacks()
    packs.begin()
    pack = packs.start("w", Slot(1 << 30))  # type: ignore[arg-type]
    for _ in range(MAX_BLOCKS):
        assert packs.pack_for("w", 8) is pack
        pack.place(8)
    assert packs.pack_for("w", 8) is None  # a puts message stays within its size
