"""deisa.bridge.shm.pool: the warm pool of shared-memory slots, against real workers in process
(``gen_cluster``): it keeps a ring's slots mapped, is populated to its budget on the channel's
thread between bursts, its slots are reused (the publish copies into them, no fresh slot),
only slots past the budget are given back, it shrinks once under memory pressure, and its
pages are huge where the node reserved huge pages."""

from __future__ import annotations

import logging
import mmap
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import STARTUP
from distributed.utils_test import async_poll_for, gen_cluster, poll_for

from deisa import _dask_internals
from deisa.bridge.shm import channel as _shm
from deisa.bridge.shm import pool as _shm_pool
from deisa.bridge.shm import warm_ring as _warm_ring
from deisa.bridge.shm.pool import HUGETLB, SMALL, THP, SlotPool, meminfo, page_kind, pool_totals
from deisa.bridge.shm.transport import Transport
from deisa.wire.shm import FREE, HELD, slot_bytes
from deisa.worker.services import WorkerServices

MIB = 2**20


def key(step: int) -> tuple[Any, ...]:
    return (f"deisa-test-pool-{step}", 0, 0)


async def release(c: Any, s: Any, a: Any, step: int) -> None:
    """The scheduler learns of the block of ``step`` on ``a``, then lets it go."""
    _dask_internals.register_keys(s, {key(step): [a.address]}, {key(step): 1}, c.id)
    _dask_internals.release_keys(s, [key(step)], c.id)
    await async_poll_for(lambda: key(step) not in a.data, STARTUP)


async def publish(transport: Transport, worker: str, block: np.ndarray, step: int) -> Any:
    """``mode="async"``'s path: copy into a slot, send, give back; the slot it used."""
    assert await transport.channel(worker) is not None
    buffer = transport.copy_in(worker, block)
    assert buffer is not None
    slot = transport._lent[id(buffer)][0]
    await transport.send_shared(worker, key(step), buffer)
    assert transport.give_back(buffer)
    del buffer
    transport.settle()
    return slot


def fake_meminfo(tmp_path: Path, total_mib: int, available_mib: int, huge_free: int = 0) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(
        f"MemTotal: {total_mib * 1024} kB\nMemAvailable: {available_mib * 1024} kB\n"
        f"HugePages_Free: {huge_free}\nHugepagesize: 2048 kB\n"
    )
    return path


