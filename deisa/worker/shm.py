"""The worker's side of the shared-memory path: a listener for the ranks of its node.

Runs in a Dask worker process, on the worker's event loop (its listener's socket is a reader of
that loop). Started by :class:`deisa.worker.services.WorkerServices`. Imports :mod:`deisa.wire`
and :mod:`deisa._dask_internals` only. Mirrors :mod:`deisa.bridge.shm` (the rank's side) and
:mod:`deisa.wire.shm` (what the two agree on).

:class:`Listener` listens on an abstract Unix socket (:func:`deisa.wire.shm.socket_name`) and
serves each rank that connects with the same uid:

- ``hello``: answers with the worker's address (the rank checks it is the one it wanted);
- ``slot`` with a file descriptor: maps that slot of the rank's ring;
- ``put``: wraps the block in the slot (at ``offset`` bytes into its data, 0 if absent) in an
  ``ndarray`` (no copy) and stores it under the block's key as a peer's ``update_data`` would,
  then answers ``stored`` (or ``error``);
- ``puts``: several blocks at once (a step's), stored with one ``update_data``, answered with one
  ``stored-many`` (the blocks stored, the blocks refused); several of them may lie in one slot
  at different offsets (a step's blocks for this worker packed by the rank,
  :mod:`deisa.bridge.shm.pack`);
- ``drop``: forgets a slot the rank has retired.

The array's memory is the slot's: spilling, pickling and transfers to other workers see a
plain ndarray. Every block of a slot holds one *lease* of it (:class:`_Lease`): when
the last reference to every block of the slot (and to any view of them) is gone, the slot is
marked free for the rank to reuse. A rank that dies leaves its slots mapped only as long as
the worker keeps blocks in them.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import ctypes
import fcntl
import logging
import math
import mmap
import os
import socket
import weakref
from typing import Any

import numpy as np

from .. import _dask_internals
from ..wire.guard import Guard, PausedError, other_account
from ..wire.names import bind_first, run_secret
from ..wire.shm import (
    FREE,
    HEADER,
    HELD,
    MAX_MESSAGE,
    SEALS,
    decode,
    encode,
    key_from_wire,
    plain_dtype,
    socket_names,
)

logger = logging.getLogger(__name__)

__all__ = ["Listener", "block_dtype", "block_shape", "slot_problem"]


class _Slot:
    """One slot of a rank's ring, mapped here: only a memfd of at least ``size`` bytes sealed
    against shrinking and growing (:func:`slot_problem`), so that the rank cannot cut the
    mapping under an array the worker keeps (a ``SIGBUS``)."""

    def __init__(self, fd: int, size: int) -> None:
        problem = slot_problem(fd, size)
        if problem is not None:
            raise ValueError(problem)
        self.map = mmap.mmap(fd, size)
        self.size = size
        self._anchor = ctypes.c_char.from_buffer(self.map)  # keeps the address valid
        self.address = ctypes.addressof(self._anchor)


class _Lease:
    """A slot's blocks held here: keeps the mapping alive while one of them lives, frees the
    slot when the last is gone (each block's :class:`_SlotView` holds it)."""

    def __init__(self, slot: _Slot) -> None:
        self.slot = slot
        weakref.finalize(self, _set_free, slot.map)


class _SlotView:
    """What a block's array over a slot points to (numpy makes every view of the array keep
    this object, not the array, alive): holds the slot's :class:`_Lease`."""

    def __init__(self, lease: _Lease, dtype: np.dtype[Any], shape: tuple[int, ...],
                 offset: int = 0) -> None:  # fmt: skip
        self.__array_interface__ = {
            "version": 3,
            "shape": shape,
            "typestr": dtype.str,
            "data": (lease.slot.address + HEADER + offset, False),
        }
        self.lease = lease


def slot_problem(fd: int, size: int) -> str | None:
    """Why the descriptor ``fd`` cannot be mapped as a slot of ``size`` bytes, or ``None``: it
    must be a memfd (not a file, a pipe or a device), hold ``size`` bytes, and carry the seals
    :data:`~deisa.wire.shm.SEALS`."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if not target.startswith("/memfd:"):
            return f"a slot is a memfd, not {target!r}"
        length = os.fstat(fd).st_size
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as exc:
        return f"a slot is a sealed memfd: {exc}"
    if seals & SEALS != SEALS:
        return f"slot {target!r} is not sealed against shrinking and growing (seals {seals:#x})"
    if not HEADER < size <= length:
        return f"a slot of {size} bytes claimed for {target!r} of {length}"
    return None


def block_dtype(name: Any) -> np.dtype[Any]:
    """The dtype of a ``put`` message's ``dtype`` (a dtype string of plain numbers, booleans,
    datetimes, bytes or str); a ``ValueError`` for objects, void and structured dtypes, which
    raw memory must never be read as."""
    if not isinstance(name, str) or len(name) > 32:
        raise ValueError(f"not a dtype string: {name!r:.80}")
    dtype = np.dtype(name)
    if not plain_dtype(dtype):
        raise ValueError(f"blocks of dtype {dtype} do not go through shared memory")
    return dtype


def block_shape(shape: Any) -> tuple[int, ...]:
    """The shape of a ``put`` message; a ``ValueError`` for anything but non-negative ints."""
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"not a block shape: {shape!r:.80}")
    return tuple(shape)


def _set_free(region: mmap.mmap) -> None:
    with contextlib.suppress(ValueError):  # unmapped: the worker is going down
        region[0] = FREE


class Listener:
    """The listener on one worker, on its event loop."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.loop = asyncio.get_running_loop()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        self.sock.setblocking(False)
        if bind_first(self.sock, socket_names(str(worker.address), run_secret())) is None:
            raise OSError(f"another listener of this account serves worker {worker.address}")
        self.sock.listen(128)
        self.peers: set[_Peer] = set()
        self.guard = Guard(f"the shared-memory listener of worker {worker.address}", 0)
        self._closed = False
        self._resume()
        logger.debug("deisa: shared-memory listener on worker %s", worker.address)

    def _resume(self) -> None:
        if not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        """Every connection waiting, each checked for this account's uid before a byte of it
        is read (a refusal counted by :attr:`guard`, never raised into the worker's loop)."""
        try:
            while (conn := self.guard.accept(self.sock, self._resume)) is not None:
                problem = other_account(conn)
                if problem is not None:
                    conn.close()
                    self.guard.refuse(problem)
                    continue
                conn.setblocking(False)
                peer = _Peer(self, conn)
                self.peers.add(peer)
                self.loop.add_reader(conn.fileno(), peer.readable)
        except PausedError:
            self.loop.remove_reader(self.sock.fileno())

    def close(self) -> None:
        self._closed = True
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for peer in list(self.peers):
            peer.close()
        self.guard.flush()


