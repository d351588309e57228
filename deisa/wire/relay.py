"""The frames between rank 0 and the worker that relays its calls to the scheduler.

Frames of a 4-byte big-endian length then a msgpack map, as distributed's own messages (tuples
arrive as tuples). Rank 0 (:mod:`deisa.bridge.link.relay`) sends ``{"id": n, "op": route,
"kwargs": {...}}``, where ``route`` is one of :data:`RELAYED` (deisa's routes, and
``"install"``: the scheduler extension and the workers' services); the worker
(:mod:`deisa.worker.relay`) answers ``{"id": n, "result": ...}``, or ``{"id": n, "error": type
name, "message": ..., "kind": "os" | "timeout" | "other"}``. Nothing is unpickled. The relay
listens on an abstract Unix socket named from the scheduler's address, the account's uid and
the run's secret (:func:`relay_names`, :mod:`.names`).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from . import Route
from .names import names

INSTALL_OP = "install"
"""The op that installs the scheduler extension and the workers' services (relayed as rank 0
would make it: :func:`deisa.worker.install_on_scheduler`)."""

RELAYED = frozenset(
    {
        INSTALL_OP,
        Route.WORKERS.value,
        Route.OPEN.value,
        Route.PUBLISH.value,
        Route.GET_VALUE.value,
        Route.CLOSE.value,
        Route.WATCH_CONTRACTS.value,
        Route.WATCH_WORKERS.value,
    }
)
"""What a relay makes on the scheduler: exactly the calls of rank 0's Bridge."""

MAX_FRAME = 64 << 20
"""Longest frame either end reads (a registration of a step of a million ranks is ~100 MiB:
beyond that, distributed's own limits would apply)."""

_LENGTH = struct.Struct(">I")


def relay_names(scheduler: str, secret: bytes = b"", uid: int | None = None) -> list[bytes]:
    """The abstract socket names of the relay to ``scheduler`` for account ``uid`` and the
    run's ``secret``, in the order a worker tries them (:mod:`.names`)."""
    return names("relay", scheduler, secret, uid)


def relay_name(scheduler: str, uid: int | None = None, secret: bytes = b"") -> bytes:
    """The first of :func:`relay_names`: the one a worker binds unless another account holds
    it."""
    return relay_names(scheduler, secret, uid)[0]


def pack(message: dict[str, Any]) -> bytes:
    """One frame: its length, then ``message`` in msgpack."""
    import msgpack

    data: bytes = msgpack.packb(message, use_bin_type=True)
    return _LENGTH.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next frame's message; an ``OSError`` when the stream ends or breaks, a
    ``ValueError`` for a frame too long or not a msgpack map."""
    import msgpack

    try:
        (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
        if length > MAX_FRAME:
            raise ValueError(f"a frame of {length} bytes (at most {MAX_FRAME})")
        data = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise ConnectionResetError("the relay's connection closed") from exc
    message = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)
    if not isinstance(message, dict):
        raise ValueError("a relay frame is a map")
    return message
