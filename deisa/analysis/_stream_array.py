"""One array a simulation publishes, read step by step from the scheduler's stream.

:class:`ArrayDescriptor` is what ``Adapter(client)[name]`` returns (:mod:`deisa.analysis.adapter`,
where it and :class:`StepLostError` are importable from, as before): it takes the array's steps
out of the scheduler in order (``deisa_get``), caches those taken ahead, builds each step's dask
array from its blocks' keys (a step with a layout, a moving array's, from its parcels:
:mod:`._parcels`, :mod:`.moving`), and asks for contracts (:mod:`deisa.contract`).
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Iterator
from typing import Any, Literal, Protocol

import dask.array as da
import numpy as np
from distributed import Client, Future

from .. import _dask_internals
from ..contract import Contract
from ..wire import Reply, Route, Status, is_ok, status
from ..wire.attributes import plain_attrs
from ..wire.layout import StepLayout
from . import _block_locations, _parcels, contracts
from ._attributes import record_hint
from ._reading import NoFixedShapeError, StepArray, StepNotAvailableError
from .moving import assemble

__all__ = ["ArrayDescriptor", "StepLostError"]

logger = logging.getLogger(__name__)


class Consumer(Protocol):
    """What a descriptor needs of its :class:`~deisa.analysis.adapter.Adapter`: the consumer's
    identity and settings, and the scheduler's routes."""

    client: Client
    timeout: float | None
    group: str | None
    on_lost: Literal["warn", "raise"]
    consumer: str

    def _request(self, route: Route, **kwargs: Any) -> Reply: ...


