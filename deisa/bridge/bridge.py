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
owns and posts one small non-blocking ``allgather`` (the *exchange*, :mod:`._exchange`,
:mod:`._publisher`), which the next call completes: steps 1 and 2 run in the background, on
the Bridge's event-loop thread, which never calls MPI. Each exchange carries which sends
finished, and rank 0's news (the connection, the steps registered, a failure), so every rank
decides the same thing at the same call: wait for room (at most ``max_in_flight`` blocks per
array in flight), or raise a background failure naming the step.
The connection to the scheduler is made in the background too, by rank 0.
In ``mode="sync"`` the ranks gather their keys on rank 0 and wait for its ``deisa_publish``
(then a broadcast of the outcome) before returning.

So the scheduler handles one message per step and array whatever the number of ranks, and only
rank 0 ever talks to it. See ``docs/architecture.md``.

Runs in a rank: public methods on its main thread (the only one calling MPI), what they hand over
on the event-loop thread (:mod:`._loop`). Imports the Bridge's modules, wire and contract.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..wire import decode_value
from ._async import AsyncPublisher
from ._attrs import AttrsCalls
from ._closing import close_bridge, shut_down
from ._collective import BridgeError, build_options, check_publish, on_root
from ._losses import Losses
from ._opening import connect_now, declare_arrays, declare_more, take_connection
from ._parts import BridgeParts
from ._publisher import Connection, PublishTiming
from ._sync import SyncPublisher
from .arrays.decomposition import ArraySpec
from .link.scheduler import SchedulerLink, SchedulerLost
from .options import BridgeOptions
from .scheduler_file import SchedulerFileError, resolve_scheduler_file
from .step_scope import StepScope

__all__ = ["Bridge", "BridgeError", "PublishTiming"]

logger = logging.getLogger(__name__)


def _option_attribute(name: str, doc: str) -> Any:
    """A read-only attribute of the Bridge that is its option ``name``."""
    return property(lambda bridge: getattr(bridge.options, name), doc=f"{doc} ``options.{name}``.")


