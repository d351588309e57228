"""Rank 0's connection to the scheduler: find it, install the extension, wait for workers.

Only rank 0 of a Bridge talks to the scheduler; the other ranks learn the outcome (a
:class:`~deisa.bridge._publisher.Connection`) from it, by a broadcast (``mode="sync"``) or an
exchange (``mode="async"``). Everything here runs on rank 0's event-loop thread
(:class:`~deisa.bridge._loop.LoopThread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from distributed import Security
from distributed.core import ConnectionPool
from distributed.protocol.pickle import dumps

from ..scheduler import StreamExtension
from ..wire import PLUGIN_NAME, Route, is_ok
from ._collective import BridgeError
from ._notices import EarlyRegistration
from ._publisher import Connection
from .contracts import ContractBook
from .decomposition import Decomposition
from .options import BridgeOptions
from .scheduler_file import read_scheduler_address

logger = logging.getLogger(__name__)

T = TypeVar("T")


def route(
    pool: ConnectionPool, address: str, name: Route
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """The scheduler route ``name`` at ``address``, to call with its keyword arguments."""
    call: Callable[..., Coroutine[Any, Any, Any]] = getattr(pool(address), name.value)
    return call


async def open_pool() -> ConnectionPool:
    """A connection pool with the client's TLS settings (dask config), started."""
    security = Security()
    pool = ConnectionPool(limit=64, connection_args=security.get_connection_args("client"))
    await pool.start()
    return pool


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a daemon thread (a blocking wait must not stop the event loop, nor
    keep the process alive at exit as an executor's thread would)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(set_outcome: Callable[[Any], None], value: Any) -> None:
        if not future.done():
            set_outcome(value)

    def target() -> None:
        try:
            outcome: tuple[Callable[[Any], None], Any] = (future.set_result, fn(*args))
        except BaseException as exc:
            outcome = (future.set_exception, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=target, name="deisa-bridge-wait", daemon=True).start()
    return await future


def meta(dec: Decomposition, run: str) -> dict[str, Any]:
    """What ``deisa_open`` tells the analytics about an array."""
    return {
        "dtype": dec.dtype.str,
        "shape": list(dec.global_shape),
        "chunks": [list(c) for c in dec.chunks],
        "run": run,
    }


async def install(pool: ConnectionPool, address: str) -> None:
    """Install the :class:`~deisa.scheduler.StreamExtension` (idempotent)."""
    await pool(address).register_scheduler_plugin(
        plugin=dumps(StreamExtension()), name=PLUGIN_NAME, idempotent=True
    )


async def wait_workers(pool: ConnectionPool, address: str, min_workers: int) -> list[str]:
    """The workers' addresses, once at least ``min_workers`` are connected."""
    while True:
        workers = await route(pool, address, Route.WORKERS)()
        if len(workers) >= min_workers:
            return [worker for worker, _ in workers]
        await asyncio.sleep(0.1)


async def connect(
    pool: ConnectionPool,
    scheduler_file: str,
    options: BridgeOptions,
    decompositions: Mapping[str, Decomposition],
    contracts: ContractBook,
    early: EarlyRegistration | None,
) -> Connection:
    """Rank 0: find the scheduler, install the extension, wait for workers, open the arrays.

    Each wait is bounded by ``options.connect_timeout``; a failure is a :class:`BridgeError`
    naming the address and the file.
    """
    connect_timeout = options.connect_timeout
    min_workers = options.min_workers
    address = await in_thread(read_scheduler_address, scheduler_file, connect_timeout)
    try:
        await asyncio.wait_for(install(pool, address), connect_timeout)
    except (asyncio.TimeoutError, TimeoutError, OSError) as exc:
        raise BridgeError(
            f"no Dask scheduler answered at {address} (read from {scheduler_file!r}) "
            f"within connect_timeout={connect_timeout:g} s ({type(exc).__name__}: "
            f"{exc}); the scheduler file may be stale, or the scheduler down or "
            "unreachable"
        ) from exc
    except Exception as exc:
        raise BridgeError(
            f"connecting to the Dask scheduler at {address} (read from "
            f"{scheduler_file!r}) failed: {type(exc).__name__}: {exc}; for a tls:// "
            "address, check the TLS settings (dask config distributed.comm.tls.*)"
        ) from exc
    try:
        workers = await asyncio.wait_for(wait_workers(pool, address, min_workers), connect_timeout)
    except (asyncio.TimeoutError, TimeoutError) as exc:
        raise BridgeError(
            f"fewer than min_workers={min_workers} Dask worker(s) connected to the "
            f"scheduler at {address} within connect_timeout={connect_timeout:g} s"
        ) from exc
    run = uuid.uuid4().hex[:8]
    for name, dec in decompositions.items():
        reply = await asyncio.wait_for(
            route(pool, address, Route.OPEN)(
                name=name,
                run=run,
                meta=meta(dec, run),
                buffer_nb=options.buffer_nb,
                on_full=options.on_full,
            ),
            connect_timeout,
        )
        if not is_ok(reply):
            raise BridgeError(reply["message"])
        contracts.served(name, reply.get("contract"))  # in force from the first step
    if early is None:
        return Connection(address, run, tuple(workers))
    try:
        notices = await early.listen(address)
    except OSError as exc:  # registration at the next publish, as without notices
        logger.warning("deisa bridge: no listener for early registration: %s", exc)
        notices = None
    return Connection(address, run, tuple(workers), notices, early.token)
