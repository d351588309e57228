"""The analytics side: rebuild global dask arrays from the blocks the Bridges published.

>>> gtemp = Adapter(client)["gtemp"]          # doctest: +SKIP
>>> field = gtemp[3, :, :]                     # dask Array (NX, NY) of step 3  # doctest: +SKIP
>>> for step, field in gtemp.items(): ...      # every step until the end  # doctest: +SKIP

Steps arrive in order, one scheduler message per step (:mod:`deisa.scheduler.extension`). Taking a
step out of the scheduler's queue hands its keys to this client and frees room for bridges
blocked by ``buffer_nb``. An array for one step is built straight from the blocks' own keys: it
holds the futures and adds no task, and the data lives as long as the array (or anything
computed from it) does.

Each Adapter is one *consumer*: every Adapter attached to an array receives every step, unless
Adapters share a ``group`` name, whose members share the steps (each step goes to one of them).
Several arrays of the same step are read together with :meth:`Adapter.zip`, sliding windows of
steps with :meth:`ArrayDescriptor.windows`. See ``docs/streams.md``.
"""

from __future__ import annotations

import logging
import os
import uuid
import warnings
import weakref
from collections.abc import Iterator
from typing import Any, Literal

import dask.array as da
import numpy as np
from distributed import Client, Future

from .. import _dask_internals
from ..contract import Contract
from ..scheduler import StreamExtension
from ..wire import SCHEDULER_FILE_ENV, Reply, Route, Status, is_ok, status
from . import _block_locations, contracts
from ._reading import EndOfStreamError, StepArray, StepNotAvailableError, StepReader

__all__ = [
    "Adapter",
    "ArrayDescriptor",
    "EndOfStreamError",
    "StepLostError",
    "StepNotAvailableError",
]

logger = logging.getLogger(__name__)


class StepLostError(StepNotAvailableError):
    """A step whose blocks died with a worker that left the cluster: it will never be read."""


