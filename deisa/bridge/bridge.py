"""The simulation side: one :class:`Bridge` per MPI rank sends its blocks to Dask workers.

Per step and array, :meth:`Bridge.publish` (collective over the Bridge's communicator):

1. sends the rank's block straight to its worker (chosen once by the placement policy) under an
   explicit key ``("deisa-<run>-<array>-<step>", i, j)`` (``-r<N>`` appended when the step is
   published again); the scheduler is not involved;
2. once every rank's block of the step is on its worker, rank 0 registers all the step's keys
   and queues the step on the scheduler in one ``deisa_publish`` call, which waits while
   ``buffer_nb`` steps are queued (flow control);
3. every rank returns, or raises the same error, together.

In ``mode="async"`` (the default) ``publish`` only copies the block into a buffer the Bridge
owns and does one small ``allgather`` (the *exchange*, :mod:`._publisher`): steps 1 and 2
run in the background, on the Bridge's event-loop thread, which never calls MPI. Each exchange
carries which sends finished, and rank 0's news (the connection, the steps registered, a
failure), so every rank decides the same thing at the same call: wait for room (at most
``max_in_flight`` blocks per array in flight), or raise a background failure naming the step.
The connection to the scheduler is made in the background too, by rank 0.
In ``mode="sync"`` the ranks gather their keys on rank 0 and wait for its ``deisa_publish``
(then a broadcast of the outcome) before returning.

So the scheduler handles one message per step and array whatever the number of ranks, and only
rank 0 ever talks to it. See ``docs/architecture.md``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from distributed import Security
from distributed.core import ConnectionPool
from distributed.protocol.pickle import dumps

from .. import _dask_internals
from ..contract import FULL as FULL_PLAN
from ..contract import Plan
from ..scheduler import StreamExtension
from ..wire import PLUGIN_NAME, decode_value, step_key_name
from ._loop import LoopThread
from ._notices import EarlyRegistration, notify
from ._publisher import Connection, Entry, Exchanged, Ledger, RankReport, RootReport
from .contracts import ContractBook
from .decomposition import ArraySpec, Decomposition
from .options import BridgeOptionError, BridgeOptions
from .placement import Host, needs_hosts, place, this_host
from .scheduler_file import read_scheduler_address

logger = logging.getLogger(__name__)

T = TypeVar("T")


class BridgeError(RuntimeError):
    """A collective Bridge operation failed; raised on every rank with the same message."""


@dataclass(frozen=True)
class PublishTiming:
    """Cost of one :meth:`Bridge.publish` on this rank.

    ``mode="sync"``: ``send_s`` is the transfer of the block to its worker; ``sync_s`` the MPI
    gather, the scheduler call of rank 0 (including any flow-control wait) and the broadcast.

    ``mode="async"``: ``send_s`` is what ``publish`` spent on the block itself, the copy into
    the Bridge's buffer (also ``copy_s``; the transfer overlaps the caller's next compute);
    ``sync_s`` the exchanges, of which ``wait_s`` waiting for room (``max_in_flight`` blocks
    in flight: the transfers, the registrations and flow control show up there).
    """

    name: str
    step: int
    nbytes: int
    send_s: float
    sync_s: float
    copy_s: float = 0.0
    wait_s: float = 0.0
    mode: str = "sync"


@dataclass
class _Send:
    """One of this rank's blocks on its way to its worker (``mode="async"``)."""

    entry: Entry
    buffer: np.ndarray | None  # None once given back (the send is done)
    future: concurrent.futures.Future[dict[Any, int]] | None = None
    worker: str = ""
    reported: bool = False


