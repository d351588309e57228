"""The simulation side: one :class:`Bridge` per MPI rank sends its blocks to Dask workers.

Per step and array, :meth:`Bridge.publish`:

1. sends the rank's block straight to its worker (chosen once by the placement policy) under an
   explicit key ``("deisa-<run>-<array>-<step>", i, j)`` (``-r<N>`` appended when the step is
   published again); the scheduler is not involved;
2. gathers ``(key, worker, nbytes)`` of every rank on rank 0 (one MPI gather);
3. rank 0 registers all the step's keys and queues the step on the scheduler in one
   ``deisa_publish`` call, which waits while ``buffer_nb`` steps are queued (flow control);
4. rank 0 broadcasts the outcome, so every rank returns, or raises the same error, together.

So the scheduler handles one message per step and array whatever the number of ranks, and only
rank 0 ever talks to it. See ``docs/architecture.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from distributed import Security
from distributed.core import ConnectionPool
from distributed.protocol.pickle import dumps

from . import _dask_internals
from ._loop import LoopThread
from .decomposition import ArraySpec, Decomposition
from .extension import PLUGIN_NAME, StreamExtension
from .options import BridgeOptionError, BridgeOptions
from .placement import needs_hosts, place, this_host
from .scheduler_file import read_scheduler_address

logger = logging.getLogger(__name__)

T = TypeVar("T")


class BridgeError(RuntimeError):
    """A collective Bridge operation failed; raised on every rank with the same message."""


@dataclass(frozen=True)
class PublishTiming:
    """Cost of one :meth:`Bridge.publish` on this rank.

    ``send_s`` is the transfer of the block to its worker; ``sync_s`` the MPI gather, the
    scheduler call of rank 0 (including any flow-control wait) and the broadcast.
    """

    name: str
    step: int
    nbytes: int
    send_s: float
    sync_s: float


def step_key_name(run: str, name: str, step: int, revision: int = 0) -> str:
    """The dask name of one step of an array; block keys are ``(name, i, j, ...)``.

    ``revision`` counts the earlier publications of the same step in the run (a step
    published again gets new keys: the earlier ones may still be held); 0 has no suffix.
    """
    suffix = f"-r{revision}" if revision else ""
    return f"deisa-{run}-{name}-{step}{suffix}"


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
        mpi4py communicator; ``MPI.COMM_WORLD`` by default.
    options
        A :class:`~deisa.BridgeOptions`; its defaults if ``None``.
    **kwargs
        Any option of :class:`~deisa.BridgeOptions` by name (``placement``, ``buffer_nb``,
        ``timeout``, ``connect_timeout``, ``min_workers``, ``on_full``), overriding ``options``.
        In short: ``placement`` is ``"round_robin"``, ``"locality"`` or ``"node_local"``
        (every rank must give the same); ``buffer_nb`` steps of an array at most wait on the
        scheduler (``None``: unbounded; ``0`` is refused);
        :meth:`publish` blocks up to ``timeout`` seconds on flow control (``None``: forever),
        or with ``on_full="drop_oldest"`` releases the oldest waiting step instead;
        ``connect_timeout`` bounds the wait for the scheduler file, the scheduler and
        ``min_workers`` workers.

    Attributes
    ----------
    options : BridgeOptions
        The checked options; ``placement``, ``buffer_nb``, ``timeout`` and ``on_full`` are
        also attributes of the Bridge.

    Raises
    ------
    BridgeError
        On every rank, naming the rank at fault, for a bad option value, bad ``arrays``, blocks
        that do not tile the arrays, or a scheduler that did not answer within
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
        self._nsteps: dict[str, int] = {}  # distinct steps queued per array, for close()
        self._loop = LoopThread(f"deisa-bridge-{self.rank}")
        self._pool: ConnectionPool | None = None
        try:
            self._setup(scheduler_file, dict(arrays), problem)
        except BaseException:
            self._shutdown()
            raise

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
        connect_timeout = self.options.connect_timeout
        min_workers = self.options.min_workers
        # ArraySpec objects travel as they are: their dtype is converted once, in ArraySpec
        all_specs = self.comm.allgather(arrays)
        self.decompositions: dict[str, Decomposition] = {}
        for name in sorted(arrays):
            specs = [specs[name] for specs in all_specs]
            self.decompositions[name] = Decomposition.from_specs(name, specs)
        self.specs = arrays
        self._pool = self._loop.run(_open_pool())

        def connect() -> dict[str, Any]:
            address = read_scheduler_address(scheduler_file, wait=connect_timeout)
            try:
                self._loop.run(self._install(address), timeout=connect_timeout)
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
                workers = self._loop.run(
                    self._wait_workers(address, min_workers), timeout=connect_timeout
                )
            except (asyncio.TimeoutError, TimeoutError) as exc:
                raise BridgeError(
                    f"fewer than min_workers={min_workers} Dask worker(s) connected to the "
                    f"scheduler at {address} within connect_timeout={connect_timeout:g} s"
                ) from exc
            run = uuid.uuid4().hex[:8]
            for name, dec in self.decompositions.items():
                reply = self._loop.run(
                    self._rpc(address).deisa_open(
                        name=name,
                        run=run,
                        meta=_meta(dec, run),
                        buffer_nb=self.options.buffer_nb,
                        on_full=self.options.on_full,
                    ),
                    timeout=connect_timeout,
                )
                if reply["status"] != "OK":
                    raise BridgeError(reply["message"])
            return {"address": address, "workers": workers, "run": run}

        info = self._on_root(connect)
        self.scheduler_address: str = info["address"]
        self.workers: list[str] = info["workers"]
        self.run: str = info["run"]
        placement = self.options.placement
        hosts = self.comm.allgather(this_host()) if needs_hosts(placement) else None
        try:  # the same outcome on every rank: all compute the whole placement
            self.worker_of = {
                name: place(placement, dec, self.workers, hosts)[self.rank]
                for name, dec in self.decompositions.items()
            }
        except ValueError as exc:
            raise BridgeError(str(exc)) from None
        if self.rank == 0:
            logger.info(
                "deisa bridge: run %s, %d ranks, %d workers, arrays %s, placement %s, buffer_nb %s",
                self.run,
                self.comm.Get_size(),
                len(self.workers),
                sorted(self.decompositions),
                self.options.placement,
                self.options.buffer_nb,
            )

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

    # -- publishing --------------------------------------------------------------------------

    def publish(self, name: str, block: np.ndarray, step: int) -> None:
        """Send this rank's ``block`` of array ``name`` at ``step``; collective.

        Returns once the bytes are on the worker and the step is queued for the analytics, so
        the caller may overwrite ``block`` right away. Blocks while ``buffer_nb`` steps of
        ``name`` are waiting for the analytics.

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
            On every rank, naming the rank at fault, if any rank's block is wrong, a worker is
            unreachable, or flow control timed out.
        """
        if self._closed:
            raise BridgeError("publish() after close()")
        t0 = time.perf_counter()
        problem = self._check_block(name, block, step)
        revision = 0
        if isinstance(step, (int, np.integer)):  # counted on every rank, whatever happens next
            revision = self._revisions.get((name, int(step)), 0)
            self._revisions[name, int(step)] = revision + 1
        reply: tuple[Any, str, int] | str
        if problem:
            reply = problem
        else:
            key = (
                step_key_name(self.run, name, step, revision),
                *self.decompositions[name].block_index[self.rank],
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

        def queue_step() -> str:
            self._raise_first([_reply_problem(r, name, step) for r in replies])
            outcome = self._loop.run(
                self._rpc(self.scheduler_address).deisa_publish(
                    name=name,
                    run=self.run,
                    step=step,
                    blocks=[r[2] for r in replies],
                    timeout=self.options.timeout,
                )
            )
            if outcome["status"] == "dropped":  # a step the analytics has passed: no failure
                logger.warning("deisa bridge: %s", outcome["message"])
                return "dropped"
            if outcome["status"] != "OK":
                raise BridgeError(outcome["message"])
            return "replaced" if outcome.get("replaced") else "queued"

        placed = self._on_root(queue_step)
        if placed == "queued":
            self._nsteps[name] = self._nsteps.get(name, 0) + 1
        t2 = time.perf_counter()
        nbytes_sent = 0 if isinstance(reply, str) else reply[2]
        self.timings.append(PublishTiming(name, step, nbytes_sent, t1 - t0, t2 - t1))
        logger.debug(
            "deisa bridge: %s step %d: send %.4f s, sync %.4f s", name, step, t1 - t0, t2 - t1
        )

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

    # -- end of stream -----------------------------------------------------------------------

    def close(self) -> None:
        """Mark the end of every array's stream and disconnect; collective, idempotent.

        Data already published stays on the workers until the analytics has taken and
        released it.
        """
        if self._closed:
            return
        self._closed = True

        def end_streams() -> None:
            for name in self.decompositions:
                nsteps = self._nsteps.get(name, 0)
                reply = self._loop.run(
                    self._rpc(self.scheduler_address).deisa_close(
                        name=name, run=self.run, nsteps=nsteps
                    ),
                    timeout=30,
                )
                if reply["status"] != "OK":
                    raise BridgeError(reply["message"])

        try:
            self._on_root(end_streams)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
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
            return f"rank {rank} publishes arrays {names}, rank 0 publishes {per_rank[0]}"
    return None


def _reply_problem(reply: tuple[str, int, Any], name: str, step: int) -> str | None:
    rname, rstep, payload = reply
    if (rname, rstep) != (name, step):
        return (
            f"called publish({rname!r}, step={rstep}) while rank 0 called "
            f"publish({name!r}, step={step})"
        )
    return payload if isinstance(payload, str) else None
