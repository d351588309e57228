"""Rank 0's connection to the scheduler: find it, install the extension, wait for workers.

Only rank 0 of a Bridge talks to the scheduler; the other ranks learn the outcome (a
:class:`~deisa.bridge._publisher.Connection`) from it, by a broadcast (``mode="sync"``) or an
exchange (``mode="async"``). Runs in rank 0 of a Bridge, on its event-loop thread
(:class:`~deisa.bridge._loop.LoopThread`).

distributed and the scheduler extension are imported where they are used, on the event-loop
thread: a rank's main thread imports this module (for :class:`Connections`) without paying
for them, and only rank 0 ever imports :mod:`deisa.scheduler`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..._dask_internals import import_distributed
from ...wire import PROTOCOL, Route, is_ok
from ...wire.relay import INSTALL_OP, RELAYED
from .._collective import BridgeError
from .._publisher import Connection
from ..arrays.decomposition import Decomposition
from ..contracts import ContractBook
from ..options import BridgeOptions
from ..registration.notices import NoticeListener
from ..scheduler_file import read_scheduler_address
from .relay import Relay, through

if TYPE_CHECKING:
    from distributed.core import ConnectionPool

logger = logging.getLogger(__name__)

T = TypeVar("T")


def route(
    pool: Connections | ConnectionPool, address: str, name: Route
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """The scheduler route ``name`` at ``address``, to call with its keyword arguments."""
    call: Callable[..., Coroutine[Any, Any, Any]] = getattr(pool(address), name.value)
    return call


async def open_pool() -> ConnectionPool:
    """A connection pool with the client's TLS settings (dask config), started."""
    import_distributed()
    from distributed import Security
    from distributed.core import ConnectionPool

    security = Security()
    pool = ConnectionPool(limit=64, connection_args=security.get_connection_args("client"))
    await pool.start()
    return pool


class Connections:
    """A rank's connections (to its workers; rank 0's to the scheduler too), opened at the first
    call made through them, on the event-loop thread.

    ``pool(address).<route>(**kwargs)`` is awaited as with a
    :class:`distributed.core.ConnectionPool`, which the first such call opens (:func:`open_pool`,
    importing distributed there): making one costs nothing, so that the Bridge's
    construction and its first ``publish`` do not wait for distributed's import on the
    simulation's thread. Used from one event loop only.

    Rank 0's calls to the scheduler go through :attr:`relay` while it is set and answers
    (:mod:`deisa.bridge.link.relay`: no distributed import at all), through distributed otherwise.
    """

    def __init__(self) -> None:
        self._pool: ConnectionPool | None = None
        self.relay: Relay | None = None

    async def opened(self) -> ConnectionPool:
        """The ConnectionPool, opened on the first call."""
        if self._pool is None:
            pool = await open_pool()
            if self._pool is None:
                self._pool = pool
            else:  # another first call opened one meanwhile
                await pool.close()
        return self._pool

    def __call__(self, address: str) -> _Remote:
        return _Remote(self, address)

    async def close(self) -> None:
        """Close the connections, if any was opened."""
        if self.relay is not None:
            await self.relay.close()
        if self._pool is not None:
            await self._pool.close()


class _Remote:
    """The routes of ``address`` through a :class:`Connections`: ``remote.<route>(**kwargs)``."""

    def __init__(self, pool: Connections, address: str) -> None:
        self._pool = pool
        self._address = address

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        if name.startswith("_"):
            raise AttributeError(name)

        async def direct(**kwargs: Any) -> Any:
            pool = await self._pool.opened()
            return await getattr(pool(self._address), name)(**kwargs)

        relay = self._pool.relay
        if relay is None or relay.scheduler != self._address or name not in RELAYED:
            return direct

        async def call(**kwargs: Any) -> Any:
            return await through(relay, name, kwargs, lambda: direct(**kwargs))

        return call


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
    """What ``deisa_open`` tells the analytics about an array.

    ``"dims"`` (the axes' names) only when the ranks named them: the metadata of an unnamed
    array is that of Bridges older than ``dims``, and older Adapters ignore the key; likewise
    ``"time_length"`` (the declared number of steps) only when the ranks declared one, and
    ``"attrs"`` (rank 0's static attributes, plain values) only when it gave some.
    A moving array (:meth:`~deisa.bridge.arrays.decomposition.ArraySpec.moving`) has no ``"shape"``
    nor ``"chunks"``: ``"moving": True``, its ``"ndim"`` and ``"joined_axis"`` (``None``: none),
    each step carrying its layout.
    """
    if dec.is_moving:
        moving: dict[str, Any] = {
            "dtype": dec.dtype.str, "moving": True, "ndim": dec.ndim,
            "joined_axis": dec.joined_axis, "run": run,
        }  # fmt: skip
        if dec.dims is not None:
            moving["dims"] = list(dec.dims)
        if dec.attrs:
            moving["attrs"] = dict(dec.attrs)
        return moving
    described: dict[str, Any] = {
        "dtype": dec.dtype.str,
        "shape": list(dec.global_shape),
        "chunks": [list(c) for c in dec.chunks],
        "run": run,
    }
    if dec.dims is not None:
        described["dims"] = list(dec.dims)
    if dec.time_length is not None:
        described["time_length"] = dec.time_length
    if dec.attrs:
        described["attrs"] = dict(dec.attrs)
    return described


