"""The shared-memory path (deisa.bridge.shm.transport, ._shm; deisa.worker.shm) against real workers
in process (``gen_cluster``): the block a worker keeps is a view of the rank's slot, the slot comes
back when the block is dropped, what cannot go that way goes by TCP, and the listener and the
rank each refuse a process of another account (server-side: the attacker is a real process of
uid 65534)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
from conftest import STARTUP
from distributed.utils_test import async_poll_for, gen_cluster

from deisa import _dask_internals
from deisa.bridge._loop import LoopThread
from deisa.bridge.link.connect import Connections
from deisa.bridge.shm import channel as _shm
from deisa.bridge.shm.pack import ALIGN
from deisa.bridge.shm.transport import Transport
from deisa.wire.shm import FREE, HELD, key_from_wire, key_to_wire, socket_name
from deisa.worker.services import WorkerServices

NOBODY = 65534


def _python_for_nobody() -> str | None:
    """A Python that uid 65534 may run (this one may live in root's home)."""
    for python in (sys.executable, "/usr/bin/python3"):
        path = os.path.realpath(python)
        parents = [os.path.dirname(path)]
        while parents[-1] != "/":
            parents.append(os.path.dirname(parents[-1]))
        if (
            os.path.exists(path)
            and os.stat(path).st_mode & 0o001
            and all(os.stat(p).st_mode & 0o001 for p in parents)
        ):
            return path
    return None


FOREIGN_PYTHON = _python_for_nobody()
as_root = pytest.mark.skipif(
    os.geteuid() != 0 or FOREIGN_PYTHON is None,
    reason="needs root, and a Python that uid 65534 may run, to attack as another account",
)


AS_NOBODY: dict[str, Any] = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
REFUSED = ("reply: b''", "refused: ConnectionResetError", "refused: BrokenPipeError")
"""What an attacker's script prints when the listener closed on it before any answer."""

SQUATTER = """
import socket, time
sock = socket.socket(socket.AF_UNIX, socket.{kind})
sock.bind({name!r})
sock.listen(8)
print("bound", flush=True)
time.sleep({timeout})
"""


async def attack(script: str, **account: Any) -> str:
    """What ``script`` printed, run as ``account`` (``AS_NOBODY``; this account by default)."""
    assert FOREIGN_PYTHON is not None
    proc = await asyncio.create_subprocess_exec(
        FOREIGN_PYTHON, "-c", script, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **account
    )
    out, err = await asyncio.wait_for(proc.communicate(), STARTUP)
    assert proc.returncode == 0, err
    return out.decode().strip()


def squat(name: bytes, kind: str = "SOCK_SEQPACKET") -> subprocess.Popen[str]:
    """A process of uid 65534 that holds the abstract socket ``name`` (until killed)."""
    assert FOREIGN_PYTHON is not None
    script = textwrap.dedent(SQUATTER).format(name=name, kind=kind, timeout=4 * STARTUP)
    squatter = subprocess.Popen(
        [FOREIGN_PYTHON, "-c", script], stdout=subprocess.PIPE, text=True, **AS_NOBODY
    )
    assert squatter.stdout is not None and squatter.stdout.readline().strip() == "bound"
    return squatter


def key(step: int) -> tuple[Any, ...]:
    return (f"deisa-test-field-{step}", 0, 0)


def slot_of(worker: Any, k: tuple[Any, ...]) -> Any:
    """What the worker's block of key ``k`` is a view of (a slot's ``_SlotView``, or not)."""
    return worker.data[k].base


async def install(c: Any) -> None:
    await c.register_plugin(WorkerServices())


def test_keys_travel_as_json_lists() -> None:
    assert key_to_wire(("deisa-x-a-0-r1", 2, np.int64(3))) == ["deisa-x-a-0-r1", 2, 3]
    assert key_from_wire(["deisa-x-a-0", 2, 3]) == ("deisa-x-a-0", 2, 3)
    assert key_to_wire("plain") is None and key_to_wire(("x", "y")) is None
    for wrong in ("x", [], [1, 2], ["x", 1.5], ["x", True]):
        with pytest.raises(ValueError, match="not a block key"):
            key_from_wire(wrong)


@gen_cluster(client=True, timeout=STARTUP)
async def test_block_on_the_worker_is_a_view_of_the_slot(c, s, a, b) -> None:
    await install(c)
    transport = Transport()
    block = np.arange(64 * 48, dtype=np.float64).reshape(64, 48)[:, ::2]  # not contiguous
    try:
        nbytes = await transport.send_shared(a.address, key(0), block)
        assert nbytes == block.nbytes
        np.testing.assert_array_equal(a.data[key(0)], block)
        assert type(slot_of(a, key(0))).__name__ == "_SlotView"  # no copy on the worker
        assert transport.used == "shared memory" and transport.node_local(a.address)
        assert not transport.node_local(b.address)  # not tried yet
    finally:
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_slot_comes_back_when_the_worker_drops_the_block(c, s, a, b) -> None:
    await install(c)
    transport = Transport()
    block = np.ones((256, 256))
    try:
        for step in range(6):
            assert await transport.send_shared(a.address, key(step), block * step) is not None
            np.testing.assert_array_equal(a.data[key(step)], block * step)
            # the scheduler learns of the block, then lets it go: the worker frees it
            _dask_internals.register_keys(s, {key(step): [a.address]}, {key(step): 1}, c.id)
            _dask_internals.release_keys(s, [key(step)], c.id)
            await async_poll_for(lambda s=step: key(s) not in a.data, STARTUP)
        channel = await transport.channel(a.address)
        assert channel is not None
        await async_poll_for(lambda: all(slot.head[0] == FREE for slot in channel.slots), STARTUP)
        assert len(channel.slots) <= 1 + _shm.SPARE  # reused, not one per step
    finally:
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_copy_in_writes_a_fresh_slot_unmapped_and_copies_into_a_prepared_one(
    c, s, a, b
) -> None:
    """``mode="async"``'s copy of a block: a fresh slot is filled with ``pwrite`` (its pages are
    not zeroed first, as a first touch through a mapping would), a slot the worker gave back
    and the preparer mapped again gets a plain copy; the worker's block is bitwise the same."""
    await install(c)
    transport = Transport()
    block = np.random.default_rng(0).random((300, 257))  # not a whole number of pages
    written: list[int] = []
    real_write = _shm.Slot.write

    def write(slot: Any, data: np.ndarray) -> None:
        assert not slot.prepared  # not mapped ahead
        written.append(slot.id)
        real_write(slot, data)

    _shm.Slot.write = write  # type: ignore[method-assign]
    try:
        channel = await transport.channel(a.address)
        assert channel is not None
        for step in range(3):
            buffer = transport.copy_in(a.address, block + step)
            assert buffer is not None
            if step == 0:  # written, then mapped without filling its page tables
                assert [(x.data is not None, x.populated) for x in channel.slots] == [(True, False)]
            await transport.send_shared(a.address, key(step), buffer)
            assert transport.give_back(buffer)
            del buffer
            transport.settle()
            np.testing.assert_array_equal(a.data[key(step)], block + step)
            _dask_internals.register_keys(s, {key(step): [a.address]}, {key(step): 1}, c.id)
            _dask_internals.release_keys(s, [key(step)], c.id)
            await async_poll_for(lambda s=step: key(s) not in a.data, STARTUP)
        channel = await transport.channel(a.address)
        assert channel is not None
        # the first block went to a fresh slot by pwrite; once a slot came back, the preparer
        # mapped it ahead, and the next blocks were copied into it
        await async_poll_for(lambda: any(x.prepared and x.free for x in channel.slots), STARTUP)
        assert written[:1] == [0] and len(written) < 3, written
        buffer = transport.copy_in(a.address, block[:, ::2])  # not contiguous: mapped and copied
        assert buffer is not None and transport.give_back(buffer)
    finally:
        _shm.Slot.write = real_write  # type: ignore[method-assign]
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_open_soon_lets_the_next_copy_in_find_the_channel(c, s, a, b) -> None:
    """The Bridge opens the channel as soon as the rank knows its worker: the copy that
    follows waits for the handshake and goes into a slot, where it found no channel before
    (and the block went to a buffer of the Bridge's own, to be copied again into a slot)."""
    await install(c)
    transport, bridge_loop = Transport(), LoopThread("test-bridge-loop")
    block = np.arange(1000.0)
    try:
        assert transport.copy_in(a.address, block) is None  # no channel: the caller's buffer
        transport.open_soon(a.address, bridge_loop.spawn)
        # from a thread: the worker answers the handshake on this test's event loop
        buffer = await asyncio.to_thread(transport.copy_in, a.address, block)
        assert buffer is not None and transport.node_local(a.address)
        np.testing.assert_array_equal(buffer, block)
        assert transport.give_back(buffer)
    finally:
        await asyncio.wrap_future(bridge_loop.spawn(transport.close()))
        bridge_loop.stop()


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_full_ring_sends_by_tcp(c, s, a, b) -> None:
    await install(c)
    transport, pool = Transport(), Connections()
    saved = _shm.MAX_SLOTS, _shm.SPARE
    _shm.MAX_SLOTS, _shm.SPARE = 1, 0
    try:
        block = np.full((32, 32), 3.0)
        assert await transport.send(pool, a.address, key(0), block) == {key(0): block.nbytes}
        # the only slot holds step 0: step 1 goes by TCP, as a copy in the worker's memory
        assert await transport.send_shared(a.address, key(1), block) is None
        await transport.send(pool, a.address, key(1), block + 1)
        np.testing.assert_array_equal(a.data[key(1)], block + 1)
        assert type(slot_of(a, key(1))).__name__ != "_SlotView"
        assert transport.blocks == {"shared memory": 1, "tcp": 1}
        assert transport.used == "shared memory and tcp"
        # issue 56 item 9: a block refused a slot is counted, not silent (asked twice here:
        # send_shared above, and send, whose shared-memory try comes first)
        assert transport.slot_pool.fallbacks == 2
        assert transport.slot_pool.summary()["fallbacks"] == 2
    finally:
        _shm.MAX_SLOTS, _shm.SPARE = saved
        await transport.close()
        await pool.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_what_needs_pickling_goes_by_tcp(c, s, a, b) -> None:
    await install(c)
    transport = Transport()
    try:
        for block in (
            np.array([{"a": 1}, None], dtype=object),
            np.zeros(4, dtype=[("x", "f8"), ("y", "i4")]),
            np.zeros((0, 3)),
        ):
            assert await transport.send_shared(a.address, key(0), block) is None
        assert await transport.send_shared(a.address, "a-plain-key", np.ones(3)) is None
        assert transport.used == "none"
        tcp_only = Transport("tcp")
        assert await tcp_only.send_shared(a.address, key(0), np.ones(3)) is None
    finally:
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_no_listener_no_channel_then_retried(c, s, a, b) -> None:
    transport = Transport()  # the plugin is not installed: no listener
    try:
        assert await transport.send_shared(a.address, key(0), np.ones(3)) is None
        await install(c)
        # a failed handshake is not tried again at once (CHANNEL_RETRY_S), then it is
        assert await transport.send_shared(a.address, key(0), np.ones(3)) is None
        transport._tried_at.clear()  # as if CHANNEL_RETRY_S had passed
        assert await transport.send_shared(a.address, key(0), np.ones(3)) == 24
    finally:
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_worker_that_closes_is_a_connection_error(c, s, a, b) -> None:
    await install(c)
    transport = Transport()
    try:
        assert await transport.send_shared(a.address, key(0), np.ones(8)) == 64
        channel = await transport.channel(a.address)
        assert channel is not None
        slot = channel.take(64)  # a block on its way when the worker's end goes
        assert slot is not None
        await c.unregister_worker_plugin(WorkerServices.name)  # the listener goes
        await async_poll_for(lambda: channel.broken is not None, STARTUP)
        # found by the socket's reader, which stops there (no callback on a dead socket)
        assert channel.broken == "ConnectionResetError: the worker closed the channel"
        assert channel._reading is None
        with pytest.raises(OSError, match="shared-memory channel to worker"):
            await channel.put(slot, key(1), (8,), np.dtype("f8"))
        assert channel.take(64) is None and not transport.node_local(a.address)
        # the next block goes by TCP (the caller's), the handshake is tried again later
        assert await transport.send_shared(a.address, key(2), np.ones(8)) is None
    finally:
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_wrong_messages_are_answered_and_the_listener_goes_on(c, s, a, b) -> None:
    await install(c)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.setblocking(False)
    await loop.sock_connect(sock, socket_name(a.address))
    try:
        for wrong in (b"not json", b"[1, 2]", b'{"op": "exec"}', b'{"op": "put", "id": 1}',
                      b'{"op": "slot", "id": 0, "size": 8192}'):  # fmt: skip
            await loop.sock_sendall(sock, wrong)
            reply = await asyncio.wait_for(loop.sock_recv(sock, 65536), STARTUP)
            assert b'"op":"error"' in reply, (wrong, reply)
    finally:
        sock.close()
    transport = Transport()
    try:
        assert await transport.send_shared(a.address, key(0), np.ones(8)) == 64
    finally:
        await transport.close()


ATTACKER = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
sock.settimeout({timeout})
sock.connect({name!r})
try:
    sock.send(b'{{"op": "hello"}}')
    print("reply:", sock.recv(65536))
except OSError as exc:
    print("refused:", type(exc).__name__)
"""


@as_root
@gen_cluster(client=True, timeout=STARTUP)
async def test_the_listener_refuses_another_account(c, s, a, b) -> None:
    await install(c)
    script = ATTACKER.format(timeout=STARTUP, name=socket_name(a.address, uid=os.getuid()))
    # the control: the same process of this account is answered
    assert (await attack(script)).startswith('reply: b\'{"op":"hello"'), "no positive control"
    # closed by the worker before any answer: nothing read, or a reset
    refused = await attack(script, **AS_NOBODY)
    assert refused in REFUSED, refused


@as_root
def test_a_rank_refuses_a_listener_of_another_account() -> None:
    """Another account took the listener's name first (the worker's own bind then fails):
    the rank sees whose socket it is and sends by TCP."""
    worker = "tcp://127.0.0.1:9"  # any address: the name is all the squatter needs
    squatter = squat(socket_name(worker, uid=os.getuid()))
    try:

        async def attempt() -> Any:
            return await _shm.Channel.open(worker)

        assert asyncio.run(attempt()) is None
    finally:
        squatter.kill()
        squatter.wait()


def test_the_preparer_waits_while_only_a_slot_of_another_size_is_free() -> None:
    """The channel's thread maps ahead a free slot the worker gave back, of the size of the
    last block; a free slot of another size (an array of other blocks) gives it nothing to
    do. It used to count that slot as work and spin on a core while the worker held the
    slot of the right size."""
    rank_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel = _shm.Channel("tcp://127.0.0.1:1", rank_end)
    try:
        with channel._lock:
            other = channel._new_slot(1 << 20)
            held = channel._new_slot(4 << 20)
            other.shared = held.shared = True
            held.head[0] = HELD
            channel._want = 4 << 20
            assert not channel._work()  # sleeps (polling for the held slot's return)
            held.head[0] = FREE  # given back: now there is a slot to map ahead
            assert channel._work()
    finally:
        channel._break("test over")
        channel._preparer.join(timeout=STARTUP)
        for slot in channel.slots:
            slot.close()
        rank_end.close()
        worker_end.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_ring_holds_every_array_of_the_steps_in_flight(c, s, a, b) -> None:
    """Issue 56 item 9: 20 arrays, two steps of each held by the worker (an analytics reading
    one step ahead with ``zip``) and a third step sent: 60 blocks, past the ring's old bound of
    32 slots, all by shared memory once the pool is sized for the rank's arrays."""
    from deisa import ArraySpec, BridgeOptions

    await install(c)
    transport, pool = Transport(), Connections()
    spec = ArraySpec("float64", (8, 8), (0, 0), (8, 8))
    transport.slot_pool.size_for(BridgeOptions(buffer_nb=2), [spec] * 20, None)
    assert transport.slot_pool.ring == 20 * (2 + 2 + 2) > _shm.MAX_SLOTS
    try:
        block = np.ones((8, 8))
        for n in range(60):  # none released: every slot stays held by the worker
            assert await transport.send(pool, a.address, key(n), block + n) == {key(n): 512}
        assert transport.blocks == {"shared memory": 60}
        assert transport.slot_pool.fallbacks == 0
        np.testing.assert_array_equal(a.data[key(59)], block + 59)
    finally:
        await transport.close()
        await pool.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_step_s_blocks_for_a_worker_share_one_slot(c, s, a, b) -> None:
    """Between ``begin_step`` and ``end_step`` the blocks for one worker go one after another
    into one slot (deisa.bridge.shm.pack), each at an aligned offset, handed over in one
    ``puts``; the worker keeps each as a view of that slot, which is free once the last of
    them is dropped, and the next step takes the slot again (its size learnt)."""
    await install(c)
    transport = Transport()
    rng = np.random.default_rng(1)
    blocks = [rng.random((40, 30)), np.arange(7, dtype=np.int16), rng.random((64, 64))[:, ::3]]
    try:
        channel = await transport.channel(a.address)
        assert channel is not None
        used = []
        for step in range(2):
            transport.begin_step()
            buffers = [transport.copy_in(a.address, block + step) for block in blocks]
            transport.end_step()
            lent = [transport._lent[id(buffer)] for buffer in buffers]
            slots = {slot.id for slot, _, _ in lent}
            # the first step: nothing learnt, a new slot for a block that does not fit the
            # last one's (the small one fits its page's end); then one slot for the step
            assert len(slots) == (2 if step == 0 else 1), (step, slots)
            assert [offset % ALIGN for _, _, offset in lent] == [0, 0, 0]
            assert step == 0 or 0 < lent[1][2] < lent[2][2]
            keys = [(f"deisa-test-pack-{step}", i) for i in range(len(blocks))]
            sizes = await asyncio.gather(
                *(
                    transport.send_shared(a.address, k, buf)
                    for k, buf in zip(keys, buffers, strict=True)
                )
            )
            assert sizes == [block.nbytes for block in blocks]
            for k, block in zip(keys, blocks, strict=True):
                np.testing.assert_array_equal(a.data[k], block + step)
            leases = {id(a.data[k].base.lease) for k in keys}
            assert len(leases) == len(slots)  # one lease a slot
            assert all(transport.give_back(buffer) for buffer in buffers)
            packed = lent[-1][0]
            del buffers, lent
            transport.settle()
            for k in keys:
                assert step == 0 or packed.head[0] == HELD  # a block of it still on the worker
                _dask_internals.register_keys(s, {k: [a.address]}, {k: 1}, c.id)
                _dask_internals.release_keys(s, [k], c.id)
                await async_poll_for(lambda k=k: k not in a.data, STARTUP)
            await async_poll_for(lambda slot=packed: slot.free, STARTUP)
            used.append(packed.id)
        transport.begin_step()  # a step like the last: the same slot, free again
        buffer = transport.copy_in(a.address, blocks[0])
        transport.end_step()
        assert buffer is not None and transport._lent[id(buffer)][0].id == used[1]
        assert transport.give_back(buffer)
    finally:
        await transport.close()