class Adapter(StepReader):
    """Access, from a Dask client, the arrays that simulation Bridges publish.

    Parameters
    ----------
    client
        A connected, synchronous :class:`distributed.Client`.
    timeout
        Seconds to wait for a step (or the array's description) before raising
        :class:`TimeoutError` saying what is missing. ``None``: wait forever.
    group
        ``None`` (default): this Adapter is a consumer of its own and receives every step of
        the arrays it reads, whatever other Adapters read (fan-out). A name: the Adapters of
        that group (on any client) share the steps, each step going to the member that asks
        first; the group counts as one consumer.
    on_lost
        What iterating (:meth:`ArrayDescriptor.items`, ``windows``, :meth:`zip`) does at a step
        lost with a worker (its blocks died before this Adapter took it): ``"warn"`` (default)
        skips it with one :class:`RuntimeWarning` naming the step and the worker; ``"raise"``
        raises :class:`StepLostError` (iterating again goes on after it). Selecting a lost step
        (``descriptor[t]``) always raises :class:`StepLostError`; :meth:`stats` lists them.

    Notes
    -----
    The Adapter attaches to an array at its first access that contacts the scheduler (its
    ``meta``, ``shape``, a selection or an iteration) and receives the steps published from then
    on; the first consumer of a run also receives the steps that waited for one (within
    ``buffer_nb``). Until it detaches, the simulation's flow control waits for it like for any
    other consumer (``buffer_nb`` counts the slowest). It detaches on :meth:`close` (or at the end
    of its ``with`` block), or when its client closes or dies: at once for a closed client or a
    killed process, within ``distributed.comm.timeouts.tcp`` (30 s by default) for a host that
    vanished. Steps it has taken stay alive as long as its arrays do.

    An analytics started by ``deisa-run`` (or by hand with ``DEISA_SCHEDULER_FILE`` set)
    connects with :meth:`from_env`, which also owns and closes its client.

    Examples
    --------
    >>> client = Client(scheduler_file="scheduler.json")  # doctest: +SKIP
    >>> gtemp = Adapter(client)["gtemp"]  # doctest: +SKIP
    >>> gtemp[0, :, :].mean().compute()  # doctest: +SKIP

    Two analyses side by side, each seeing every step, and a pool of two workers sharing them:

    >>> with Adapter(client) as pca, Adapter(client) as plot:  # doctest: +SKIP
    ...     ...
    >>> pool = Adapter(client, group="histograms")  # in two processes  # doctest: +SKIP

    Under ``deisa-run --analytics my.py -- ...``:

    >>> with Adapter.from_env() as adapter:  # doctest: +SKIP
    ...     for step, field in adapter["gtemp"].items(): ...
    """

    def __init__(
        self,
        client: Client,
        *,
        timeout: float | None = 60.0,
        group: str | None = None,
        on_lost: Literal["warn", "raise"] = "warn",
    ) -> None:
        if group is not None and (not isinstance(group, str) or not group):
            raise ValueError(f"group={group!r} must be a non-empty string or None")
        if on_lost not in ("warn", "raise"):
            raise ValueError(f"on_lost={on_lost!r} must be 'warn' or 'raise'")
        self.client = client
        self.timeout = timeout
        self.group = group
        self.on_lost = on_lost
        self.consumer = f"{client.id}/{uuid.uuid4().hex[:12]}"
        client.register_plugin(StreamExtension())
        from ..worker import install  # deisa's worker plugin, unless already there

        install(client)
        self._descriptors: dict[str, ArrayDescriptor] = {}
        self._closed = False
        self._owns_client = False

    @classmethod
    def from_env(cls, **kwargs: Any) -> Adapter:
        """An Adapter on a client of its own, connected to the scheduler file named by the
        environment variable ``DEISA_SCHEDULER_FILE`` (which ``deisa-run`` sets).

        The Adapter owns that client: :meth:`close` (or the end of its ``with`` block) closes
        it after detaching.

        Parameters
        ----------
        **kwargs
            The Adapter's keyword arguments (``timeout``, ``group``...).

        Raises
        ------
        RuntimeError
            ``DEISA_SCHEDULER_FILE`` is not set.
        FileNotFoundError
            The file it names does not exist.

        Examples
        --------
        >>> with Adapter.from_env(timeout=120) as adapter:  # doctest: +SKIP
        ...     print(adapter["gtemp"][0].mean().compute())
        """
        path = os.environ.get(SCHEDULER_FILE_ENV, "")
        if not path:
            raise RuntimeError(
                f"Adapter.from_env(): the environment variable {SCHEDULER_FILE_ENV} is not set; "
                "set it to the file written by `dask scheduler --scheduler-file FILE' (deisa-run "
                "sets it), or connect a Client yourself: Adapter(Client(scheduler_file=...))"
            )
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"Adapter.from_env(): {SCHEDULER_FILE_ENV}={path!r} names no file; is the "
                "scheduler started (`dask scheduler --scheduler-file FILE')?"
            )
        client = Client(scheduler_file=path)
        try:
            adapter = cls(client, **kwargs)
        except BaseException:
            client.close()
            raise
        adapter._owns_client = True
        return adapter

    def close(self) -> None:
        """Detach from every array: the stream stops waiting for this consumer and releases the
        steps it had not taken (unless another consumer still has to take them). Arrays it
        handed out stay valid, unless the Adapter owns its client (:meth:`from_env`): it closes
        it then. Idempotent; the Adapter cannot read afterwards."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.client.status == "running":
                self._request(Route.DETACH, consumer=self.consumer)
        finally:
            if self._owns_client:
                self.client.close()

    def __getitem__(self, name: str) -> ArrayDescriptor:
        """The descriptor of array ``name``; cheap, it contacts nobody until subscripted."""
        if name not in self._descriptors:
            self._descriptors[name] = ArrayDescriptor(self, name)
        return self._descriptors[name]

    def stats(self) -> dict[str, Any]:
        """Scheduler-side counters: calls per route, steps published, taken and queued; and
        ``"lost"``: per array this Adapter reads, the ``(step, worker)`` of each step it found
        lost with a worker (the scheduler's ``streams`` list them too, until the run ends)."""
        stats = self._request(Route.STATS)
        stats["lost"] = {
            name: [(step, worker) for step, workers in d._lost.items() for worker in workers]
            for name, d in self._descriptors.items()
            if d._lost
        }
        return stats

    def set(self, name: str, value: Any) -> int:
        """Set the steering value ``name`` that the simulation reads with :meth:`Bridge.get`.

        The latest value wins: a value set twice before the simulation reads it is read with
        its second value; reads do not consume it. ``None`` clears it (readers get their
        default). A C code reads it through the PDI plugin's ``read`` section.

        Parameters
        ----------
        name
            Non-empty name, shared with the simulation (e.g. ``"stop"``).
        value
            ``None``, a ``bool``, ``int``, ``float``, ``complex`` or ``str``, or a numpy array
            or scalar (not of objects); 1 MiB at most. Never pickled: see
            :mod:`deisa.analysis.steering`.

        Returns
        -------
        int
            How many times ``name`` was set so far, this call included.

        Raises
        ------
        deisa.wire.SteeringError
            A bad name, a value of another type (a list: send ``np.asarray(value)``), or too
            large; the message names the value's type and what is accepted.

        See Also
        --------
        deisa.analysis.steering : the semantics of steering values.

        Examples
        --------
        >>> Adapter(client).set("stop", True)  # doctest: +SKIP
        1
        """
        from . import steering

        return steering.set_value(self.client, name, value)

    def _request(self, route: Route, **kwargs: Any) -> Reply:
        """Call ``route`` on the scheduler (:mod:`deisa.wire`) and return its reply."""
        if self._closed and route not in (Route.DETACH, Route.STATS):
            raise RuntimeError(f"this Adapter was closed: it cannot read any more ({route})")
        reply: Reply = self.client.sync(getattr(self.client.scheduler, route.value), **kwargs)
        return reply


class ArrayDescriptor(StepArray):
    """One published array, indexed as ``descriptor[t, x, y]`` with a leading time axis.

    The reading interface (time selection, :meth:`~StepArray.items`,
    :meth:`~StepArray.windows`, :attr:`~StepArray.steps`, labelled arrays with ``as_xarray=True``
    or :meth:`~StepArray.to_xarray`) is :class:`StepArray`'s, shared with the arrays of a
    :class:`~deisa.analysis.replay.Replay`. The time index selects published
    step numbers: an integer, a slice or ``range`` of steps (open-ended and negative bounds wait
    for the end of the stream), a list of steps, or ``...``. An integer step gives a spatial
    array with no tasks in its graph; several steps are stacked along a new leading axis by
    :func:`dask.array.stack`.

    Steps are taken out of the scheduler in order, each handed out once. Steps taken to reach
    a later one but not asked for yet stay cached here (holding their data) until asked for.
    """

    def __init__(self, adapter: Adapter, name: str) -> None:
        super().__init__(name)
        self.adapter = adapter
        self._meta: dict[str, Any] | None = None
        self._cached: dict[int, dict[Any, Future]] = {}
        self._handed: dict[int, dict[Any, weakref.ref[Future]]] = {}
        self._run: str | None = None  # the simulation run whose steps this reads
        self._contract_of: dict[int, dict[str, Any] | None] = {}  # the contract of each step
        # the worker of each block of a step, and their threads, as the stream reported them
        self._holders: dict[int, tuple[list[str], dict[str, int]]] = {}
        self._lost: dict[int, list[str]] = {}  # steps lost with a worker: the workers
        self._unreported: set[int] = set()  # lost steps the iteration has not passed yet
        self._reached: int | None = None  # the latest step received, lost ones included

    # -- metadata ----------------------------------------------------------------------------

    @property
    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            adapter = self.adapter
            reply = adapter._request(
                Route.META,
                name=self.name,
                timeout=adapter.timeout,
                client=adapter.client.id,
                consumer=adapter.consumer,
                group=adapter.group,
            )
            if not is_ok(reply):
                raise TimeoutError(
                    f"no simulation has opened array {self.name!r} within {self.adapter.timeout} s"
                )
            self._meta = reply["meta"]
        return self._meta

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.meta["dtype"])

    @property
    def shape(self) -> tuple[int, ...]:
        """Spatial shape (the time axis is unbounded and not included)."""
        return tuple(self.meta["shape"])

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(c) for c in self.meta["chunks"])

    @property
    def dims(self) -> tuple[str, ...] | None:
        """Names of the spatial axes as the simulation gave them (``ArraySpec(dims=...)``),
        ``None`` if it did not (or its Bridge predates them)."""
        dims = self.meta.get("dims")
        return None if dims is None else tuple(dims)

    @property
    def time_length(self) -> int | None:
        """The number of steps the simulation declared its time axis holds (a PDI YAML's
        fixed time size in the older grammars, ``ArraySpec(time_length=...)``), ``None`` if
        unbounded. Steps past it are not published; a simulation may stop before it."""
        length = self.meta.get("time_length")
        return None if length is None else int(length)

    def __repr__(self) -> str:
        state = "ended" if self._ended else "open"
        return f"<ArrayDescriptor {self.name!r}: {len(self._seen)} steps received, {state}>"

    # -- pulling steps -----------------------------------------------------------------------

    def _attach(self) -> None:
        """Become a consumer of this array now (otherwise: at the first scheduler request)."""
        if self._run is None and not self._ended:
            adapter = self.adapter
            adapter._request(
                Route.ATTACH,
                name=self.name,
                client=adapter.client.id,
                consumer=adapter.consumer,
                group=adapter.group,
            )

    def _pull(self) -> bool:
        """Take the next record from the scheduler; False at the end of the stream."""
        if self._ended:
            return False
        client = self.adapter.client
        reply = self.adapter._request(
            Route.GET,
            name=self.name,
            client=client.id,
            timeout=self.adapter.timeout,
            run=self._run,
            consumer=self.adapter.consumer,
            group=self.adapter.group,
        )
        answer = status(reply)
        if answer is Status.ERROR:
            raise RuntimeError(f"deisa_get of {self.name!r} refused: {reply['message']}")
        if answer is Status.END:
            self._ended = True
            logger.info("deisa adapter: end of %r after %d steps", self.name, len(self._seen))
            return False
        if answer is Status.LOST:
            step = int(reply["step"])
            self._run = reply["run"]
            self._lost[step] = list(reply["workers"])
            self._unreported.add(step)
            self._reached = max(step, self._reached if self._reached is not None else step)
            logger.info("deisa adapter: %s", reply["message"])
            return True
        if answer is Status.TIMEOUT:
            last = self._seen[-1] if self._seen else None
            state = (
                f"the simulation has published {reply['published']} step(s) so far, the last "
                f"one received here being {last}"
                if reply["open"]
                else "no simulation has opened it yet"
            )
            raise TimeoutError(
                f"waited {self.adapter.timeout} s for the next step of {self.name!r}: {state}"
            )
        self._meta, self._run = reply["meta"], reply["run"]
        step = int(reply["step"])
        futures = {key: _dask_internals.future_in_memory(key, client) for key in reply["keys"]}
        self._holders[step] = (reply["workers"], reply["nthreads"])
        if reply.get("confirm"):  # this client took the step before, through another consumer
            _dask_internals.send_batched(
                client, Route.STEP_TAKEN.value, name=self.name, run=self._run, step=step
            )
        self._cached[step] = futures
        self._contract_of[step] = reply.get("contract")
        self._seen.append(step)
        self._reached = max(step, self._reached if self._reached is not None else step)
        return True

    def _pull_until(self, step: int | None) -> None:
        """Pull until ``step`` (or a later one) was received, or to the end if ``None``."""
        while step is None or self._reached is None or self._reached < step:
            if not self._pull():
                return

    # -- the StepArray hooks -----------------------------------------------------------------

    def _has(self, step: int) -> bool:
        if step in self._lost:
            self._unreported.discard(step)
            raise StepLostError(self._lost_message(step))
        return step in self._cached or step in self._handed

    def _next_steps(self) -> Iterator[int]:
        while self._cached or self._unreported or self._pull():
            lost = min(self._unreported, default=None)
            if lost is None or (self._cached and min(self._cached) < lost):
                if self._cached:
                    yield min(self._cached)
                continue
            self._unreported.discard(lost)  # in step order: the iteration passes it
            if self.adapter.on_lost == "raise":
                raise StepLostError(self._lost_message(lost))
            warnings.warn(self._lost_message(lost) + "; skipped", RuntimeWarning, stacklevel=3)

    def _lost_message(self, step: int) -> str:
        return (
            f"step {step} of {self.name!r} was lost: worker(s) {', '.join(self._lost[step])} "
            "holding its blocks left the cluster before this Adapter took it"
        )

    def _step_array(self, step: int) -> da.Array:
        if step in self._cached:
            futures = self._cached.pop(step)
            self._handed[step] = {key: weakref.ref(f) for key, f in futures.items()}
        else:
            refs = self._handed[step]
            alive = {key: ref() for key, ref in refs.items()}
            if any(f is None for f in alive.values()):
                raise StepNotAvailableError(
                    f"step {step} of {self.name!r} was handed out before and its data has "
                    "been released since; keep the first array to use it again"
                )
            futures = alive  # type: ignore[assignment]
        meta = self.meta
        if self._contract_of.get(step) is not None:  # sent under a contract: its region
            array = contracts.region_array(futures, meta, self._contract_of[step])  # type: ignore[arg-type]
        else:
            array = da.Array(
                dict(futures),
                next(iter(futures))[0],
                chunks=self.chunks,
                dtype=np.dtype(meta["dtype"]),
                shape=tuple(meta["shape"]),
            )
        workers, nthreads = self._holders[step]
        return _block_locations.located(array, futures, workers, nthreads)

    # -- contracts (deisa.contract) ---------------------------------------------------------

    def require(self, region: Any = None, steps: Any = None) -> Contract:
        """Ask the simulation to send only ``region`` of this array, on ``steps`` only.

        The contract replaces any earlier one of the array (whoever set it: it applies to
        every consumer) and reaches every rank of the simulation at the same step: steps not
        wanted are not sent at all, and on the others only the blocks that intersect
        ``region`` are. The arrays of steps sent under it are exactly ``region`` (spatial
        indices of a selection are then relative to the region). Steps published before it
        came into force keep the shape they were sent with: see :meth:`contract_of`.

        Parameters
        ----------
        region
            ``None`` (the whole array) or one ``slice(start, stop)`` per spatial axis, in
            global indices (``None`` bounds: the array's edges; no negative bounds or slice
            steps).
        steps
            ``None`` (every step), an ``int`` stride (``5``: steps 0, 5, 10...), or a
            ``range`` or ``slice`` of step numbers (open-ended: ``slice(10, None, 5)``).

        Returns
        -------
        Contract
            The contract as stored, with its bounds resolved and its version.

        Raises
        ------
        deisa.contract.ContractError
            A malformed region or steps, a region outside the array or empty, a stride below
            1; or no simulation opened the array within the Adapter's timeout (the contract
            is then withdrawn). If the array is not open yet, waits for it to be (so that the
            region can be checked), up to the Adapter's ``timeout``; the contract is already
            in place when the simulation opens the array, and applies from its first step.

        Examples
        --------
        >>> gtemp = Adapter(client)["gtemp"]  # doctest: +SKIP
        >>> gtemp.require(region=(slice(0, 512), slice(0, 512)), steps=5)  # doctest: +SKIP
        >>> for step, corner in gtemp.items(): ...  # steps 0, 5, 10...: 512 x 512  # doctest: +SKIP
        """
        contract = Contract.build(region, steps)
        adapter = self.adapter
        stored = contracts.set_contract(adapter.client, self.name, contract, adapter.timeout)
        assert stored is not None
        return stored

    def drop_contract(self) -> None:
        """Withdraw the array's contract: the simulation sends every block of every step again,
        from a step boundary on (see :meth:`require`)."""
        contracts.set_contract(self.adapter.client, self.name, None, self.adapter.timeout)

    @property
    def contract(self) -> Contract | None:
        """The array's contract as the scheduler holds it now (``None``: everything is sent)."""
        wire = self.adapter._request(Route.GET_CONTRACT, name=self.name)["contract"]
        return None if wire is None else Contract.from_wire(wire)

    def contract_of(self, step: int) -> Contract | None:
        """The contract ``step`` was sent under, as its record says (``None``: whole array).

        Raises
        ------
        KeyError
            ``step`` was not received by this descriptor.
        """
        wire = self._contract_of[step]
        return None if wire is None else Contract.from_wire(wire)
