"""The worker's shared-memory side (deisa.worker.shm) against what a peer may send
instead of a rank's slot: a descriptor that is not a sealed memfd, a dtype of objects, void or
fields, a shape that is not one. Each is answered with an error, nothing is mapped or stored,
and the listener goes on serving the next rank. The positive control: an unsealed memfd that
its owner shrinks under a mapping kills the reader with SIGBUS; a sealed one cannot shrink."""

from __future__ import annotations

import array
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np
import pytest
from conftest import STARTUP
from distributed.utils_test import async_poll_for, gen_cluster

from deisa import _dask_internals
from deisa.bridge.shm.transport import Transport
from deisa.wire.shm import HEADER, memfd, socket_name
from deisa.worker.services import WorkerServices
from deisa.worker.shm import block_dtype, block_shape, slot_problem

SIZE = HEADER + 4096

SHRUNK_UNDER_A_MAPPING = """
import mmap, os, sys
fd = os.memfd_create("victim", os.MFD_CLOEXEC | ({sealing}))
os.ftruncate(fd, 2 * mmap.PAGESIZE)
{seal}
region = mmap.mmap(fd, 2 * mmap.PAGESIZE)  # the worker's mapping
try:
    os.ftruncate(fd, 0)  # the peer shrinks the slot
except OSError as exc:
    print("refused:", exc.errno, flush=True)
print("read:", region[mmap.PAGESIZE], flush=True)
"""


def test_a_slot_shrunk_under_its_mapping_kills_the_reader_unless_sealed() -> None:
    unsealed = SHRUNK_UNDER_A_MAPPING.format(sealing=0, seal="")
    proc = subprocess.run([sys.executable, "-c", unsealed], capture_output=True, text=True)
    assert proc.returncode == -7, (proc.returncode, proc.stdout)  # SIGBUS: the control
    sealed = SHRUNK_UNDER_A_MAPPING.format(
        sealing="os.MFD_ALLOW_SEALING",
        seal="import fcntl; fcntl.fcntl(fd, fcntl.F_ADD_SEALS, "
        "fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)",
    )
    proc = subprocess.run([sys.executable, "-c", sealed], capture_output=True, text=True)
    assert proc.returncode == 0 and "refused: 1" in proc.stdout and "read: 0" in proc.stdout


def unsealed_memfd() -> int:
    fd = os.memfd_create("deisa-test", os.MFD_CLOEXEC)
    os.ftruncate(fd, SIZE)
    return fd


def test_only_a_sealed_memfd_of_the_size_is_a_slot() -> None:
    fd = memfd("deisa-test", SIZE)
    assert slot_problem(fd, SIZE) is None
    assert "claimed" in str(slot_problem(fd, SIZE + 4096))
    os.close(fd)
    fd = unsealed_memfd()
    assert "not sealed" in str(slot_problem(fd, SIZE))
    os.close(fd)
    with tempfile.TemporaryFile() as file:
        file.truncate(SIZE)
        assert "a memfd, not" in str(slot_problem(file.fileno(), SIZE))
    reader, writer = os.pipe()
    assert "a memfd, not 'pipe:" in str(slot_problem(reader, SIZE))
    os.close(reader)
    os.close(writer)