class Bridge:
    """Publish the blocks of an MPI simulation to a Dask cluster, one Bridge per rank.

    Construction, :meth:`publish` and :meth:`close` are collective over ``comm``: every rank
    calls them in the same order, with the same array name and step.

    Parameters
    ----------
    scheduler_file
        Path of the JSON file written by ``dask scheduler --scheduler-file``. Waited for up to
        ``connect_timeout`` seconds.
    arrays
        This rank's block of every array it will publish, by name. Every rank lists the same
        names; the blocks must tile each global array on a grid (uneven splits are fine).
    comm
        mpi4py communicator; ``MPI.COMM_WORLD`` by default. An array held by some ranks only
        (a boundary diagnostic of the edge ranks) gets a Bridge of its own over a communicator
        of those ranks (``comm.Split``), built on those ranks only, beside the Bridge of the
        other arrays: the other ranks never take part in its collectives (see the examples,
        and :class:`~deisa.BridgeGroup` to let one object do it).
    options
        A :class:`~deisa.BridgeOptions`; its defaults if ``None``.
    **kwargs
        Any option of :class:`~deisa.BridgeOptions` by name (``placement``, ``buffer_nb``,
        ``timeout``, ``connect_timeout``, ``min_workers``, ``on_full``, ``mode``,
        ``max_in_flight``), overriding ``options``.
        In short: ``placement`` is ``"round_robin"``, ``"locality"`` or ``"node_local"``
        (every rank must give the same); ``buffer_nb`` steps of an array at most wait on the
        scheduler (``None``: unbounded; ``0`` is refused); a step's registration waits up to
        ``timeout`` seconds on flow control (``None``: forever), or with
        ``on_full="drop_oldest"`` releases the oldest waiting step instead;
        ``connect_timeout`` bounds the wait for the scheduler file, the scheduler and
        ``min_workers`` workers. ``mode="async"`` (default): :meth:`publish` returns once the
        block is copied, with at most ``max_in_flight`` blocks per array in flight;
        ``mode="sync"``: once the step is registered.

    Attributes
    ----------
    options : BridgeOptions
        The checked options; ``placement``, ``buffer_nb``, ``timeout`` and ``on_full`` are
        also attributes of the Bridge.
    timings : list of PublishTiming
        One per :meth:`publish` on this rank.
    peak_buffers : dict of str to int
        ``mode="async"``: the most block copies this rank held at once, per array (at most
        ``max_in_flight``); ``peak_in_flight`` the most blocks not known registered.
    exchanges : int
        ``mode="async"``: exchanges (small ``allgather`` calls) made so far.

    Raises
    ------
    BridgeError
        On every rank, naming the rank at fault, for a bad option value, bad ``arrays``, blocks
        that do not tile the arrays, or (``mode="sync"``; in ``mode="async"`` the first
        :meth:`publish` or :meth:`close` that finds it) a scheduler that did not answer within
        ``connect_timeout`` (naming its address).
    TypeError
        For a keyword argument that is no option, or ``options`` that is no
        :class:`~deisa.BridgeOptions`.

    See Also
    --------
    deisa.BridgeOptions : the options, their defaults and their checks.

    Examples
    --------
    >>> spec = ArraySpec("float64", global_shape=(64, 64), start=(0, 32), shape=(32, 32))
    >>> with Bridge("scheduler.json", {"gtemp": spec}, buffer_nb=4) as bridge:  # doctest: +SKIP
    ...     for step in range(10):
    ...         compute(field)
    ...         bridge.publish("gtemp", field[1:-1, 1:-1], step)

    The top row of a 2 x 2 process grid (ranks 0 and 1) also publishes the global top row
    ``gtop`` (each its half, ``top_spec``), over its own communicator; every rank builds its
    Bridges in the same order (a collective over ``edge`` never waits on one over ``comm``):

    >>> edge = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)  # doctest: +SKIP
    >>> bridge = Bridge("scheduler.json", {"gtemp": spec})  # doctest: +SKIP
    >>> top = Bridge("scheduler.json", {"gtop": top_spec}, comm=edge) if rank < 2 else None
    >>> for step in range(10):  # doctest: +SKIP
    ...     bridge.publish("gtemp", field[1:-1, 1:-1], step)
    ...     if top is not None:
    ...         top.publish("gtop", field[1:2, 1:-1], step)
    """

    def __init__(
        self,
        scheduler_file: str,
        arrays: Mapping[str, ArraySpec],
        *,
        comm: Any = None,
        options: BridgeOptions | None = None,
        **kwargs: Any,
    ) -> None:
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.options, problem = _build_options(options, kwargs)
        self.timings: list[PublishTiming] = []
        self._closed = False
        self._revisions: dict[tuple[str, int], int] = {}  # publications of (name, step) so far
        self._nsteps: dict[str, int] = {}  # distinct steps queued per array (rank 0, async)
        self._loop = LoopThread(f"deisa-bridge-{self.rank}")
        self._pool: ConnectionPool | None = None
        self.scheduler_address: str | None = None
        self.workers: list[str] = []
        self.run: str | None = None
        self.worker_of: dict[str, str] = {}
        self._placements: dict[str, list[str]] = {}
        self._hosts: list[Host] | None = None
        # mode="async"
        self._ledger = Ledger(comm.Get_size())
        self._sends: dict[int, _Send] = {}
        self._free: dict[str, list[np.ndarray]] = {}
        self._allocated: dict[str, int] = {}
        self.peak_buffers: dict[str, int] = {}
        self.peak_in_flight: dict[str, int] = {}
        self.exchanges = 0
        self._raised: str | None = None  # the background failure already raised here
        self._progress = threading.Event()  # set by the loop thread: a send, a registration...
        self._fields: dict[str, tuple[Callable[[], Any] | None, Callable[[Any], None]]] = {}
        # contracts (deisa.contract): rank 0 learns them, the exchange puts them in force
        self._contracts = ContractBook()
        self._add_exchange_field(
            "contracts", self._contracts.to_spread if self.rank == 0 else None,
            self._contracts.receive,
        )  # fmt: skip
        # rank 0, mode="async": written by the loop thread, read by the main thread
        self._root_connection: Connection | None = None
        self._root_connect_error: str | None = None
        self._announced = False
        self._registered = 0
        self._register_error: str | None = None
        self._register_queue: asyncio.Queue[tuple[Entry, list[Any]] | None] | None = None
        self._early: EarlyRegistration | None = None  # rank 0: registration on sent notices
        self._notices: tuple[str, str] | None = None  # (rank 0's listener, token), if any
        self._background: list[concurrent.futures.Future[Any]] = []
        try:
            self._setup(scheduler_file, dict(arrays), problem)
        except BaseException:
            self._shutdown()
            raise

    @property
    def asynchronous(self) -> bool:
        """Whether :meth:`publish` returns before the step is registered (``mode="async"``)."""
        return self.options.mode == "async"

    # -- construction ------------------------------------------------------------------------

    def _setup(
        self,
        scheduler_file: str,
        arrays: dict[str, ArraySpec],
        problem: str | None,
    ) -> None:
        problem = problem or _check_arrays(arrays)
        everyone = self.comm.allgather((problem, sorted(arrays)))
        self._raise_first(
            [p for p, _ in everyone],
            extra=_names_disagree([names for _, names in everyone]),
        )
        # ArraySpec objects travel as they are: their dtype is converted once, in ArraySpec
        all_specs = self.comm.allgather(arrays)
        self.decompositions: dict[str, Decomposition] = {}
        for name in sorted(arrays):
            specs = [specs[name] for specs in all_specs]
            self.decompositions[name] = Decomposition.from_specs(name, specs)
        self.specs = arrays
        self._pool = self._loop.run(_open_pool())
        if needs_hosts(self.options.placement):
            self._hosts = self.comm.allgather(this_host())
        if self.asynchronous:
            if self.rank == 0:  # the other ranks learn the outcome through the exchanges
                self._early = EarlyRegistration(self.comm.Get_size(), self._queue_now)
                self._background.append(self._spawn(self._connect_in_background(scheduler_file)))
            return
        connection = self._on_root(lambda: self._loop.run(self._connect(scheduler_file)))
        failure = self._connected(connection)
        if failure:
            raise BridgeError(failure)
        self._deliver_fields(self._on_root(self._root_fields))  # contracts from the first step

    def _connected(self, connection: Connection) -> str | None:
        """Take in rank 0's connection (every rank): the run, the workers, the placement.

        Returns the placement's problem, the same on every rank, if any.
        """
        self.scheduler_address = connection.address
        self.workers = list(connection.workers)
        self.run = connection.run
        try:  # the same outcome on every rank: all compute the whole placement
            self._placements = {
                name: place(self.options.placement, dec, self.workers, self._hosts)
                for name, dec in self.decompositions.items()
            }
        except ValueError as exc:
            return str(exc)
        self.worker_of = {name: ranks[self.rank] for name, ranks in self._placements.items()}
        if connection.notices is not None:
            self._notices = (connection.notices, connection.token)
        if self.rank == 0:
            logger.info(
                "deisa bridge: run %s, %d ranks, %d workers, arrays %s, placement %s, "
                "buffer_nb %s, mode %s",
                self.run,
                self.comm.Get_size(),
                len(self.workers),
                sorted(self.decompositions),
                self.options.placement,
                self.options.buffer_nb,
                self.options.mode,
            )
            if self.asynchronous:
                self._register_queue = asyncio.Queue()
                self._background.append(self._spawn(self._registrar()))
                if self._early is not None:
                    self._loop.loop.call_soon_threadsafe(self._early.activate)
            self._background.append(  # a contract set during the run (deisa.contract)
                self._spawn(
                    self._contracts.watch(
                        self._rpc(self._address).deisa_watch_contracts,
                        sorted(self.decompositions),
                        self._progress.set,
                    )
                )
            )
        return None

    async def _connect(self, scheduler_file: str) -> Connection:
        """Rank 0: find the scheduler, install the extension, wait for workers, open arrays."""
        connect_timeout = self.options.connect_timeout
        min_workers = self.options.min_workers
        address = await _in_thread(read_scheduler_address, scheduler_file, connect_timeout)
        try:
            await asyncio.wait_for(self._install(address), connect_timeout)
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
            workers = await asyncio.wait_for(
                self._wait_workers(address, min_workers), connect_timeout
            )
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise BridgeError(
                f"fewer than min_workers={min_workers} Dask worker(s) connected to the "
                f"scheduler at {address} within connect_timeout={connect_timeout:g} s"
            ) from exc
        run = uuid.uuid4().hex[:8]
        for name, dec in self.decompositions.items():
            reply = await asyncio.wait_for(
                self._rpc(address).deisa_open(
                    name=name,
                    run=run,
                    meta=_meta(dec, run),
                    buffer_nb=self.options.buffer_nb,
                    on_full=self.options.on_full,
                ),
                connect_timeout,
            )
            if reply["status"] != "OK":
                raise BridgeError(reply["message"])
            self._contracts.served(name, reply.get("contract"))  # in force from the first step
        if self._early is None:
            return Connection(address, run, tuple(workers))
        try:
            notices = await self._early.listen(address)
        except OSError as exc:  # registration at the next publish, as without notices
            logger.warning("deisa bridge: no listener for early registration: %s", exc)
            notices = None
        return Connection(address, run, tuple(workers), notices, self._early.token)

    async def _connect_in_background(self, scheduler_file: str) -> None:
        try:
            self._root_connection = await self._connect(scheduler_file)
        except Exception as exc:
            logger.error("deisa bridge: connecting failed: %s", exc)
            self._root_connect_error = f"{type(exc).__name__}: {exc}"
        finally:
            self._progress.set()

    def _spawn(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop.loop)

    # the options most read from a Bridge, as attributes (read-only)
    @property
    def placement(self) -> str:
        """The placement policy, ``options.placement``."""
        return self.options.placement

    @property
    def buffer_nb(self) -> int | None:
        """Steps in flight per array at most, ``options.buffer_nb``; ``None``: unbounded."""
        return self.options.buffer_nb

    @property
    def timeout(self) -> float | None:
        """Flow-control timeout in seconds, ``options.timeout``; ``None``: forever."""
        return self.options.timeout

    @property
    def on_full(self) -> str:
        """The flow-control policy, ``options.on_full``."""
        return self.options.on_full

    @property
    def _rpc(self) -> ConnectionPool:
        if self._pool is None:
            raise BridgeError("the Bridge is closed")
        return self._pool

    @property
    def _address(self) -> str:
        if self.scheduler_address is None:
            raise BridgeError("the Bridge is not connected to a scheduler yet")
        return self.scheduler_address

    async def _install(self, address: str) -> None:
        await self._rpc(address).register_scheduler_plugin(
            plugin=dumps(StreamExtension()), name=PLUGIN_NAME, idempotent=True
        )

    async def _wait_workers(self, address: str, min_workers: int) -> list[str]:
        scheduler = self._rpc(address)
        while True:
            workers = await scheduler.deisa_workers()
            if len(workers) >= min_workers:
                return [address for address, _ in workers]
            await _sleep(0.1)

    # -- collective helpers ------------------------------------------------------------------

    def _on_root(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on rank 0 and broadcast its result, or its error to raise on every rank."""
        outcome: tuple[bool, Any] = (True, None)
        if self.rank == 0:
            try:
                outcome = (True, fn())
            except Exception as exc:
                logger.exception("deisa bridge: rank 0 failed")
                outcome = (False, f"{type(exc).__name__}: {exc}")
        ok, value = self.comm.bcast(outcome, root=0)
        if not ok:
            raise BridgeError(value)
        return value

    @staticmethod
    def _raise_first(problems: list[str | None], extra: str | None = None) -> None:
        for rank, problem in enumerate(problems):
            if problem:
                raise BridgeError(f"rank {rank}: {problem}")
        if extra:
            raise BridgeError(extra)

    def flush(self) -> None:
        """Return once every step published so far is registered on the scheduler; collective.

        ``mode="async"``: waits for the background transfers and registrations (flow-control
        waits included), and raises their failure on every rank. ``mode="sync"``: nothing to
        wait for. Use it where the analytics must see the steps before the simulation goes on
        (e.g. before waiting for an answer of the analytics); :meth:`close` flushes too.

        Raises
        ------
        BridgeError
            On every rank, naming the step, for a failure in the background.
        """
        if self._closed:
            raise BridgeError("flush() after close()")
        if self._raised is not None:
            raise BridgeError(f"flush() after a failure of the Bridge: {self._raised}")
        if self.asynchronous:
            self._wait_until(lambda: self._ledger.flushed)

    def _connected_now(self) -> bool:
        """Collective: whether every rank knows the connection (always in ``mode="sync"``).

        ``mode="async"``: one exchange (which raises a background failure, the connection's
        included, on every rank), then the same answer on every rank, without waiting for the
        connection. For callers that need ``scheduler_address`` on rank 0 (e.g. :meth:`get`).
        """
        if not self.asynchronous:
            return True
        exchanged = self._exchange()
        self._raise_failure()
        if exchanged.problem:
            raise BridgeError(exchanged.problem)
        return self._ledger.connection is not None

    def _add_exchange_field(
        self, name: str, provide: Callable[[], Any] | None, receive: Callable[[Any], None]
    ) -> None:
        """Let rank 0 pass a named value to every rank at a step boundary.

        At each exchange (every :meth:`publish`, and the waits of :meth:`publish` and
        :meth:`close`), rank 0 calls ``provide()`` on its main thread; a value other than
        ``None`` is carried to every rank, which calls ``receive(value)`` on its main thread
        right after the exchange, at the same call on every rank. In ``mode="sync"`` the value
        rides on the broadcast that ends each :meth:`publish`. For steering values and
        contracts (rank 0 caches what the scheduler told it; the exchange spreads it).
        """
        self._fields[name] = (provide, receive)

    def _root_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for name, (provide, _) in self._fields.items():
            value = provide() if provide is not None else None
            if value is not None:
                fields[name] = value
        return fields

    def _deliver_fields(self, fields: Mapping[str, Any]) -> None:
        for name, value in fields.items():
            if name in self._fields:
                self._fields[name][1](value)

    # -- publishing --------------------------------------------------------------------------

    def publish(self, name: str, block: np.ndarray, step: int) -> None:
        """Publish this rank's ``block`` of array ``name`` at ``step``; collective.

        ``mode="async"`` (default): returns once ``block`` is copied into a buffer the Bridge
        owns (the caller may overwrite ``block`` right away); the transfer to the worker and
        the step's registration on the scheduler proceed in the background. Waits while this
        rank has ``max_in_flight`` blocks of ``name`` not yet registered (their transfer, or
        flow control: ``buffer_nb`` steps waiting for the analytics). A failure in the
        background is raised by the next ``publish`` (or :meth:`close`) on every rank.

        ``mode="sync"``: returns once the bytes are on the worker and the step is queued for
        the analytics; blocks while ``buffer_nb`` steps of ``name`` are waiting for the
        analytics.

        A step index published again (or after a later one) does what a file's slice would:
        if the analytics has not taken that step, nor a later one, the new data replaces the
        earlier publication (whose blocks are released) or takes its place in step order;
        otherwise the new publication is dropped, with a warning naming the step, and
        ``publish`` returns normally. The analytics always receives steps in increasing order.

        Parameters
        ----------
        name
            One of the arrays given at construction.
        block
            This rank's block, of the shape and dtype declared; a strided view (ghost cells
            excluded) is fine.
        step
            Time step (non-negative), normally increasing from one call to the next for a
            given array; see above for a step published again.

        Raises
        ------
        BridgeError
            On every rank, naming the rank at fault, if any rank's block is wrong; naming the
            step, if a worker is unreachable, the scheduler failed, or flow control timed out
            (in ``mode="async"``, for this or an earlier step); or if the connection failed.
        """
        if self._closed:
            raise BridgeError("publish() after close()")
        if self._raised is not None:
            raise BridgeError(f"publish() after a failure of the Bridge: {self._raised}")
        t0 = time.perf_counter()
        problem = self._check_block(name, block, step)
        revision = 0
        if isinstance(step, (int, np.integer)):  # counted on every rank, whatever happens next
            revision = self._revisions.get((name, int(step)), 0)
            self._revisions[name, int(step)] = revision + 1
        if self.asynchronous:
            self._publish_async(name, block, step, revision, problem, t0)
        else:
            self._publish_sync(name, block, step, revision, problem, t0)

    def _publish_sync(
        self, name: str, block: np.ndarray, step: int, revision: int, problem: str | None, t0: float
    ) -> None:
        reply: tuple[Any, str, int] | str | None
        plan = None if problem else self._plan(name, step)
        if problem:
            reply = problem
        elif plan is not None and not plan.sends(self.rank):
            reply = None  # not wanted by the contract in force (deisa.contract)
        else:
            assert plan is not None
            key = (
                step_key_name(self.run or "", name, step, revision),
                *plan.key_index(self.decompositions[name].block_index[self.rank]),
            )
            worker = self.worker_of[name]
            try:
                nbytes = self._loop.run(
                    _dask_internals.send_blocks_to_worker(self._rpc, worker, {key: block})
                )
                reply = (key, worker, int(nbytes[key]))
            except Exception as exc:
                reply = f"sending step {step} of {name!r} to worker {worker} failed: {exc!r}"
        t1 = time.perf_counter()
        replies = self.comm.gather((name, step, reply), root=0)

        def queue_step() -> tuple[str, dict[str, Any]]:
            self._raise_first([_reply_problem(r, name, step) for r in replies])
            assert plan is not None
            if not plan.send:  # no rank sent anything: nothing to register
                return "skipped", self._root_fields()
            outcome = self._loop.run(
                self._rpc(self._address).deisa_publish(
                    name=name,
                    run=self.run,
                    step=step,
                    blocks=[r[2] for r in replies if r[2] is not None],
                    timeout=self.options.timeout,
                    contract=plan.wire(),
                )
            )
            if outcome["status"] == "dropped":  # a step the analytics has passed: no failure
                logger.warning("deisa bridge: %s", outcome["message"])
                return "dropped", self._root_fields()
            if outcome["status"] != "OK":
                raise BridgeError(outcome["message"])
            return ("replaced" if outcome.get("replaced") else "queued"), self._root_fields()

        placed, fields = self._on_root(queue_step)
        if placed == "queued":
            self._nsteps[name] = self._nsteps.get(name, 0) + 1
        self._deliver_fields(fields)
        t2 = time.perf_counter()
        nbytes_sent = 0 if reply is None or isinstance(reply, str) else reply[2]
        self.timings.append(PublishTiming(name, step, nbytes_sent, t1 - t0, t2 - t1))
        logger.debug(
            "deisa bridge: %s step %d: send %.4f s, sync %.4f s", name, step, t1 - t0, t2 - t1
        )

    def _publish_async(
        self, name: str, block: np.ndarray, step: int, revision: int, problem: str | None, t0: float
    ) -> None:
        exchanged = self._exchange(call=(name, step), problem=problem)
        self._raise_failure()
        if exchanged.problem:
            raise BridgeError(exchanged.problem)
        t1 = time.perf_counter()
        plan = self._plan(name, int(step))
        if not plan.send:  # not wanted by the contract in force: the exchange was all
            self.timings.append(PublishTiming(name, int(step), 0, 0.0, t1 - t0, mode="async"))
            return
        limit = self.options.max_in_flight
        self._wait_until(lambda: self._ledger.in_flight(name) < limit)
        t2 = time.perf_counter()
        entry = self._ledger.add(name, int(step), revision, plan.ranks, plan)
        if self._early is not None:
            self._loop.loop.call_soon_threadsafe(self._early.known, entry)
        self._reclaim()
        if not plan.sends(self.rank):  # its block is outside the contract's region
            self.timings.append(
                PublishTiming(name, int(step), 0, 0.0, t2 - t0, wait_s=t2 - t1, mode="async")
            )
            return
        buffer = self._buffer(name)
        np.copyto(buffer, block)
        t3 = time.perf_counter()
        send = _Send(entry, buffer)
        self._sends[entry.seq] = send
        if self._ledger.connection is not None:
            self._start_send(send)
        in_flight = self._ledger.in_flight(name)
        self.peak_in_flight[name] = max(self.peak_in_flight.get(name, 0), in_flight)
        self.timings.append(
            PublishTiming(
                name, int(step), buffer.nbytes, t3 - t2, (t1 - t0) + (t2 - t1), t3 - t2, t2 - t1,
                "async",
            )
        )  # fmt: skip
        logger.debug(
            "deisa bridge: %s step %d: copy %.4f s, exchange %.4f s, wait %.4f s, %d in flight",
            name, step, t3 - t2, t1 - t0, t2 - t1, in_flight,
        )  # fmt: skip

    def _plan(self, name: str, step: int) -> Plan:
        """What ``step`` of ``name`` sends under the contract in force (same on every rank)."""
        dec = self.decompositions[name]
        return self._contracts.plan(name, step, dec.chunks, dec.block_index)

    def _buffer(self, name: str) -> np.ndarray:
        """A free buffer for a block of ``name`` (allocated while fewer than the bound)."""
        free = self._free.setdefault(name, [])
        if free:
            return free.pop()
        spec = self.specs[name]
        self._allocated[name] = self._allocated.get(name, 0) + 1
        self.peak_buffers[name] = max(self.peak_buffers.get(name, 0), self._allocated[name])
        return np.empty(spec.shape, dtype=spec.dtype)

    def _reclaim(self) -> None:
        """Give back the buffers of finished sends; forget the sends reported and registered."""
        registered = self._ledger.registered
        for seq, send in list(self._sends.items()):
            if send.future is None or not send.future.done():
                continue
            if send.buffer is not None:
                self._free.setdefault(send.entry.name, []).append(send.buffer)
                send.buffer = None
            if send.reported and seq < registered:
                del self._sends[seq]

    def _start_send(self, send: _Send) -> None:
        name, entry = send.entry.name, send.entry
        key = (
            step_key_name(self.run or "", name, entry.step, entry.revision),
            *_plan_of(entry).key_index(self.decompositions[name].block_index[self.rank]),
        )
        send.worker = self.worker_of[name]
        assert send.buffer is not None
        send.future = self._spawn(
            _dask_internals.send_blocks_to_worker(self._rpc, send.worker, {key: send.buffer})
        )
        send.future.add_done_callback(lambda future: self._sent(entry.seq, future))

    def _sent(self, seq: int, future: concurrent.futures.Future[Any]) -> None:
        """A send finished: wake the main thread, and tell rank 0 at once (._notices)."""
        self._progress.set()
        if future.cancelled() or future.exception() is not None:
            return  # the exchange reports the failure
        nbytes = int(next(iter(future.result().values())))
        if self._early is not None:
            self._loop.loop.call_soon_threadsafe(self._early.sent, seq, self.rank, nbytes)
        elif self._notices is not None and self._pool is not None:
            address, token = self._notices
            self._spawn(notify(self._pool, address, token, seq, self.rank, nbytes))

    def _report(self, call: tuple[Any, Any] | None, problem: str | None) -> RankReport:
        """This rank's part of the next exchange."""
        sent: list[tuple[int, int]] = []
        failed: list[tuple[int, str]] = []
        for seq, send in self._sends.items():
            if send.reported or send.future is None or not send.future.done():
                continue
            send.reported = True
            try:
                nbytes = send.future.result()
                sent.append((seq, int(next(iter(nbytes.values())))))
            except Exception as exc:
                failed.append(
                    (
                        seq,
                        f"sending step {send.entry.step} of {send.entry.name!r} to worker "
                        f"{send.worker} failed: {exc!r}",
                    )
                )
        report = RankReport(call, problem, tuple(sent), tuple(failed))
        if self.rank == 0:
            connection = None
            if self._root_connection is not None and not self._announced:
                connection, self._announced = self._root_connection, True
            report.root = RootReport(
                connection=connection,
                connect_error=self._root_connect_error,
                registered=self._registered,
                error=self._register_error,
                fields=self._root_fields(),
            )
        return report

    def _exchange(
        self, call: tuple[Any, Any] | None = None, problem: str | None = None
    ) -> Exchanged:
        """One exchange: every rank's report to every rank, and the same decisions on all."""
        reports = self.comm.allgather(self._report(call, problem))
        self.exchanges += 1
        exchanged = self._ledger.absorb(reports)
        if exchanged.connection is not None:
            failure = self._connected(exchanged.connection)
            if failure and self._ledger.failure is None:
                self._ledger.failure = failure
            if self._ledger.failure is None:
                for send in self._sends.values():
                    if send.future is None:
                        self._start_send(send)
        if self.rank == 0 and self._register_queue is not None:
            for entry, nbytes in exchanged.ready:
                self._queue_registration(entry, nbytes)
        self._reclaim()
        self._deliver_fields(exchanged.fields)
        return exchanged

    def _queue_registration(self, entry: Entry, nbytes: list[int]) -> None:
        """Rank 0, main thread: the exchange found ``entry`` sent by every rank."""
        if self._early is not None:  # unless its notices got it registered already
            self._loop.loop.call_soon_threadsafe(self._early.ready, entry, nbytes)
        else:
            self._loop.loop.call_soon_threadsafe(self._queue_now, entry, nbytes)

    def _queue_now(self, entry: Entry, nbytes: list[int]) -> None:
        """Rank 0, loop thread: hand ``entry`` (every block on its worker) to the registrar."""
        dec = self.decompositions[entry.name]
        name = step_key_name(self.run or "", entry.name, entry.step, entry.revision)
        workers = self._placements[entry.name]
        plan = _plan_of(entry)
        blocks = [
            ((name, *plan.key_index(dec.block_index[rank])), workers[rank], nbytes[rank])
            for rank in range(len(nbytes))
            if entry.senders is None or rank in entry.senders
        ]
        queue = self._register_queue
        assert queue is not None
        queue.put_nowait((entry, blocks))

    async def _registrar(self) -> None:
        """Rank 0: register the steps on the scheduler, in publication order, one at a time."""
        queue = self._register_queue
        assert queue is not None
        while (item := await queue.get()) is not None:
            entry, blocks = item
            try:
                outcome = await self._rpc(self._address).deisa_publish(
                    name=entry.name,
                    run=self.run,
                    step=entry.step,
                    blocks=blocks,
                    timeout=self.options.timeout,
                    contract=_plan_of(entry).wire(),
                )
            except Exception as exc:
                outcome = {
                    "status": "error",
                    "message": f"registering step {entry.step} of {entry.name!r} on the "
                    f"scheduler at {self.scheduler_address} failed: {type(exc).__name__}: {exc}",
                }
            if outcome["status"] == "dropped":  # a step the analytics has passed: no failure
                logger.warning("deisa bridge: %s", outcome["message"])
            elif outcome["status"] != "OK":
                logger.error("deisa bridge: %s", outcome["message"])
                self._register_error = outcome["message"]
                self._progress.set()
                return
            elif not outcome.get("replaced"):
                self._nsteps[entry.name] = self._nsteps.get(entry.name, 0) + 1
            self._registered = entry.seq + 1
            self._progress.set()

    def _wait_until(self, done: Callable[[], bool]) -> None:
        """Exchange until ``done()`` (decided from exchanged data: the same on every rank)."""
        self._raise_failure()
        rounds = 0
        while not done():
            # wake on this rank's progress (a send, rank 0's registration or connection), or
            # after a short wait growing to 50 ms: the other ranks' progress only shows up in an
            # exchange
            self._progress.wait(0.001 * 2 ** min(rounds, 5.6))  # 1 ms growing to ~50 ms
            self._progress.clear()
            exchanged = self._exchange()
            self._raise_failure()
            if exchanged.problem:
                raise BridgeError(exchanged.problem)
            rounds += 1

    def _raise_failure(self) -> None:
        failure = self._ledger.failure
        if failure is not None:
            self._raised = failure
            raise BridgeError(failure)

    def _check_block(self, name: str, block: Any, step: Any) -> str | None:
        if name not in self.decompositions:
            return f"unknown array {name!r}; this Bridge publishes {sorted(self.decompositions)}"
        if not isinstance(step, (int, np.integer)) or step < 0:
            return f"step={step!r} must be a non-negative integer"
        spec = self.specs[name]
        if not isinstance(block, np.ndarray):
            return f"block of {name!r} is a {type(block).__name__}, not a numpy array"
        if block.shape != spec.shape:
            return f"block of {name!r} has shape {block.shape}, declared {spec.shape}"
        if block.dtype != spec.dtype:
            return f"block of {name!r} has dtype {block.dtype}, declared {spec.dtype}"
        return None

    # -- steering values (deisa.analysis.steering) ----------------------------------------

    def get(self, name: str, default: Any = None) -> Any:
        """The steering value ``name`` that the analytics set, or ``default``; collective.

        Rank 0 asks the scheduler (one message) and broadcasts the answer, so every rank gets
        the same value at the same call. The latest value set wins and reading does not consume
        it (see :mod:`deisa.analysis.steering`).

        Parameters
        ----------
        name
            Name given to :meth:`deisa.Adapter.set`; the same on every rank.
        default
            Returned while the analytics has set no value (or cleared it with ``None``), and
            in ``mode="async"`` while the Bridge is still connecting in the background.

        Raises
        ------
        BridgeError
            On every rank: ranks that asked for different names, a closed Bridge, or a
            scheduler that did not answer within ``connect_timeout``.

        Examples
        --------
        >>> for step in range(nsteps):  # doctest: +SKIP
        ...     bridge.publish("gtemp", field, step)
        ...     if bridge.get("stop", False):
        ...         break
        """
        if self._closed:
            raise BridgeError(f"get({name!r}) after close()")
        if not self._connected_now():  # mode="async", still connecting: nothing set yet
            return default
        names = self.comm.gather(name, root=0)

        def ask() -> Any:
            for rank, other in enumerate(names):
                if other != name:
                    raise BridgeError(f"rank {rank} called get({other!r}), rank 0 get({name!r})")
            reply = self._loop.run(
                self._rpc(self._address).deisa_get_value(name=name),
                timeout=self.options.connect_timeout,
            )
            return decode_value(reply, default)

        return self._on_root(ask)

    # -- end of stream -----------------------------------------------------------------------

    def close(self) -> None:
        """Mark the end of every array's stream and disconnect; collective, idempotent.

        In ``mode="async"``, first waits until every step published before is registered on
        the scheduler (nothing published is lost; the end of stream comes after the last
        step), then raises, on every rank, a background failure that no :meth:`publish` has
        raised yet (after ending the streams if it can). Data already published stays on the
        workers until the analytics has taken and released it.
        """
        if self._closed:
            return
        error: BridgeError | None = None
        if self.asynchronous and self._raised is None:
            try:
                self._wait_until(lambda: self._ledger.flushed)
            except BridgeError as exc:
                error = exc
        self._closed = True
        nsteps = dict(self._nsteps)

        def end_streams() -> None:
            for name in self.decompositions:
                reply = self._loop.run(
                    self._rpc(self._address).deisa_close(
                        name=name, run=self.run, nsteps=nsteps.get(name, 0)
                    ),
                    timeout=30,
                )
                if reply["status"] != "OK":
                    raise BridgeError(reply["message"])

        try:
            # the same decision on every rank: the connection is known everywhere, or nowhere
            if not self.asynchronous or self._ledger.connection is not None:
                self._on_root(end_streams)
        except BridgeError:
            if error is None:
                raise
            logger.warning("deisa bridge: ending the streams failed too", exc_info=True)
        finally:
            self._shutdown()
        if error is not None:
            raise error

    def _shutdown(self) -> None:
        if self._register_queue is not None:
            self._loop.loop.call_soon_threadsafe(self._register_queue.put_nowait, None)
        for future in self._background:
            future.cancel()
        for send in self._sends.values():  # only after a failure: close() flushed otherwise
            if send.future is not None:
                send.future.cancel()
        if self._early is not None:
            try:
                self._loop.run(self._early.close(), timeout=10)
            except Exception:  # best effort, as below
                logger.debug("deisa bridge: closing the notice listener failed", exc_info=True)
        if self._pool is not None:
            try:
                self._loop.run(self._pool.close(), timeout=10)
            except Exception:  # closing is best effort; the process may be going down
                logger.debug("deisa bridge: closing connections failed", exc_info=True)
            self._pool = None
        self._loop.stop()

    def __enter__(self) -> Bridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _open_pool() -> ConnectionPool:
    security = Security()
    pool = ConnectionPool(limit=64, connection_args=security.get_connection_args("client"))
    await pool.start()
    return pool


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
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