class StepLostError(StepNotAvailableError):
    """A step whose blocks died with a worker that left the cluster: it will never be read."""


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

    A *moving* array (``ArraySpec.moving``: particles, several boxes a rank, boxes that move;
    ``docs/moving-data.md``) has no :attr:`shape` or :attr:`chunks` of its own (they raise
    :class:`~deisa.analysis._reading.NoFixedShapeError`): each step has its own
    (:meth:`shape_of`), and is assembled from its boxes, chunked as written. Where its boxes
    do not cover its shape, ``array[t]`` raises
    :class:`~deisa.analysis.moving.MissingRegionError` naming the regions: read the boxes
    (:meth:`blocks`), assemble one step with a fill value (:meth:`step`), or set :attr:`fill`
    for every step. Stacking steps of different shapes (``array[0:10]``, :meth:`windows`)
    raises :class:`~deisa.analysis._reading.StepShapesDifferError`. A fixed array's step whose
    blocks moved (some rank published boxes other than its declared block) is read the same way.
    """

    def __init__(self, adapter: Consumer, name: str) -> None:
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
        self._pressure: list[str] = []  # the workers paused for memory, as last told
        self._unreported: set[int] = set()  # lost steps the iteration has not passed yet
        self._reached: int | None = None  # the latest step received, lost ones included
        # the layout (wire form) of each step published with one, while its data may be read
        self._layouts: dict[int, dict[str, Any]] = {}

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
                    f"no simulation has opened array {self.name!r} within "
                    f"{self.adapter.timeout} s{record_hint(self.name)}"
                )
            self._meta = reply["meta"]
        return self._meta

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.meta["dtype"])

    def _static_attrs(self) -> dict[str, Any]:
        """The static attributes of the array's open metadata (``ArraySpec(attrs=)``)."""
        return plain_attrs(self.meta.get("attrs"))  # lists, not the wire's tuples

    @property
    def moving(self) -> bool:
        """Whether the array was declared moving: a shape and boxes of their own at each step."""
        return bool(self.meta.get("moving", False))

    @property
    def shape(self) -> tuple[int, ...]:
        """Spatial shape (the time axis is unbounded and not included).

        Raises
        ------
        NoFixedShapeError
            A moving array: each step has its shape (:meth:`shape_of`, ``array[t].shape``).
        """
        if self.moving:
            raise NoFixedShapeError(self._varies("shape", "shape_of(step) or array[step].shape"))
        return tuple(self.meta["shape"])

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        """Spatial chunks of a step's dask array: the declared blocks (a moving array's step's
        are its own, ``array[step].chunks``; here :class:`NoFixedShapeError`)."""
        if self.moving:
            raise NoFixedShapeError(self._varies("chunks", "array[step].chunks"))
        return tuple(tuple(c) for c in self.meta["chunks"])

    @property
    def ndim(self) -> int:
        """Number of spatial axes (a moving array's, declared: the same at every step)."""
        return int(self.meta["ndim"]) if self.moving else len(self.shape)

    def _varies(self, what: str, instead: str) -> str:
        return (
            f"{self.name!r} is a moving array: its {what} changes from step to step; ask one "
            f"step's: {instead}"
        )

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
        return self._receive(self.adapter._request(Route.GET, **self._get_call()))

    def _due(self) -> bool:
        """Whether the next step of the iteration needs a record from the scheduler (none is
        cached here, no lost step is left to report, the stream has not ended)."""
        return not (self._ended or self._cached or self._unreported)

    def _get_call(self) -> dict[str, Any]:
        """The ``deisa_get`` arguments of this array's next record."""
        adapter = self.adapter
        return {
            "name": self.name,
            "client": adapter.client.id,
            "timeout": adapter.timeout,
            "run": self._run,
            "consumer": adapter.consumer,
            "group": adapter.group,
        }

    def _receive(self, reply: Reply) -> bool:
        """Take in the scheduler's reply to :meth:`_get_call`; False at the end of the stream."""
        client = self.adapter.client
        answer = status(reply)
        self._note_memory(reply.get("memory") or [])
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
                else f"no simulation has opened it yet{record_hint(self.name)}"
            )
            pressure = "".join(f"; {line}" for line in reply.get("memory") or [])
            raise TimeoutError(
                f"waited {self.adapter.timeout} s for the next step of {self.name!r}: {state}"
                f"{pressure}"
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
        self._forget_layouts()
        if reply.get("layout") is not None:
            self._layouts[step] = reply["layout"]
        if reply.get("attrs"):  # those new or changed at this step (kept: a few per change)
            self._attr_changes[step] = plain_attrs(reply["attrs"])  # lists: the wire's tuples
        self._contract_of[step] = reply.get("contract")
        self._seen.append(step)
        self._reached = max(step, self._reached if self._reached is not None else step)
        return True

    def _note_memory(self, pressure: list[str]) -> None:
        """Warn, once per change, that workers are paused (or spilling) for memory: this
        analytics' computations wait for them (``pressure``: the scheduler's lines)."""
        if pressure and pressure != self._pressure:
            logger.warning(
                "deisa adapter: %s: computations on %r wait for memory (docs/reliability.md, "
                "memory pressure)",
                "; ".join(pressure),
                self.name,
            )
        self._pressure = pressure

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
        return self._build(step, self._fill)

    def _filled_step(self, step: int, fill: Any) -> da.Array:
        return self._build(step, fill)

    def _step_shape(self, step: int) -> tuple[int, ...]:
        layout = self._layouts.get(step)
        return self.shape if layout is None else tuple(int(n) for n in layout["shape"])

    def _futures(self, step: int) -> dict[Any, Future]:
        """The futures of ``step``'s keys, cached or handed out before (and still alive)."""
        if step in self._cached:
            return self._cached[step]
        alive = {key: ref() for key, ref in self._handed[step].items()}
        # (a step of no block, an empty moving step, is released with its layout)
        if any(f is None for f in alive.values()) or not (alive or step in self._layouts):
            raise StepNotAvailableError(
                f"step {step} of {self.name!r} was handed out before and its data has "
                "been released since; keep the first array to use it again"
            )
        return alive  # type: ignore[return-value]

    def _hand(self, step: int) -> None:
        """``step`` is handed out: the cache lets go of its futures (the arrays hold them)."""
        if step in self._cached:
            futures = self._cached.pop(step)
            self._handed[step] = {key: weakref.ref(f) for key, f in futures.items()}

    def _build(self, step: int, fill: Any) -> da.Array:
        """The dask array of ``step``, handed out; if it cannot be built (a region no block
        holds, without ``fill``), the step stays cached for another try."""
        futures = self._futures(step)
        if step in self._layouts:
            layout, boxes = self._boxes(step, futures)
            what = f"step {step} of {self.name!r}"
            array = assemble(layout, boxes, fill=fill, dtype=self.dtype, what=what)
            self._hand(step)
            return array
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
        self._hand(step)
        workers, nthreads = self._holders[step]
        return _block_locations.located(array, futures, workers, nthreads)

    def _boxes(self, step: int, futures: dict[Any, Future]) -> tuple[StepLayout, list[da.Array]]:
        """The layout of ``step`` and one dask array per box, a view of its parcel."""
        layout = StepLayout.from_wire(self._layouts[step])
        what = f"step {step} of {self.name!r}"
        return layout, _parcels.box_arrays(layout, list(futures.values()), self.dtype, what)

    def _forget_layouts(self) -> None:
        """Drop the layouts of the steps whose data is gone (handed out, then released)."""
        for step in list(self._layouts):
            if step not in self._cached and not any(
                ref() is not None for ref in self._handed.get(step, {}).values()
            ):
                del self._layouts[step]

    def layout(self, step: int) -> StepLayout | None:
        """``step``'s global shape and boxes as the ranks published them (its parcels: one a
        rank that held an element); ``None`` for a step published plain (the declared blocks).
        Waits for the step as ``array[step]`` does, without taking it."""
        wire = self._layouts.get(self._resolve_int(step))
        return None if wire is None else StepLayout.from_wire(wire)

    def blocks(self, step: int) -> list[_parcels.Block]:
        """Every block of ``step`` as published: ``(start, count, array)`` each
        (:class:`~deisa.analysis._parcels.Block`), ``start`` and ``count`` in the step's shape,
        ``array`` its lazy dask array (a view of the data where it lies). A moving step's
        boxes in their layout's order (rank by rank, empty ones included); a step without layout:
        its declared blocks (its array's chunks). Takes the step as ``array[step]`` does; works
        where ``array[step]`` raises :class:`~deisa.analysis.moving.MissingRegionError`.

        Examples
        --------
        >>> level = adapter["rho_level1"]  # doctest: +SKIP
        >>> total = sum(b.array.sum() for b in level.blocks(3)).compute()  # doctest: +SKIP
        """
        step = self._resolve_int(step)
        if step not in self._layouts:
            return _parcels.declared_blocks(self._step_array(step))
        layout, boxes = self._boxes(step, self._futures(step))
        self._hand(step)
        return [
            _parcels.Block(box.start, box.count, array)
            for box, array in zip(layout.boxes, boxes, strict=True)
        ]

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
            1, a region of a moving array (not supported yet: steps only); or no simulation
            opened the array within the Adapter's timeout (the contract is then withdrawn). If
            the array is not open yet, waits for it to be (so that the region can be checked),
            up to the Adapter's ``timeout``; the contract is already in place when the
            simulation opens the array, and applies from its first step.

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