@pytest.mark.parametrize("dtype", ["|O", "|V8", "[('a', '<i4')]", "(2,)<i4", 7, "x" * 40])
def test_blocks_of_objects_void_or_fields_are_refused(dtype: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        block_dtype(dtype)


def test_plain_dtypes_and_shapes_are_taken() -> None:
    assert block_dtype("<f8") == np.float64 and block_dtype("<M8[s]").kind == "M"
    assert block_shape([0, 3]) == (0, 3)
    for wrong in ([-1], [1.5], "3", [True], None):
        with pytest.raises(ValueError, match="not a block shape"):
            block_shape(wrong)


async def release(c: Any, s: Any, a: Any, keys: list[Any]) -> None:
    """The scheduler learns of ``keys`` on worker ``a``, then lets them go (gone from ``a``)."""
    _dask_internals.register_keys(s, {k: [a.address] for k in keys}, {k: 1 for k in keys}, c.id)
    _dask_internals.release_keys(s, keys, c.id)
    await async_poll_for(lambda: not any(k in a.data for k in keys), STARTUP)


async def exchange(sock: socket.socket, message: dict[str, Any], fd: int | None = None) -> Any:
    """The listener's answer to ``message``; a ``slot`` message, answered only when refused,
    is followed by a ``hello``, so that its answer is the hello's when the slot was mapped."""
    loop = asyncio.get_running_loop()
    fds = [] if fd is None else [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
    sock.sendmsg([json.dumps(message).encode()], fds)
    if message["op"] == "slot":
        await loop.sock_sendall(sock, b'{"op": "hello"}')
    reply = json.loads(await asyncio.wait_for(loop.sock_recv(sock, 65536), STARTUP))
    if message["op"] == "slot" and reply["op"] != "hello":
        await asyncio.wait_for(loop.sock_recv(sock, 65536), STARTUP)  # the hello's
    return reply


@gen_cluster(client=True, timeout=STARTUP)
async def test_the_worker_maps_no_descriptor_but_a_sealed_memfd(c, s, a, b) -> None:
    await c.register_plugin(WorkerServices())
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.setblocking(False)
    await loop.sock_connect(sock, socket_name(a.address))
    fds = [unsealed_memfd(), os.open("/dev/zero", os.O_RDWR)]
    try:
        for ident, fd in enumerate(fds):
            reply = await exchange(sock, {"op": "slot", "id": ident, "size": SIZE}, fd)
            assert reply["op"] == "error" and "memfd" in reply["message"], reply
            put = {"op": "put", "id": 9, "slot": ident, "key": ["k", 0], "dtype": "<f8",
                   "shape": [8]}  # fmt: skip
            assert (await exchange(sock, put))["op"] == "error"  # nothing mapped
        sealed = memfd("deisa-test", SIZE)
        fds.append(sealed)
        assert (await exchange(sock, {"op": "slot", "id": 5, "size": SIZE}, sealed))["op"] == (
            "hello"
        )  # mapped: no answer but the hello's
        for dtype in ("|O", "|V8", "[('a', '<i4')]"):
            put = {"op": "put", "id": 1, "slot": 5, "key": ["k", 1], "dtype": dtype, "shape": [2]}
            reply = await exchange(sock, put)
            assert reply["op"] == "error", (dtype, reply)
        assert ("k", 1) not in a.data
    finally:
        sock.close()
        for fd in fds:
            os.close(fd)
    transport = Transport()
    try:  # the listener goes on serving a rank
        assert await transport.send_shared(a.address, ("k", 2), np.ones(8)) == 64
    finally:
        await transport.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_puts_message_stores_its_good_blocks_at_once_and_refuses_the_others(
    c, s, a, b
) -> None:
    """A step's blocks in one ``puts``: those that are right are stored (views of their slots,
    one ``update_data``), each wrong one is answered with its error and its slot freed."""
    await c.register_plugin(WorkerServices())
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.setblocking(False)
    await loop.sock_connect(sock, socket_name(a.address))
    fds = [memfd("deisa-test", SIZE) for _ in range(3)]
    try:
        for ident, fd in enumerate(fds):
            os.pwrite(fd, np.full(8, float(ident)).tobytes(), HEADER)
            assert (await exchange(sock, {"op": "slot", "id": ident, "size": SIZE}, fd))["op"] == (
                "hello"
            )
        blocks = [
            {"id": 10 + i, "slot": i, "key": ["k", i], "dtype": "<f8", "shape": [8]}
            for i in range(2)
        ]
        blocks.append({"id": 12, "slot": 2, "key": ["k", 2], "dtype": "|V8", "shape": [8]})
        blocks.append({"id": 13, "slot": 99, "key": ["k", 3], "dtype": "<f8", "shape": [8]})
        reply = await exchange(sock, {"op": "puts", "blocks": blocks})
        assert reply["op"] == "stored-many" and reply["stored"] == [[10, 64], [11, 64]]
        assert [ident for ident, _ in reply["errors"]] == [12, 13]
        assert "void" in reply["errors"][0][1] or "V8" in reply["errors"][0][1]
        for i in range(2):
            np.testing.assert_array_equal(a.data[("k", i)], np.full(8, float(i)))
        assert ("k", 2) not in a.data and ("k", 3) not in a.data
        bad = await exchange(sock, {"op": "puts", "blocks": "nope"})
        assert bad["op"] == "error" and "list of blocks" in bad["message"]
        failing = pytest.MonkeyPatch()  # the worker cannot store them: each answered, freed
        failing.setattr(
            "deisa._dask_internals.store_on_worker",
            lambda *_: (_ for _ in ()).throw(MemoryError("no room")),
        )
        try:
            await release(c, s, a, [("k", 0), ("k", 1)])  # their slots free again
            assert os.pread(fds[0], 1, 0) == b"\x00"
            again = [dict(b, key=["k", 10 + i]) for i, b in enumerate(blocks[:2])]
            os.pwrite(fds[0], b"\x01", 0)  # held, as the rank's hand-over marks it
            reply = await exchange(sock, {"op": "puts", "blocks": again})
        finally:
            failing.undo()
        assert reply["stored"] == [] and [i for i, _ in reply["errors"]] == [10, 11]
        assert "MemoryError: no room" in reply["errors"][0][1]
        assert os.pread(fds[0], 1, 0) == b"\x00"  # its slot free again
    finally:
        sock.close()
        for fd in fds:
            os.close(fd)


@gen_cluster(client=True, timeout=STARTUP)
async def test_blocks_packed_in_one_slot_keep_it_held_until_the_last_is_dropped(c, s, a, b) -> None:
    """A step's blocks for one worker in one slot, at their offsets (deisa.bridge.shm.pack):
    each stored as a view of its bytes; the slot is free once every block is gone, not
    before; a block past the slot's end, or at an offset that is not one, is refused and
    leaves the slot to the blocks that live in it."""
    await c.register_plugin(WorkerServices())
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.setblocking(False)
    await loop.sock_connect(sock, socket_name(a.address))
    fd = memfd("deisa-test", SIZE)
    try:
        os.pwrite(fd, np.arange(8.0).tobytes(), HEADER)
        os.pwrite(fd, np.arange(4, dtype=np.int32).tobytes(), HEADER + 128)
        assert (await exchange(sock, {"op": "slot", "id": 0, "size": SIZE}, fd))["op"] == "hello"
        os.pwrite(fd, b"\x01", 0)  # held, as the rank's hand-over marks it
        blocks = [
            {"id": 1, "slot": 0, "key": ["k", 0], "dtype": "<f8", "shape": [2, 4]},
            {"id": 2, "slot": 0, "key": ["k", 1], "dtype": "<i4", "shape": [4], "offset": 128},
            {"id": 3, "slot": 0, "key": ["k", 2], "dtype": "<f8", "shape": [8], "offset": 4090},
            {"id": 4, "slot": 0, "key": ["k", 3], "dtype": "<f8", "shape": [1], "offset": -8},
        ]
        reply = await exchange(sock, {"op": "puts", "blocks": blocks})
        assert reply["stored"] == [[1, 64], [2, 16]], reply
        assert [i for i, _ in reply["errors"]] == [3, 4]
        assert "does not fit" in reply["errors"][0][1] and "offset" in reply["errors"][1][1]
        np.testing.assert_array_equal(a.data[("k", 0)], np.arange(8.0).reshape(2, 4))
        np.testing.assert_array_equal(a.data[("k", 1)], np.arange(4, dtype=np.int32))
        assert os.pread(fd, 1, 0) == b"\x01"  # the refused blocks did not free it
        await release(c, s, a, [("k", 0)])
        assert os.pread(fd, 1, 0) == b"\x01"  # one block left in it
        await release(c, s, a, [("k", 1)])
        assert os.pread(fd, 1, 0) == b"\x00"  # the last gone: free
    finally:
        sock.close()
        os.close(fd)