@gen_cluster(client=True, timeout=STARTUP)
async def test_the_pool_keeps_a_burst_s_slots_for_every_next_burst(c, s, a, b) -> None:
    """A burst that outruns the worker (a third block while the two slots a ring keeps are
    held): its slots stay in the pool (adopted), and once the worker has given every slot
    back the channel's thread populates the pool to its budget (4 KiB pages too); the next
    bursts' blocks are copied into them (never written into a fresh slot), and after each burst
    they stay mapped for the next."""
    await c.register_plugin(WorkerServices())
    transport = Transport()
    block = np.random.default_rng(1).random((256, 512))  # 1 MiB
    warm_size = slot_bytes(block.nbytes)
    transport.slot_pool.size(warm_size, buffer_nb=3, mib=None, share=1)
    assert transport.slot_pool.budget == 4 * warm_size  # buffer_nb steps plus one: 4 slots
    fresh: list[int] = []
    real_write = _shm.Slot.write

    def write(slot: Any, data: np.ndarray) -> None:
        fresh.append(slot.id)
        real_write(slot, data)

    _shm.Slot.write = write  # type: ignore[method-assign,assignment]
    try:
        channel = await transport.channel(a.address)
        assert channel is not None
        await publish(transport, a.address, block, 0)  # the pool learns the block's size
        await publish(transport, a.address, block, 90)
        assert len(channel.slots) == 2  # no more than without a pool
        await publish(transport, a.address, block, 91)  # a third while both are held: a burst
        for step in (0, 90, 91):
            await release(c, s, a, step)
        transport.settle()
        await async_poll_for(
            lambda: sum(x.warm and x.prepared for x in channel.slots) == 4, STARTUP
        )  # the burst's 3 slots, and one populated ahead: the budget
        assert transport.slot_pool.held == 4 * warm_size and len(channel.slots) == 4
        for burst in range(2):
            used = [
                await publish(transport, a.address, block + i, 10 * burst + i) for i in (1, 2, 3, 4)
            ]
            assert all(slot.warm for slot in used), "a block of the burst missed the pool"
            for i in (1, 2, 3, 4):
                np.testing.assert_array_equal(a.data[key(10 * burst + i)], block + i)
                await release(c, s, a, 10 * burst + i)
        assert fresh == [0, 1, 2]  # only the first burst's blocks went into fresh slots
        await async_poll_for(lambda: all(x.head[0] == FREE for x in channel.slots), STARTUP)
        transport.settle()
        await async_poll_for(lambda: all(x.warm for x in channel.slots), STARTUP)
        assert [(x.prepared, x.data is not None) for x in channel.slots] == [(True, True)] * 4
        with channel._lock:  # four free warm slots: the channel's thread rests (it spun)
            assert not channel._work() and not channel._pool_waits()
        assert transport.slot_pool.summary()["peak_mib"] == 4 * warm_size / MIB
    finally:
        _shm.Slot.write = real_write  # type: ignore[method-assign]
        await transport.close()
    assert transport.slot_pool.held == 0


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_steady_state_keeps_its_two_slots_mapped(c, s, a, b) -> None:
    """Each block's slot back before the next (compute between steps): the ring needs no
    more than without a pool, populates nothing ahead, and keeps its two slots mapped from one
    step to the next (no munmap, mmap, page-table fill per block beside the copy)."""
    await c.register_plugin(WorkerServices())
    transport = Transport()
    block = np.ones((128, 1024))  # 1 MiB
    transport.slot_pool.size(slot_bytes(block.nbytes), buffer_nb=3, mib=None, share=1)
    try:
        mappings: list[tuple[int, Any]] = []
        for step in range(8):
            slot = await publish(transport, a.address, block + step, step)
            np.testing.assert_array_equal(a.data[key(step)], block + step)
            await release(c, s, a, step)
            if step >= 2:  # the first two went into fresh slots, since adopted and mapped
                await async_poll_for(lambda: slot.prepared, STARTUP)  # noqa: B023
                mappings.append((slot.id, slot.data))  # held: no id reused
        channel = await transport.channel(a.address)
        assert channel is not None and 1 <= len(channel.slots) <= 2
        assert all(x.warm for x in channel.slots)
        assert transport.slot_pool.held == len(channel.slots) * slot_bytes(block.nbytes)
        # each slot mapped once for all its blocks
        assert len({(i, id(m)) for i, m in mappings}) == len(channel.slots), mappings
    finally:
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_no_pool_keeps_two_free_slots_as_before(c, s, a, b) -> None:
    await c.register_plugin(WorkerServices())
    transport = Transport()
    transport.slot_pool.size(1 << 20, buffer_nb=None, mib=0, share=1)
    block = np.ones((128, 1024))
    try:
        for step in range(4):
            await publish(transport, a.address, block, step)
        channel = await transport.channel(a.address)
        assert channel is not None and not any(x.warm for x in channel.slots)
        assert transport.slot_pool.held == 0 and pool_totals([transport.slot_pool.summary()]) == {}
    finally:
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_the_pool_shrinks_under_memory_pressure_and_says_so_once(c, s, a, b) -> None:
    await c.register_plugin(WorkerServices())
    transport = Transport()
    block = np.ones((128, 1024))  # 1 MiB
    transport.slot_pool.size(slot_bytes(block.nbytes), buffer_nb=4, mib=None, share=1)
    saved = _shm_pool.MEMINFO, _shm_pool.CHECK_S
    directory = Path(tempfile.mkdtemp())
    _shm_pool.MEMINFO, _shm_pool.CHECK_S = fake_meminfo(directory, 100_000, 90_000), 0.0
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    logging.getLogger("deisa.bridge.shm.pool").addHandler(handler)
    try:
        for step in range(3):  # held by the worker: the ring outruns it
            await publish(transport, a.address, block, step)
        for step in range(3):  # given back: the pool keeps them
            await release(c, s, a, step)
        channel = await transport.channel(a.address)
        assert channel is not None
        channel.settle()
        await async_poll_for(lambda: sum(x.warm for x in channel.slots) >= 3, STARTUP)
        # MemAvailable falls under a tenth of the total: the free warm slots go, said once
        fake_meminfo(directory, 100_000, 9_000)
        channel.settle()  # wakes the channel's thread
        await async_poll_for(lambda: not any(x.warm for x in channel.slots), STARTUP)
        assert transport.slot_pool.held == 0
        await publish(transport, a.address, block, 3)
        shrunk = [r for r in records if "pool shrinks" in r.getMessage()]
        assert len(shrunk) == 1 and "from 5 to 0 MiB" in shrunk[0].getMessage()
        assert pool_totals([transport.slot_pool.summary()])["ranks shrunk"] == 1
    finally:
        logging.getLogger("deisa.bridge.shm.pool").removeHandler(handler)
        _shm_pool.MEMINFO, _shm_pool.CHECK_S = saved
        await transport.close()


