"""Contracts: the analytics says which part of an array it needs, the simulation sends only that.

A :class:`Contract` names a *region* of an array's global index space (a box: one
``[start, stop)`` range per spatial axis) and the *steps* wanted (``start``, ``stop``,
``stride``, like a ``range``; open-ended by default). The analytics sets it with
:meth:`deisa.analysis.adapter.ArrayDescriptor.require`; then, on every step of the array:

- a step not in the contract's steps is not sent at all: :meth:`deisa.Bridge.publish` stays
  collective (one small exchange in ``mode="async"``, one broadcast in ``mode="sync"``) but no
  rank sends a byte, and the scheduler hears nothing;
- on a step wanted, only the ranks whose block intersects the region send it; rank 0 registers
  the step with exactly those blocks (one ``deisa_publish``, as without a contract);
- the analytics receives, for such a step, an array of exactly the region (its blocks, sliced
  with no task for the blocks that were not sent).

Semantics:

- **One contract per array, the latest wins**, whoever sets it: a contract is the simulation's
  output policy, so it applies to every consumer of the array (with several consumers, set the
  union of what they need). :meth:`~deisa.ArrayDescriptor.drop_contract` goes back to
  sending everything.
- A contract reaches the simulation at a **step boundary**: every rank applies it from the same
  :meth:`~deisa.Bridge.publish` on. Steps published before (and still queued for the analytics)
  keep what they were sent with; each step's record says which contract it followed
  (:meth:`~deisa.analysis.adapter.ArrayDescriptor.contract_of`).
- **Start order does not matter.** Set before the simulation opens the array, the contract is
  checked against the array at its opening and applies from the first step (the Bridge receives
  it in the reply of ``deisa_open``); set during a run, rank 0 of the Bridge learns it through a
  long-polling call its event loop keeps open (``deisa_watch_contracts``, one message per change
  or per :data:`WATCH_SECONDS`, never per step) and the next exchange spreads it to every rank.
  In ``mode="async"``, the few steps published before the Bridge's connection was made (at
  most ``max_in_flight``) are sent whole: the contract is not known yet.
- A contract persists on the scheduler across simulation runs, like steering values; a new run
  checks it against its array and drops it (everything sent, an error in the scheduler's log and
  in :meth:`ContractStore.stats`) if it does not fit.
- Checks, on the analytics side: a region outside the array, an empty one, a stride below 1, a
  malformed selection raise :class:`ContractError` at once if the array is open, else when the
  simulation opens it (``require`` waits for that, up to the Adapter's timeout; an array that no
  simulation opens in that time is an unknown array, and its contract is withdrawn). A bad
  contract never reaches the simulation.

Routes (RPC handlers on the scheduler, registered by :mod:`deisa.scheduler.contracts`;
replies built with :func:`deisa.wire.ok` and :func:`deisa.wire.error`):

- ``deisa_set_contract(name, contract, timeout)``: set (``contract`` a wire dict) or drop
  (``None``) the contract of ``name``; with the array open, checked at once; otherwise waits up
  to ``timeout`` for the array to open and be checked. ``ok(version=int, contract=wire)`` or
  ``error(message)``.
- ``deisa_get_contract(name)``: ``ok(version=int, contract=wire | None, error=str | None)``.
- ``deisa_watch_contracts(names, versions, timeout)``: ``ok(contracts={name: {"version": int,
  "contract": wire | None}})`` for the names whose version differs from ``versions`` (at once
  if some does, else when one changes, else empty after ``timeout``). Rank 0 of a Bridge keeps
  it open from its connection to its close: the scheduler notes when it last heard of each array
  so (``deisa_stats()["contracts"]["silent_s"]``), the simulation's heartbeat.

Runs in every process (rank 0 and every rank's publish, the scheduler, the analytics); imports
nothing of deisa.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Box = tuple[tuple[int, int], ...]


class ContractError(ValueError):
    """A contract that cannot apply to its array: region outside it, bad steps, unknown array."""


@dataclass(frozen=True)
class Contract:
    """What the analytics needs of one array: a region of its global index space and steps.

    Parameters
    ----------
    region
        One ``(start, stop)`` per spatial axis, global indices (``stop`` exclusive, ``None``:
        the array's end), or ``None`` for the whole array.
    start, stop, stride
        The steps wanted: ``start <= step < stop`` (``stop=None``: no end) with
        ``(step - start) % stride == 0``.
    version
        Set by the scheduler: how many times the array's contract was set or dropped.

    Examples
    --------
    >>> c = Contract.build((slice(0, 4), slice(2, None)), range(0, 100, 5))
    >>> c.wants(10), c.wants(11)
    (True, False)
    >>> c.resolved((8, 8)).region
    ((0, 4), (2, 8))
    """

    region: tuple[tuple[int, int | None], ...] | None = None
    start: int = 0
    stop: int | None = None
    stride: int = 1
    version: int = 0

    @classmethod
    def build(cls, region: Any = None, steps: Any = None) -> Contract:
        """A contract from a region of slices and a ``range``/``slice`` of steps.

        Parameters
        ----------
        region
            ``None`` (the whole array) or a tuple of one ``slice(start, stop)`` per spatial
            axis (no slice step; non-negative bounds, ``None`` for the array's start or end).
            ``(start, stop)`` pairs are accepted too.
        steps
            ``None`` (every step), a ``range`` or a ``slice`` (``range(0, 100, 5)``;
            ``slice(10, None, 5)`` for every 5th step from 10 on), or an ``int`` stride.

        Raises
        ------
        ContractError
            A malformed region or steps, naming the axis or the value.
        """
        return cls(_build_region(region), *_build_steps(steps))

    @property
    def box(self) -> Box:
        """The region as resolved ``(start, stop)`` pairs; only for a :meth:`resolved` one."""
        if self.region is None or any(hi is None for _, hi in self.region):
            raise ContractError("the contract's region is not resolved against an array yet")
        return tuple((lo, int(hi)) for lo, hi in self.region)  # type: ignore[arg-type]

    def wants(self, step: int) -> bool:
        """Whether ``step`` is one of the steps the contract asks for."""
        if step < self.start or (self.stop is not None and step >= self.stop):
            return False
        return (step - self.start) % self.stride == 0

    def resolved(self, shape: Sequence[int], name: str = "the array") -> Contract:
        """The contract checked against an array of ``shape``, with concrete bounds.

        Raises
        ------
        ContractError
            The region's rank differs from the array's, or it is empty or outside the array.
        """
        if self.region is None:
            return self
        shape = tuple(int(s) for s in shape)
        if len(self.region) != len(shape):
            raise ContractError(
                f"the contract's region has {len(self.region)} axes, array {name!r} has "
                f"{len(shape)} (shape {shape})"
            )
        box = []
        for axis, ((lo, hi), size) in enumerate(zip(self.region, shape, strict=True)):
            top = size if hi is None else hi
            if top > size or lo >= size:
                raise ContractError(
                    f"the contract's region [{lo}:{'' if hi is None else hi}] on axis {axis} is "
                    f"outside array {name!r}, whose axis {axis} has size {size} (shape {shape})"
                )
            if top <= lo:
                raise ContractError(
                    f"the contract's region [{lo}:{top}] on axis {axis} of {name!r} is empty"
                )
            box.append((lo, top))
        return Contract(tuple(box), self.start, self.stop, self.stride, self.version)

    def with_version(self, version: int) -> Contract:
        return Contract(self.region, self.start, self.stop, self.stride, version)

    def to_wire(self) -> dict[str, Any]:
        """A msgpack-friendly dict (lists and ints) for the scheduler's routes."""
        return {
            "region": None if self.region is None else [list(r) for r in self.region],
            "steps": [self.start, self.stop, self.stride],
            "version": self.version,
        }

    @classmethod
    def from_wire(cls, wire: Any) -> Contract:
        """The contract of :meth:`to_wire`'s dict, checked (a :class:`ContractError` if bad)."""
        if not isinstance(wire, dict) or not {"region", "steps"} <= set(wire):
            raise ContractError(f"a contract must be a dict with region and steps, got {wire!r}")
        steps = wire["steps"]
        if not isinstance(steps, (list, tuple)) or len(steps) != 3:
            raise ContractError(f"a contract's steps must be [start, stop, stride], got {steps!r}")
        region = wire["region"]
        pairs = None if region is None else [tuple(r) for r in region]
        start, stop, stride = _build_steps(slice(*steps))
        return cls(_build_region(pairs), start, stop, stride, int(wire.get("version", 0)))

    def describe(self) -> str:
        """``region [0:512, 0:512], steps 0::5`` (for logs and messages)."""
        if self.region is None:
            region = "whole array"
        else:
            bounds = (f"{lo}:{'' if hi is None else hi}" for lo, hi in self.region)
            region = f"region [{', '.join(bounds)}]"
        stop = "" if self.stop is None else self.stop
        return f"{region}, steps {self.start}:{stop}:{self.stride}"


def _build_region(region: Any) -> tuple[tuple[int, int | None], ...] | None:
    if region is None:
        return None
    if isinstance(region, slice):
        region = (region,)
    if not isinstance(region, (tuple, list)) or not region:
        raise ContractError(
            f"region={region!r} must be None or a tuple of one slice per spatial axis"
        )
    out: list[tuple[int, int | None]] = []
    for axis, item in enumerate(region):
        if isinstance(item, slice):
            if item.step not in (None, 1):
                raise ContractError(
                    f"region: the slice on axis {axis} has step {item.step}; a region is a box "
                    "(no slice step)"
                )
            lo, hi = item.start, item.stop
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            lo, hi = item
        else:
            raise ContractError(f"region: axis {axis} is {item!r}, not a slice(start, stop)")
        lo = 0 if lo is None else lo
        for bound in (lo, hi):
            if bound is not None and (not _is_int(bound) or bound < 0):
                raise ContractError(
                    f"region: bound {bound!r} on axis {axis} must be a non-negative integer "
                    "(global index) or None"
                )
        if hi is not None and hi <= lo:
            raise ContractError(f"region: the slice [{lo}:{hi}] on axis {axis} is empty")
        out.append((int(lo), None if hi is None else int(hi)))
    return tuple(out)


def _build_steps(steps: Any) -> tuple[int, int | None, int]:
    if steps is None:
        return 0, None, 1
    if _is_int(steps):
        steps = slice(0, None, steps)
    if isinstance(steps, range):
        steps = slice(steps.start, steps.stop, steps.step)
    if not isinstance(steps, slice):
        raise ContractError(
            f"steps={steps!r} must be None, a range, a slice or an int stride "
            "(e.g. range(0, 100, 5))"
        )
    start = 0 if steps.start is None else steps.start
    stride = 1 if steps.step is None else steps.step
    for label, value in (("start", start), ("stop", steps.stop), ("stride", stride)):
        if value is not None and not _is_int(value):
            raise ContractError(f"steps: {label}={value!r} must be an integer")
    if stride < 1:
        raise ContractError(f"steps: stride={stride} must be a positive integer (1 or more)")
    if start < 0:
        raise ContractError(f"steps: start={start} must be non-negative")
    if steps.stop is not None and steps.stop <= start:
        raise ContractError(f"steps: stop={steps.stop} must be after start={start}")
    return int(start), None if steps.stop is None else int(steps.stop), int(stride)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# -- geometry: blocks and regions -----------------------------------------------------------


def block_box(box: Box, chunks: Sequence[Sequence[int]]) -> Box:
    """The blocks intersecting ``box``: one ``[first, last + 1)`` block-index range per axis.

    >>> block_box(((0, 4), (3, 8)), ((4, 4), (4, 4)))
    ((0, 1), (0, 2))
    """
    out = []
    for (lo, hi), sizes in zip(box, chunks, strict=True):
        edges = [0]
        for size in sizes:
            edges.append(edges[-1] + size)
        first = max(i for i in range(len(sizes)) if edges[i] <= lo)
        last = min(i for i in range(len(sizes)) if edges[i + 1] >= hi)
        out.append((first, last + 1))
    return tuple(out)


def sub_chunks(blocks: Box, chunks: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """The chunks of the sub-grid of blocks ``blocks`` (from :func:`block_box`)."""
    return tuple(tuple(sizes[a:b]) for (a, b), sizes in zip(blocks, chunks, strict=True))


def local_slices(box: Box, blocks: Box, chunks: Sequence[Sequence[int]]) -> tuple[slice, ...]:
    """``box`` in the coordinates of the sub-array made of ``blocks``."""
    out = []
    for (lo, hi), (first, _), sizes in zip(box, blocks, chunks, strict=True):
        origin = sum(sizes[:first])
        out.append(slice(lo - origin, hi - origin))
    return tuple(out)


@dataclass(frozen=True)
class Plan:
    """What a step of an array does under the contract in force (the same on every rank).

    ``send``: the step is wanted at all. ``ranks``: the ranks that send a block (``None``:
    every rank). ``origin``: the grid index of the first block sent; block keys are numbered
    from it, so the blocks of a step form a dask array of their own.
    """

    send: bool = True
    ranks: tuple[int, ...] | None = None
    origin: tuple[int, ...] | None = None
    contract: Contract | None = None

    def key_index(self, block_index: Sequence[int]) -> tuple[int, ...]:
        """The index of a block in the step's keys (relative to ``origin``)."""
        if self.origin is None:
            return tuple(block_index)
        return tuple(i - o for i, o in zip(block_index, self.origin, strict=True))

    def sends(self, rank: int) -> bool:
        return self.send and (self.ranks is None or rank in self.ranks)

    def wire(self) -> dict[str, Any] | None:
        """What the step's record carries: the contract followed (``None``: none)."""
        return None if self.contract is None else self.contract.to_wire()


FULL = Plan()


def plan(contract: Contract | None, step: int, chunks: Sequence[Sequence[int]],
         block_index: Sequence[Sequence[int]]) -> Plan:  # fmt: skip
    """The :class:`Plan` of ``step`` under ``contract`` for a decomposition's blocks."""
    if contract is None:
        return FULL
    if not contract.wants(step):
        return Plan(send=False, contract=contract)
    if contract.region is None:
        return Plan(contract=contract)
    blocks = block_box(contract.box, chunks)
    ranks = tuple(
        rank
        for rank, index in enumerate(block_index)
        if all(a <= i < b for i, (a, b) in zip(index, blocks, strict=True))
    )
    return Plan(True, ranks, tuple(a for a, _ in blocks), contract)