class _Peer:
    """One rank's connection: its slots, by number, and the live lease of each."""

    def __init__(self, server: Listener, conn: socket.socket) -> None:
        self.server = server
        self.conn = conn
        self.slots: dict[int, _Slot] = {}
        self.leases: dict[int, weakref.ref[_Lease]] = {}

    def readable(self) -> None:
        while True:
            try:
                data, ancillary, _, _ = self.conn.recvmsg(
                    MAX_MESSAGE, socket.CMSG_SPACE(array.array("i").itemsize)
                )
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, ancillary = b"", []
            fds = _fds(ancillary)
            if not data:  # the rank closed, or died
                for fd in fds:
                    os.close(fd)
                self.close()
                return
            try:
                reply = self.handle(decode(data), fds)
            except Exception as exc:  # a wrong message: answered, never raised into the loop
                logger.warning("deisa: shared memory: %s", exc)
                reply = {"op": "error", "message": f"{type(exc).__name__}: {exc}"}
            finally:
                for fd in fds:
                    os.close(fd)
            if reply is not None:
                self.send(reply)

    def handle(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any] | None:
        op = message.get("op")
        if op == "hello":
            return {"op": "hello", "worker": str(self.server.worker.address)}
        if op == "slot":
            if len(fds) != 1:
                raise ValueError("a slot message carries one file descriptor")
            self.slots[int(message["id"])] = _Slot(fds[0], int(message["size"]))
            return None
        if op == "drop":
            self.slots.pop(int(message["id"]), None)
            self.leases.pop(int(message["id"]), None)
            return None
        if op == "put":
            ident = int(message["id"])
            try:
                key, block = self.block(message)
                nbytes = _dask_internals.store_on_worker(self.server.worker, {key: block})[key]
            except Exception as exc:
                self.free(message)
                return {"op": "error", "id": ident, "message": f"{type(exc).__name__}: {exc}"}
            return {"op": "stored", "id": ident, "nbytes": nbytes}
        if op == "puts":
            return self.puts(message)
        raise ValueError(f"unknown message {op!r}")

    def block(self, message: dict[str, Any]) -> tuple[tuple[Any, ...], np.ndarray]:
        """The key and the array (over its slot, at its ``offset``, no copy) of one ``put``'s
        block: a view of the slot's lease (:meth:`lease`)."""
        ident = int(message["slot"])
        slot = self.slots[ident]
        dtype = block_dtype(message["dtype"])
        shape = block_shape(message["shape"])
        offset = message.get("offset", 0)
        if type(offset) is not int or offset < 0:
            raise ValueError(f"not a block offset: {offset!r:.80}")
        nbytes = dtype.itemsize * math.prod(shape)
        if offset + nbytes > slot.size - HEADER:
            raise ValueError(
                f"a block of {shape} {dtype} at offset {offset} does not fit slot {ident}"
            )
        view = _SlotView(self.lease(ident, slot), dtype, shape, offset)
        return key_from_wire(message["key"]), np.asarray(view)

    def lease(self, ident: int, slot: _Slot) -> _Lease:
        """Slot ``ident``'s live lease (its blocks stored so far and not yet dropped), or a
        new one, which marks the slot held again (a lease of it that ended may have freed it
        while the rank was still handing it over)."""
        ref = self.leases.get(ident)
        lease = ref() if ref is not None else None
        if lease is None or lease.slot is not slot:
            lease = _Lease(slot)
            self.leases[ident] = weakref.ref(lease)
            slot.map[0] = HELD
        return lease

    def free(self, message: Any) -> None:
        """Free the slot of a ``put`` that failed (the rank may write it again), unless other
        blocks of it live here (their lease frees it once they are gone)."""
        ident = int(message.get("slot", -1)) if isinstance(message, dict) else -1
        slot = self.slots.get(ident)
        ref = self.leases.get(ident)
        if slot is not None and (ref is None or ref() is None):
            _set_free(slot.map)

    def puts(self, message: dict[str, Any]) -> dict[str, Any]:
        """Several blocks handed over at once (a step's, :data:`MAX_MESSAGE` at most), stored
        with one ``update_data``; answered with one ``stored-many``: ``stored``, ``[id, bytes]``
        of each block stored, and ``errors``, ``[id, message]`` of each refused (its slot
        freed)."""
        blocks = message.get("blocks")
        if not isinstance(blocks, list):
            raise ValueError(f"a puts message carries a list of blocks, not {blocks!r:.80}")
        taken: dict[Any, tuple[int, np.ndarray, dict[str, Any]]] = {}
        errors: list[list[Any]] = []
        for one in blocks:
            ident = -1
            try:
                ident = int(one["id"])
                key, block = self.block(one)
                if key in taken:
                    raise ValueError(f"block {key!r} twice in one puts message")
                taken[key] = (ident, block, one)
            except Exception as exc:
                self.free(one)
                errors.append([ident, f"{type(exc).__name__}: {exc}"])
        try:
            sizes = _dask_internals.store_on_worker(
                self.server.worker, {key: block for key, (_, block, _) in taken.items()}
            )
        except Exception as exc:  # none stored: each block answered with the error
            for ident, _, one in taken.values():
                self.free(one)
                errors.append([ident, f"{type(exc).__name__}: {exc}"])
            return {"op": "stored-many", "stored": [], "errors": errors}
        stored = [[ident, sizes[key]] for key, (ident, _, _) in taken.items()]
        return {"op": "stored-many", "stored": stored, "errors": errors}

    def send(self, reply: dict[str, Any]) -> None:
        data = encode(**reply)
        try:
            self.conn.send(data)
        except (BlockingIOError, InterruptedError):
            task = self.server.loop.create_task(self.server.loop.sock_sendall(self.conn, data))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        except OSError:
            self.close()

    def close(self) -> None:
        if self in self.server.peers:
            self.server.peers.discard(self)
            with contextlib.suppress(ValueError, OSError):
                self.server.loop.remove_reader(self.conn.fileno())
            self.conn.close()
        self.slots.clear()  # the blocks kept in them keep their mappings


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(data[: len(data) - (len(data) % received.itemsize)])
            fds += list(received)
    return fds