class Bridge(AttrsCalls):
    """Publish the blocks of an MPI simulation to a Dask cluster, one Bridge per rank.

    Construction, :meth:`publish` and :meth:`close` are collective over ``comm``: every rank
    calls them in the same order, with the same array name and step.

    Parameters
    ----------
    scheduler_file
        Path of the JSON file written by ``dask scheduler --scheduler-file``. Waited for up to
        ``connect_timeout`` seconds. ``None``: the environment variable
        ``DEISA_SCHEDULER_FILE`` (which ``deisa-run`` sets) names it; with neither, a
        :class:`BridgeError` names both.
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
        ``max_in_flight``, ``on_worker_loss``, ``on_scheduler_loss``), overriding ``options``.
        In short: ``placement`` is ``"round_robin"``, ``"locality"`` or ``"node_local"``
        (every rank must give the same); ``buffer_nb`` steps of an array at most wait on the
        scheduler (``None``: unbounded; ``0`` is refused); a step's registration waits up to
        ``timeout`` seconds on flow control (``None``: forever), or with
        ``on_full="drop_oldest"`` releases the oldest waiting step instead;
        ``connect_timeout`` bounds the wait for the scheduler file, the scheduler and
        ``min_workers`` workers. ``mode="async"`` (default): :meth:`publish` returns once the
        block is copied, with at most ``max_in_flight`` blocks per array in flight;
        ``mode="sync"``: once the step is registered. A worker that leaves is survived
        (``on_worker_loss="continue"``): the blocks go to the workers left, and a step whose
        blocks died with it is reported lost to the analytics; a scheduler that stops
        answering for ``connect_timeout`` seconds detaches the Bridge
        (``on_scheduler_loss="continue"``: :meth:`publish` sends nothing from then on). See
        ``docs/reliability.md``.

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
        ``mode="async"``: exchanges (small ``allgather`` calls) completed so far.
    workers : list of str
        The workers blocks are placed on now (the same on every rank; changes when a worker
        joins or leaves).
    detached : str or None
        Why the Bridge stopped sending (the scheduler lost, ``on_scheduler_loss="continue"``),
        the same on every rank; ``None`` while it sends.

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
        scheduler_file: str | None = None,
        arrays: Mapping[str, ArraySpec] | None = None,
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
        self.options, problem = build_options(options, kwargs)
        self._opened = time.perf_counter()  # the simulation's time with the Bridge, at close
        self._closed = False
        # what the Bridge's parts share (the loop thread among it), and its calls to the scheduler
        self._parts = parts = BridgeParts.new(comm, self.options)
        self._link = SchedulerLink()  # opened once the arrays are checked
        self._async = AsyncPublisher(parts, self._link, self._connected)
        self._sync = SyncPublisher(parts, self._link)
        self._losses = Losses(parts, self._async)
        # rank 0 caches what the scheduler tells it; the exchange spreads it (ExchangeFields.add)
        root, book, contracts = self.rank == 0, parts.worker_book, parts.contracts
        fields = parts.fields
        fields.add("contracts", contracts.to_spread if root else None, contracts.receive)
        fields.add("workers", book.to_spread if root else None, self._losses.use_workers)
        fields.add(
            "scheduler_lost", book.scheduler_lost if root else None, self._losses.lose_scheduler
        )
        if arrays is None:
            raise TypeError("Bridge() missing the argument 'arrays'")
        try:
            path = resolve_scheduler_file(scheduler_file)
        except SchedulerFileError as exc:  # raised at the first collective, on every rank
            path, problem = "", problem or str(exc)
        try:
            self._setup(path, dict(arrays), problem)
        except BaseException:
            self._shutdown()
            raise

    @property
    def asynchronous(self) -> bool:
        """Whether :meth:`publish` returns before the step is registered (``mode="async"``)."""
        return self._parts.asynchronous

    # -- construction ------------------------------------------------------------------------

    def _setup(
        self,
        scheduler_file: str,
        arrays: dict[str, ArraySpec],
        problem: str | None,
    ) -> None:
        parts = self._parts
        declare_arrays(parts, arrays, problem)
        self._link.open()
        if self.asynchronous:
            if self.rank == 0:  # the other ranks learn the outcome through the exchanges
                parts.loop.keep(self._async.registrar.connect(scheduler_file))
            return
        failure = self._connected(connect_now(parts, self._link, scheduler_file))
        if failure:
            raise BridgeError(failure)
        parts.fields.deliver(on_root(self.comm, parts.fields.collect))  # contracts, first step

    def _connected(self, connection: Connection) -> str | None:
        """Take in rank 0's connection (every rank); the placement's problem, if any."""
        return take_connection(self._parts, self._link, self._async, connection)

    # the options and the state most read from a Bridge, as attributes (read-only)
    placement = _option_attribute("placement", "The placement policy.")
    buffer_nb = _option_attribute("buffer_nb", "Steps in flight per array; None: unbounded.")
    timeout = _option_attribute("timeout", "Flow-control timeout in seconds; None: forever.")
    on_full = _option_attribute("on_full", "The flow-control policy.")

    @property
    def shm_pool(self) -> dict[str, Any]:
        """This rank's warm pool of shared memory (:mod:`deisa.bridge.shm.pool`): budget and
        peak MiB, pages, why it shrank (or ``None``), ``"fallbacks"`` (blocks by TCP to a
        worker of this node, no slot free), ``"blocks by shared memory"``/``"tcp"`` so far."""
        return self._parts.transport.pool_summary()

    @property
    def transport(self) -> str:
        """How this rank's blocks went so far: ``"shared memory"``, ``"tcp"``, ``"shared memory
        and tcp"`` or ``"none"`` (:mod:`deisa.bridge.shm.transport`)."""
        return self._parts.transport.used

    @property
    def workers(self) -> list[str]:
        """The workers blocks are placed on (changes when a worker joins or leaves)."""
        return list(self._parts.routing.workers)

    @property
    def worker_of(self) -> dict[str, str]:
        """This rank's worker, per array, under the current placement."""
        return dict(self._parts.routing.worker_of)

    @property
    def peak_buffers(self) -> dict[str, int]:
        """``mode="async"``: the most block copies this rank held at once, per array."""
        return self._async.buffers.peak

    @property
    def peak_in_flight(self) -> dict[str, int]:
        """``mode="async"``: the most blocks not known registered, per array."""
        return self._async.peak_in_flight

    @property
    def exchanges(self) -> int:
        """``mode="async"``: exchanges (small ``allgather`` calls) completed so far."""
        return self._async.exchanges

    @property
    def timings(self) -> list[PublishTiming]:
        """One :class:`PublishTiming` per :meth:`publish` on this rank."""
        return self._parts.timings.all

    @property
    def detached(self) -> str | None:
        """Why the Bridge stopped sending (the scheduler lost); ``None`` while it sends."""
        return self._parts.detachment.reason

    @property
    def specs(self) -> dict[str, ArraySpec]:
        """This rank's block of each array."""
        return self._parts.arrays.specs

    @property
    def scheduler_address(self) -> str | None:
        """The scheduler's address, once the connection is known (``None`` before)."""
        return self._link.address

    @property
    def run(self) -> str | None:
        """The run's name, once the connection is known (``None`` before)."""
        return self._link.run

    def declare(self, arrays: Mapping[str, ArraySpec]) -> None:
        """Add ``arrays`` (name -> this rank's :class:`ArraySpec`, fixed or moving), known only
        once the run goes on (an ADIOS2 variable defined after step 0); collective, the same
        names on every rank. Rank 0 opens them once every rank knows its connection (async:
        waits for it). A contract set on them later is not followed. Raises, on every rank,
        the construction's errors (bad arrays, names that differ or are declared already)."""
        if self._closed:
            raise BridgeError("declare() after close()")
        declare_more(self._parts, self._link, self._async, dict(arrays))

    # -- publishing --------------------------------------------------------------------------

    def publish(
        self,
        name: str,
        block: np.ndarray | Sequence[Any],
        step: int,
        *,
        start: Sequence[int] | None = None,
        shape: Sequence[int] | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        """Publish this rank's ``block`` of array ``name`` at ``step``; collective.

        ``mode="async"`` (default): returns once ``block`` is copied into a buffer the Bridge
        owns (the caller may overwrite ``block`` right away); the transfer to the worker and
        the step's registration on the scheduler proceed in the background. Waits while this
        rank has ``max_in_flight`` blocks of ``name`` not yet registered (their transfer, or
        flow control: ``buffer_nb`` steps waiting for the analytics). A failure in the
        background is raised by a later ``publish`` (or :meth:`close`) on every rank; a wrong
        call (a bad block, ranks calling with different names or steps) returns, and the next
        call raises it on every rank (see ``docs/architecture.md``).

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
            excluded) is fine. Or boxes (above).
        step
            Time step (non-negative), normally increasing from one call to the next for a
            given array; see above for a step published again.
        start, shape
            Data that moves (``docs/moving-data.md``): ``block`` at ``start`` in this step's
            global ``shape`` (the ranks giving it agree; one at least). ``block`` may also be a
            list of ``(start, array)`` boxes (``[]``: none), or, for a joined array
            (:meth:`ArraySpec.moving`), of arrays placed after the lower ranks'. A fixed
            array's step published so carries a layout.
        attrs
            This step's attributes (its time...), as :meth:`set_attrs` then ``publish``.

        Raises
        ------
        BridgeError
            On every rank, naming the rank at fault, if any rank's block is wrong; naming the
            step, if a worker is unreachable, the scheduler failed, or flow control timed out
            (in ``mode="async"``, for this or an earlier step); or if the connection failed.
        """
        if self._closed:
            raise BridgeError("publish() after close()")
        if self._async.raised is not None:
            raise BridgeError(f"publish() after a failure of the Bridge: {self._async.raised}")
        if self.detached is not None:
            return
        t0 = time.perf_counter()
        sent, problem = check_publish(
            self.decompositions, self.specs, name, block, step, start, shape
        )
        revision = 0
        if isinstance(step, (int, np.integer)):  # counted on every rank, whatever happens next
            revision = self._parts.steps.publication(name, int(step))
            self._attach_attrs(name, int(step), revision, attrs, problem is None)
        publisher = self._async if self.asynchronous else self._sync
        publisher.publish(name, sent, step, revision, problem, t0)

    def step(self, step: int) -> StepScope:
        """``with bridge.step(t) as s: s.publish(name, block)``: step ``t`` of several arrays
        with one exchange (:class:`~deisa.bridge.step_scope.StepScope`); collective."""
        return StepScope(self.publish, self._async if self.asynchronous else None, step)

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
        if self._async.raised is not None:
            raise BridgeError(f"flush() after a failure of the Bridge: {self._async.raised}")
        if self.asynchronous:
            self._async.wait_until(lambda: self._async.ledger.flushed)
            self._parts.transport.settle()  # the slots given back meanwhile

    # -- steering values (deisa.analysis.steering) ----------------------------------------

    def get(self, name: str, default: Any = None) -> Any:
        """The steering value ``name`` that the analytics set, or ``default``; collective.

        Rank 0 asks the scheduler (one message) and broadcasts the answer, so every rank gets
        the same value at the same call. The latest value set wins and reading does not consume
        it; it comes back as the type it was set with (see :mod:`deisa.analysis.steering`).

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
            On every rank: ranks that asked for different names, a closed Bridge, a value not
            in the plain form (:func:`deisa.wire.decode_value`; rank 0 never unpickles one),
            or, with ``on_scheduler_loss="fail"``, a scheduler that has not answered for
            ``connect_timeout`` (the one message of its loss; with ``"continue"`` the Bridge
            detaches and ``default`` is returned, see ``docs/reliability.md``).

        Examples
        --------
        >>> for step in range(nsteps):  # doctest: +SKIP
        ...     bridge.publish("gtemp", field, step)
        ...     if bridge.get("stop", False):
        ...         break
        """
        if self._closed:
            raise BridgeError(f"get({name!r}) after close()")
        # detached (the exchange of mode="async" may detach it), or still connecting
        if self.detached is not None or not self._async.connected_now() or self.detached:
            return default
        names = self.comm.gather(name, root=0)

        def ask() -> tuple[bool, Any]:
            for rank, other in enumerate(names):
                if other != name:
                    raise BridgeError(f"rank {rank} called get({other!r}), rank 0 get({name!r})")
            reply = self._parts.loop.run(
                self._link.value_until_answered(name, self._parts.worker_book, self.options)
            )
            if isinstance(reply, SchedulerLost):
                return False, reply.message
            return True, decode_value(name, reply, default)

        answered, value = on_root(self.comm, ask)
        if not answered:  # the scheduler is lost: detach (the default) or fail, every rank
            self._losses.lose_scheduler_now(value)
            return default
        return value

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
        self._closed = True
        close_bridge(self._parts, self._link, self._async, self._losses, self._opened)

    def _shutdown(self) -> None:
        shut_down(self._parts, self._async, self._link)

    def __enter__(self) -> Bridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