def _plan_of(entry: Entry) -> Plan:
    plan: Plan = entry.plan if entry.plan is not None else FULL_PLAN
    return plan


def _meta(dec: Decomposition, run: str) -> dict[str, Any]:
    return {
        "dtype": dec.dtype.str,
        "shape": list(dec.global_shape),
        "chunks": [list(c) for c in dec.chunks],
        "run": run,
    }


def _build_options(
    options: BridgeOptions | None, kwargs: dict[str, Any]
) -> tuple[BridgeOptions, str | None]:
    """The Bridge's options, and the problem with them (raised collectively) if any."""
    if options is not None and not isinstance(options, BridgeOptions):
        raise TypeError(f"options is a {type(options).__name__}, not a BridgeOptions")
    unknown = sorted(set(kwargs) - set(BridgeOptions.names()))
    if unknown:
        raise TypeError(f"Bridge() got an unexpected keyword argument {unknown[0]!r}")
    base = options if options is not None else BridgeOptions()
    try:
        return base.replace(**kwargs), None
    except BridgeOptionError as exc:
        return base, str(exc)


def _check_arrays(arrays: dict[str, ArraySpec]) -> str | None:
    if not arrays:
        return "arrays is empty: give at least one name -> ArraySpec"
    for name, spec in arrays.items():
        if not isinstance(name, str) or not name:
            return f"array names must be non-empty strings, got {name!r}"
        if not isinstance(spec, ArraySpec):
            return f"arrays[{name!r}] is a {type(spec).__name__}, not an ArraySpec"
    return None


def _names_disagree(per_rank: list[list[str]]) -> str | None:
    for rank, names in enumerate(per_rank):
        if names != per_rank[0]:
            return (
                f"rank {rank} publishes arrays {names}, rank 0 publishes {per_rank[0]}: every "
                "rank of a Bridge's comm holds a block of each of its arrays; an array of some "
                "ranks only needs a Bridge over its own communicator (see deisa.BridgeGroup)"
            )
    return None


def _reply_problem(reply: tuple[str, int, Any], name: str, step: int) -> str | None:
    rname, rstep, payload = reply
    if (rname, rstep) != (name, step):
        return (
            f"called publish({rname!r}, step={rstep}) while rank 0 called "
            f"publish({name!r}, step={step})"
        )
    return payload if isinstance(payload, str) else None