def test_page_kind_follows_what_the_node_offers(tmp_path: Path) -> None:
    thp = tmp_path / "shmem_enabled"
    thp.write_text("always within_size [advise] never deny force\n")
    info = meminfo(fake_meminfo(tmp_path, 1000, 900, huge_free=16))
    assert page_kind(16 * MIB, info, thp) == (HUGETLB, 2 * MIB)  # 9 huge pages, 16 free
    assert page_kind(64 * MIB, info, thp)[0] == THP  # 33 needed
    assert page_kind(MIB, info, thp)[0] == THP  # under a huge page: never hugetlb
    thp.write_text("always within_size advise [never] deny force\n")
    assert page_kind(64 * MIB, info, thp)[0] == SMALL


def test_the_budget_follows_the_options() -> None:
    pool = SlotPool()
    pool.size(16 * MIB, buffer_nb=None, mib=None, share=1)
    assert pool.budget == (_shm_pool.UNBOUNDED_STEPS + 1) * 16 * MIB
    pool.size(16 * MIB, buffer_nb=2, mib=None, share=1)
    assert pool.budget == 3 * 16 * MIB
    pool.size(16 * MIB, buffer_nb=2, mib=1024, share=4)  # per node, 4 ranks on it
    assert pool.budget == 256 * MIB


def _free_huge_pages() -> int:
    return meminfo().get("HugePages_Free", 0)


@pytest.mark.skipif(
    _free_huge_pages() < 8,
    reason="no reserved huge pages free (as root: sysctl vm.nr_hugepages=16 to run it)",
)
@gen_cluster(client=True, timeout=STARTUP)
async def test_pool_slots_take_reserved_huge_pages(c, s, a, b) -> None:
    await c.register_plugin(WorkerServices())
    transport = Transport()
    block = np.random.default_rng(2).random((512, 1024))  # 4 MiB: 3 huge pages a slot
    transport.slot_pool.size(block.nbytes, buffer_nb=1, mib=None, share=1)
    try:
        for step in range(3):  # held by the worker: the ring outruns it
            await publish(transport, a.address, block, step)
        channel = await transport.channel(a.address)
        assert channel is not None
        await async_poll_for(lambda: any(x.warm and x.prepared for x in channel.slots), STARTUP)
        slot = await publish(transport, a.address, block + 1, 3)
        assert slot.kind == HUGETLB and slot.size % (2 * MIB) == 0
        np.testing.assert_array_equal(a.data[key(3)], block + 1)
        assert transport.slot_pool.summary()["pages"] == [HUGETLB]
    finally:
        await transport.close()


def test_the_bridge_sizes_the_pool_per_rank_or_per_node() -> None:
    from deisa import ArraySpec, BridgeOptions
    from deisa.bridge.arrays.placement import Host, this_host

    spec = ArraySpec("float64", (16, 1024), (0, 0), (8, 1024))  # 64 KiB on this rank
    here, elsewhere = this_host(), Host("another-node")
    pool = SlotPool()
    pool.size_for(BridgeOptions(buffer_nb=2), [spec, spec], None)
    assert pool.budget == 3 * 2 * slot_bytes(64 * 1024)  # 3 steps of both arrays' slots
    node = BridgeOptions(shm_pool_mib=300, shm_pool_scope="node")
    pool.size_for(node, [spec], [here, elsewhere, here, here])  # 3 ranks on this node
    assert pool.budget == 100 * MIB
    tcp = SlotPool()
    tcp.size_for(BridgeOptions(transport="tcp"), [spec], None)
    assert tcp.budget == 0


