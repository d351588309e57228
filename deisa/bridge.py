"""The simulation side: one :class:`Bridge` per MPI rank sends its blocks to Dask workers.

Per step and array, :meth:`Bridge.publish`:

1. sends the rank's block straight to its worker (chosen once by the placement policy) under an
   explicit key ``("deisa-<run>-<array>-<step>", i, j)``; the scheduler is not involved;
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
from .placement import get_placement
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


def step_key_name(run: str, name: str, step: int) -> str:
    """The dask name of one step of an array; block keys are ``(name, i, j, ...)``."""
    return f"deisa-{run}-{name}-{step}"


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
    placement
        ``"round_robin"`` (rank ``r`` sends to worker ``r % W``) or ``"locality"`` (the blocks
        of a row band share a worker). See :mod:`deisa.placement`.
    buffer_nb
        At most this many steps of an array wait on the scheduler for the analytics; the next
        :meth:`publish` blocks until the analytics takes one. ``None``: unbounded.
    timeout
        Seconds a :meth:`publish` may block on flow control before raising
        :class:`BridgeError` (the step is then dropped). ``None``: wait forever.
    connect_timeout
        Seconds to wait for the scheduler file, the scheduler and at least ``min_workers``;
        past it, :class:`BridgeError` names the scheduler address that did not answer.
    min_workers
        Workers that must be connected before the placement is fixed.
    on_full
        What :meth:`publish` does when ``buffer_nb`` steps are waiting: ``"block"`` (wait up to
        ``timeout``, then raise) or ``"drop_oldest"`` (release the oldest waiting step, log a
        warning naming it, and queue the new one; needs ``buffer_nb``). See
        ``docs/reliability.md``.

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
        placement: str = "round_robin",
        buffer_nb: int | None = None,
        timeout: float | None = 600.0,
        connect_timeout: float = 30.0,
        min_workers: int = 1,
        on_full: str = "block",
    ) -> None:
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.placement = placement
        self.buffer_nb = buffer_nb
        self.timeout = timeout
        self.on_full = on_full
        self.timings: list[PublishTiming] = []
        self._closed = False
        self._last_step: dict[str, int] = {}
        self._loop = LoopThread(f"deisa-bridge-{self.rank}")
        self._pool: ConnectionPool | None = None
        try:
            self._setup(scheduler_file, dict(arrays), connect_timeout, min_workers)
        except BaseException:
            self._shutdown()
            raise

    # -- construction ------------------------------------------------------------------------

    def _setup(
        self,
        scheduler_file: str,
        arrays: dict[str, ArraySpec],
        connect_timeout: float,
        min_workers: int,
    ) -> None:
        problem = _check_arguments(
            arrays,
            self.placement,
            self.buffer_nb,
            on_full=self.on_full,
            timeout=self.timeout,
            connect_timeout=connect_timeout,
            min_workers=min_workers,
        )
        everyone = self.comm.allgather((problem, sorted(arrays)))
        self._raise_first(
            [p for p, _ in everyone],
            extra=_names_disagree([names for _, names in everyone]),
        )
        all_specs = self.comm.allgather({n: s.as_message() for n, s in arrays.items()})
        self.decompositions: dict[str, Decomposition] = {}
        for name in sorted(arrays):
            specs = [ArraySpec(**specs[name]) for specs in all_specs]
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
                        buffer_nb=self.buffer_nb,
                        on_full=self.on_full,
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
        policy = get_placement(self.placement)
        self.worker_of = {
            name: policy(dec, self.workers)[self.rank] for name, dec in self.decompositions.items()
        }
        if self.rank == 0:
            logger.info(
                "deisa bridge: run %s, %d ranks, %d workers, arrays %s, placement %s, buffer_nb %s",
                self.run,
                self.comm.Get_size(),
                len(self.workers),
                sorted(self.decompositions),
                self.placement,
                self.buffer_nb,
            )

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

        Parameters
        ----------
        name
            One of the arrays given at construction.
        block
            This rank's block, of the shape and dtype declared; a strided view (ghost cells
            excluded) is fine.
        step
            Time step, increasing from one call to the next for a given array.

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
        reply: tuple[Any, str, int] | str
        if problem:
            reply = problem
        else:
            key = (
                step_key_name(self.run, name, step),
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

        def queue_step() -> None:
            self._raise_first([_reply_problem(r, name, step) for r in replies])
            outcome = self._loop.run(
                self._rpc(self.scheduler_address).deisa_publish(
                    name=name,
                    run=self.run,
                    step=step,
                    blocks=[r[2] for r in replies],
                    timeout=self.timeout,
                )
            )
            if outcome["status"] != "OK":
                raise BridgeError(outcome["message"])

        self._on_root(queue_step)
        self._last_step[name] = step
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
        last = self._last_step.get(name)
        if last is not None and step <= last:
            return f"step {step} of {name!r} comes after step {last}; steps must increase"
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
                nsteps = sum(1 for t in self.timings if t.name == name)
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


ON_FULL = ("block", "drop_oldest")


def _check_arguments(
    arrays: dict[str, ArraySpec],
    placement: str,
    buffer_nb: int | None,
    *,
    on_full: str = "block",
    timeout: float | None = None,
    connect_timeout: float = 30.0,
    min_workers: int = 1,
) -> str | None:
    if not arrays:
        return "arrays is empty: give at least one name -> ArraySpec"
    for name, spec in arrays.items():
        if not isinstance(name, str) or not name:
            return f"array names must be non-empty strings, got {name!r}"
        if not isinstance(spec, ArraySpec):
            return f"arrays[{name!r}] is a {type(spec).__name__}, not an ArraySpec"
    try:
        get_placement(placement)
    except ValueError as exc:
        return str(exc)
    if buffer_nb is not None and (
        isinstance(buffer_nb, bool) or not isinstance(buffer_nb, int) or buffer_nb < 1
    ):
        return f"buffer_nb={buffer_nb!r} must be a positive integer or None"
    if on_full not in ON_FULL:
        return f"on_full={on_full!r} is not a flow-control policy; choose one of {list(ON_FULL)}"
    if on_full == "drop_oldest" and buffer_nb is None:
        return "on_full='drop_oldest' needs a buffer_nb (the number of steps kept)"
    if timeout is not None and not _positive_number(timeout):
        return f"timeout={timeout!r} must be a positive number of seconds or None"
    if not _positive_number(connect_timeout):
        return f"connect_timeout={connect_timeout!r} must be a positive number of seconds"
    if isinstance(min_workers, bool) or not isinstance(min_workers, int) or min_workers < 1:
        return f"min_workers={min_workers!r} must be a positive integer"
    return None


def _positive_number(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value > 0
        and value == value  # not NaN
    )


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
