"""What a rank and a worker of its node agree on to share blocks through memory.

The rank owns a small ring of *slots* per worker (:mod:`deisa.bridge.shm.channel`): each slot is an
anonymous ``memfd`` (no name in ``/dev/shm``, nothing left behind by a crash: the memory goes when
the last process that maps it closes or dies), whose file descriptor is passed once to the worker
over a Unix socket (``SCM_RIGHTS``). A block is then copied into a slot and announced by a small
message; the worker keeps a plain ``ndarray`` over the slot under the block's key
(:mod:`deisa.worker.shm`), and marks the slot free when that array is gone.

The socket is in the abstract namespace (no file either), named from the worker's address, the
account's uid and the run's secret (:mod:`.names`: another account cannot guess the name, and
one it holds anyway is replaced by the next); abstract names belong to a network namespace, so
"same node" means that the handshake succeeded, not equal host names. Both sides check the
other's uid (``SO_PEERCRED``) before anything else. Messages are one JSON object per datagram
(``SOCK_SEQPACKET``); nothing is unpickled.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
from collections.abc import Hashable
from typing import Any

from .guard import peer_uid as peer_uid
from .names import names

HEADER = mmap.PAGESIZE
"""Bytes before a slot's data: byte 0 is the slot's state, the data stays page-aligned."""
FREE, HELD = 0, 1
"""A slot's state: ``FREE`` (the rank may write it), ``HELD`` (the worker keeps a block in it,
until the array over it is gone)."""
MAX_MESSAGE = 1 << 16
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
"""The seals of a slot once sized (:func:`memfd`): neither end can shrink it under the other's
mapping (a read past the end is a ``SIGBUS``) nor grow it."""
SERVICES_NAME = "deisa-shared-memory"
"""The name deisa's services on a worker (:class:`deisa.worker.services.WorkerServices`: the
shared-memory listener and rank 0's relay) are registered under (its first service named it)."""


def socket_names(worker: str, secret: bytes = b"", uid: int | None = None) -> list[bytes]:
    """The abstract socket names of ``worker``'s shared-memory listener for account ``uid``
    and the run's ``secret``, in the order the listener tries them (:mod:`.names`)."""
    return names("shm", worker, secret, uid)


def socket_name(worker: str, uid: int | None = None, secret: bytes = b"") -> bytes:
    """The first of :func:`socket_names`: the one a listener binds unless another account
    holds it."""
    return socket_names(worker, secret, uid)[0]


def slot_bytes(nbytes: int) -> int:
    """The size of a slot holding ``nbytes`` of data: the header, then whole pages."""
    pages = -(-nbytes // mmap.PAGESIZE)
    return HEADER + max(pages, 1) * mmap.PAGESIZE


def memfd(name: str, size: int, *, huge: bool = False) -> int:
    """A fresh memfd of ``size`` bytes, sealed with :data:`SEALS`: the worker maps only slots
    sealed so (:class:`deisa.worker.shm._Slot`). ``huge``: in the node's reserved huge
    pages (``size`` a whole number of them), an ``OSError`` where there are none."""
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | (os.MFD_HUGETLB if huge else 0)
    fd = os.memfd_create(name, flags)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def encode(**message: Any) -> bytes:
    """One message, as sent."""
    return json.dumps(message, separators=(",", ":")).encode()


def decode(data: bytes) -> dict[str, Any]:
    """One message received; a ``ValueError`` for anything but a JSON object."""
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError(f"not a message: {data[:80]!r}")
    return message


def key_to_wire(key: Hashable) -> list[Any] | None:
    """A block key as a JSON list (a string then integers), or ``None`` for another key."""
    if not isinstance(key, tuple) or not key or not isinstance(key[0], str):
        return None
    rest = key[1:]
    if not all(isinstance(i, int) or hasattr(i, "__index__") for i in rest):
        return None
    return [key[0], *(int(i) for i in rest)]


def key_from_wire(wired: Any) -> tuple[Any, ...]:
    """The key that :func:`key_to_wire` sent; a ``ValueError`` for anything else."""
    if (
        not isinstance(wired, list)
        or not wired
        or not isinstance(wired[0], str)
        or not all(type(i) is int for i in wired[1:])
    ):
        raise ValueError(f"not a block key: {wired!r}")
    return tuple(wired)


PLAIN_KINDS = "biufcmMSU"
"""The dtype kinds of blocks a slot may hold: no object (``O``), void or structured (``V``)."""


def plain_dtype(dtype: Any) -> bool:
    """Whether blocks of ``dtype`` can go through a slot (no objects, no void, no fields)."""
    return dtype.kind in PLAIN_KINDS and not dtype.hasobject and dtype.itemsize > 0