def test_a_pool_keeps_the_free_slots_a_ring_without_one_keeps() -> None:
    """While the worker holds every warm slot, two slots given back mid-burst stay for the next
    blocks, as without a pool (they were closed, and each next block took a fresh slot); once
    warm slots are free again, the others go."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel = _shm.Channel("w", ours, SlotPool(2 * slot_bytes(MIB)))
    try:
        first = [channel.take(MIB, mapped=False) for _ in "abc"]  # a third while two are lent
        for slot in first:
            assert slot is not None
            channel.untake(slot)
        channel.settle()
        poll_for(lambda: sum(x.warm for x in channel.slots) == 2, STARTUP)  # adopted
        warm = [x for x in channel.slots if x.warm]
        for slot in warm:
            slot.head[0] = HELD  # the worker holds them
        given_back = [x for x in (channel.take(MIB, mapped=False) for _ in "ab") if x is not None]
        assert len(given_back) == 2 and not any(x.warm for x in given_back)
        for slot in given_back:
            channel.untake(slot)
        with channel._lock:
            channel._retire_surplus()
            assert all(x in channel.slots for x in given_back)
            warm[0].head[0] = FREE
            channel._retire_surplus()  # a warm slot free: one of the others goes
            assert sum(x in channel.slots for x in given_back) == 1
    finally:
        channel._break("closed")
        ours.close()
        theirs.close()


def test_the_pool_grows_between_bursts_while_the_worker_keeps_its_last_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a burst, the pool in 4 KiB pages is populated to its budget once the worker holds
    no more than a steady state's three slots of the array (the analytics may keep its last
    step and, with ``zip``, the next: issue 56 item 9), not while it holds more (a burst still
    draining: the copies need the core); nothing tells the rank when the worker gives a slot
    back, its thread looks."""
    monkeypatch.setattr(_warm_ring, "page_kind", lambda nbytes, *_: (SMALL, 2 * MIB))
    assert _warm_ring.STEADY_HELD == 3
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel = _shm.Channel("w", ours, SlotPool(5 * slot_bytes(MIB)))
    try:
        burst = [channel.take(MIB, mapped=False) for _ in "abcd"]  # past two lent: a burst
        for slot in burst:
            assert slot is not None
            slot.hand_over()  # the worker holds the burst
            channel.untake(slot)
        channel.settle()
        poll_for(lambda: sum(x.warm for x in channel.slots) == 4, STARTUP)  # adopted, held
        with channel._lock:
            assert channel._pool_waits() and not channel._may_grow()  # four held: wait
        assert burst[0] is not None
        burst[0].hand_over(False)  # given back; the analytics keeps the last three steps
        poll_for(lambda: len(channel.slots) == 5 and all(x.warm for x in channel.slots), STARTUP)
        grown = channel.slots[-1]
        poll_for(lambda: grown.prepared, STARTUP)
        assert grown not in burst and grown.free and channel.pool.held == 5 * slot_bytes(MIB)
    finally:
        channel._break("closed")
        ours.close()
        theirs.close()


def test_a_burst_s_slots_given_back_after_it_are_mapped_before_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A burst's fresh slots (written unmapped) adopted by a pool they fill to its budget, a
    slot ready beside them: when the worker gives them back after the burst, with no publish
    to wake the channel's thread, the thread maps them anyway (it looks while the worker holds
    a pool slot not mapped here), so that the next burst finds them ready instead of mapping
    one beside its first copy (docs/benchmarks.md, section 16)."""
    monkeypatch.setattr(_warm_ring, "page_kind", lambda nbytes, *_: (SMALL, 2 * MIB))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel = _shm.Channel("w", ours, SlotPool(4 * slot_bytes(MIB)))
    try:
        burst = [channel.take(MIB, mapped=False) for _ in "abc"]
        ready = channel.take(MIB)  # mapped: a spare, free once given back unused
        assert ready is not None and ready.prepared
        channel.untake(ready)
        for slot in burst:
            assert slot is not None and not slot.prepared
            slot.mark_shared()  # put() sent its fd to the worker
            slot.hand_over()  # the worker holds the burst
            channel.untake(slot)
        channel.settle()  # the last publish's
        poll_for(lambda: all(x.warm for x in channel.slots) and ready.prepared, STARTUP)
        with channel._lock:  # a slot ready, the budget full: nothing else to wait for
            assert len(channel.slots) == 4
            assert not channel._awaiting_slot() and not channel._pool_waits()
        for slot in burst:
            assert slot is not None
            slot.hand_over(False)  # the analytics drained the burst; no settle() follows
        poll_for(lambda: all(x.prepared and x.free for x in channel.slots), STARTUP)
        with channel._lock:  # all mapped and free: the thread rests
            assert not channel._work() and not channel._warm_held()
    finally:
        channel._break("closed")
        ours.close()
        theirs.close()


def test_population_goes_chunk_by_chunk_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages of a slot are populated by ``madvise`` calls of POPULATE_CHUNK (the mmap lock
    is released between them), every page of it."""
    calls: list[int] = []
    real = _shm_pool._LIBC

    class Libc:  # the real madvise, each call's length noted
        @staticmethod
        def madvise(address: Any, length: int, advice: int) -> int:
            calls.append(length)
            return int(real.madvise(address, length, advice))

    monkeypatch.setattr(_shm_pool, "POPULATE_CHUNK", 64 * 1024)
    monkeypatch.setattr(_shm_pool, "_LIBC", Libc)
    fd = os.memfd_create("deisa-test-populate")
    try:
        os.ftruncate(fd, MIB + 4096)
        region = mmap.mmap(fd, MIB + 4096)
        _shm_pool.populate(region, fd, SMALL)
        assert os.fstat(fd).st_blocks * 512 == MIB + 4096
        assert max(calls) == 64 * 1024 and sum(calls) == MIB + 4096
        region.close()
    finally:
        os.close(fd)