async def install_from_rank_0(
    pool: Callable[[str], Any], address: str, shared_memory: bool = True
) -> None:
    """:func:`deisa.worker.install_on_scheduler` (the extension and the workers' services), made by
    rank 0 itself where no worker relays it: distributed is imported only then."""
    logger.info(
        "deisa bridge: no worker of this node relays rank 0 (deisa's worker services are not "
        "installed, or no worker is here): rank 0 imports distributed (about 0.4 s of CPU) and "
        "installs them; start the workers with --preload deisa.worker, or the "
        "analytics (its Adapter installs them) before the simulation, to avoid it"
    )
    import_distributed()
    from ...worker import install_on_scheduler

    await install_on_scheduler(pool, address, shared_memory)


async def wait_workers(pool: Connections, address: str, min_workers: int) -> list[str]:
    """The workers' addresses, once at least ``min_workers`` are connected."""
    while True:
        workers = await route(pool, address, Route.WORKERS)()
        if len(workers) >= min_workers:
            return [worker for worker, _ in workers]
        await asyncio.sleep(0.1)


async def connect_rank_0(
    pool: Connections,
    scheduler_file: str,
    options: BridgeOptions,
    decompositions: Mapping[str, Decomposition],
    contracts: ContractBook,
    listener: NoticeListener | None,
) -> Connection:
    """Rank 0: find the scheduler, install the extension, wait for workers, open the arrays.

    Each wait is bounded by ``options.connect_timeout``; a failure is a :class:`BridgeError`
    naming the address and the file.
    """
    connect_timeout = options.connect_timeout
    min_workers = options.min_workers
    address = await in_thread(read_scheduler_address, scheduler_file, connect_timeout)
    await _reach_and_install(pool, address, scheduler_file, options)
    try:
        workers = await asyncio.wait_for(wait_workers(pool, address, min_workers), connect_timeout)
    except (asyncio.TimeoutError, TimeoutError) as exc:
        raise BridgeError(
            f"fewer than min_workers={min_workers} Dask worker(s) connected to the "
            f"scheduler at {address} within connect_timeout={connect_timeout:g} s"
        ) from exc
    run = uuid.uuid4().hex[:8]
    await open_arrays(pool, address, run, decompositions, options, contracts)
    if listener is None:
        return Connection(address, run, tuple(workers))
    try:
        notices = await listener.listen(address)
    except OSError as exc:  # registration at the next publish, as without notices
        logger.warning("deisa bridge: no listener for early registration: %s", exc)
        notices = None
    tls = listener.client_files if notices is not None else None
    return Connection(address, run, tuple(workers), notices, listener.token, tls)


async def _reach_and_install(
    pool: Connections, address: str, scheduler_file: str, options: BridgeOptions
) -> None:
    """Rank 0: reach the scheduler at ``address`` (through a worker's relay where one is on
    this node) and install deisa's extension (and the workers' services) there."""
    connect_timeout = options.connect_timeout
    shared_memory = options.transport == "auto"
    try:
        pool.relay = await Relay.open(address, connect_timeout)
        await asyncio.wait_for(
            through(
                pool.relay,
                INSTALL_OP,
                {"shared_memory": shared_memory},
                lambda: install_from_rank_0(pool, address, shared_memory),
            ),
            connect_timeout,
        )
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


async def open_arrays(
    pool: Connections,
    address: str,
    run: str,
    decompositions: Mapping[str, Decomposition],
    options: BridgeOptions,
    contracts: ContractBook,
) -> None:
    """Rank 0: open every array's stream of ``run`` on the scheduler (at the connection, and
    the arrays of :meth:`deisa.Bridge.declare`); the contracts it serves are in force from the
    first step."""
    connect_timeout = options.connect_timeout
    for name, dec in decompositions.items():
        reply = await asyncio.wait_for(
            route(pool, address, Route.OPEN)(
                name=name,
                run=run,
                meta=meta(dec, run),
                buffer_nb=options.buffer_nb,
                on_full=options.on_full,
                consumers=options.consumers,
            ),
            connect_timeout,
        )
        if not is_ok(reply):
            raise BridgeError(reply["message"])
        if reply.get("protocol") != PROTOCOL:
            raise BridgeError(
                f"the Dask scheduler at {address} runs deisa's extension of protocol "
                f"{reply.get('protocol', 1)}, and this Bridge speaks protocol {PROTOCOL}: the "
                "first Bridge to connect installed it, from another version of deisa, and it "
                "stays with the scheduler; start a new scheduler (deisa-run starts one per job)"
            )
        contracts.served(name, reply.get("contract"))  # in force from the first step