def test_a_channel_s_ring_is_the_pool_s_size_for_the_arrays() -> None:
    """Issue 56 item 9: the pool carries the ring's size for the rank's arrays
    (:func:`deisa.bridge.shm.ring_size.ring_slots`, a moving array's parcel one slot too); a
    channel holds that many slots, its ``MAX_SLOTS`` at least."""
    from deisa import ArraySpec, BridgeOptions

    spec = ArraySpec("float64", (16,), (0,), (8,))
    moving = ArraySpec.moving("float64", 1, joined_axis=0)
    pool = SlotPool()
    pool.size_for(BridgeOptions(buffer_nb=3, transport="tcp"), [spec, moving], None)
    assert pool.ring == 2 * (3 + 2 + 2) and pool.budget == 0
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        assert _shm.Channel("w", ours, pool).most_slots == _shm.MAX_SLOTS
        pool.ring = 100
        assert _shm.Channel("w", ours, pool).most_slots == 100
    finally:
        ours.close()
        theirs.close()


def test_a_fallback_is_counted_warned_once_and_in_the_totals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = SlotPool(MIB)
    with caplog.at_level(logging.WARNING, logger="deisa.bridge.shm.pool"):
        pool.fell_back("tcp://w", 4096, 32)
        pool.fell_back("tcp://w", 4096, 32)
    warned = [r.getMessage() for r in caplog.records if "goes by TCP" in r.getMessage()]
    assert len(warned) == 1 and "worker tcp://w" in warned[0] and "32 shared-memory" in warned[0]
    assert pool.summary()["fallbacks"] == 2
    assert pool_totals([pool.summary(), SlotPool(MIB).summary()])["fallbacks"] == 2
    assert pool_totals([SlotPool(MIB).summary()]).get("fallbacks") is None  # none: not said
    no_pool = SlotPool(0)
    no_pool.fell_back("tcp://w", 8, 32)
    assert pool_totals([no_pool.summary()]) == {"fallbacks": 1}


def test_the_default_budget_learns_a_moving_arrays_parcels() -> None:
    """Issue 56 item 9: a moving array's declaration gives no size; the default budget grows
    to its steps of the largest parcel published (never shrinks with a smaller one); a budget
    given in MiB stays as given."""
    from deisa import ArraySpec, BridgeOptions

    fixed = ArraySpec("float64", (16, 1024), (0, 0), (8, 1024))  # 64 KiB on this rank
    moving = ArraySpec.moving("float64", 1, joined_axis=0)
    pool = SlotPool()
    pool.size_for(BridgeOptions(buffer_nb=2), [fixed, moving], None)
    pool.moving = {"x"}
    assert pool.budget == 3 * slot_bytes(64 * 1024) and pool.arrays == 2
    pool.learn("rho", 8 * 10**6)  # a fixed array published as boxes: counted as declared
    assert pool.budget == 3 * slot_bytes(64 * 1024)
    pool.learn("x", 8 * 10**6)
    pool.learn("x", 8 * 10**5)  # fewer particles this step: the budget stays
    assert pool.budget == 3 * (slot_bytes(64 * 1024) + slot_bytes(8 * 10**6))
    given = SlotPool()
    given.size_for(BridgeOptions(shm_pool_mib=8), [moving], None)
    given.moving = {"x"}
    given.learn("x", 8 * 10**6)
    assert given.budget == 8 * MIB
