"""Arrays held by some ranks only: one :class:`~deisa.Bridge` per communicator, behind one object.

A :class:`~deisa.Bridge` is collective over its communicator, and every rank of it holds a block
of each of its arrays. An array held by some ranks only (a boundary diagnostic of the edge
ranks, a probe) gets a Bridge over its own communicator, e.g. ``comm.Split``, constructed on
the member ranks only: the other ranks never take part in its collectives. Written by hand,
that is two Bridges (see the :class:`~deisa.Bridge` examples). :class:`BridgeGroup` does the
bookkeeping for a caller that sees arrays by name only (the PDI plugin): it groups the arrays
by communicator, builds and closes the Bridges in the same order on every rank, and sends each
:meth:`~BridgeGroup.publish` to the Bridge of its array.

Runs on the rank's main thread, as the Bridges it holds.

Imports numpy, mpi4py (the communicators), the Bridge and its options, the arrays' decomposition
and the collective protocol.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._collective import BridgeError, build_options, raise_first
from .arrays.decomposition import ArraySpec
from .bridge import Bridge
from .options import BridgeOptions
from .step_scope import GroupStepScope

logger = logging.getLogger(__name__)


class BridgeGroup:
    """The Bridges of one rank: one over ``comm``, one per communicator of ``array_comms``.

    Construction and :meth:`close` are collective over ``comm``; :meth:`publish` of an array
    is collective over its own communicator (its member ranks only call it).

    Parameters
    ----------
    scheduler_file
        As for :class:`~deisa.Bridge`.
    arrays
        This rank's block of every array it holds, by name: every array of ``comm`` (those not
        in ``array_comms``), and the arrays of ``array_comms`` whose communicator holds this
        rank.
    comm
        mpi4py communicator of the arrays every rank holds; ``MPI.COMM_WORLD`` by default.
    array_comms
        The communicator of each array held by some ranks only, by name: the same names on
        every rank of ``comm``; ``MPI.COMM_NULL`` (what ``comm.Split(MPI.UNDEFINED)``
        returns) on the ranks outside it. Arrays sharing a communicator share a Bridge; an
        array whose communicator is ``comm`` itself is published over ``comm``.
    options, **kwargs
        As for :class:`~deisa.Bridge`, for every Bridge of the group.

    Attributes
    ----------
    options : BridgeOptions
        The options of every Bridge of the group.
    bridges : dict of tuple of str to Bridge
        This rank's Bridges by the names of their arrays, in construction (and closing)
        order: the Bridge over ``comm`` first, then the others by their first array name.

    Raises
    ------
    BridgeError
        On every rank of ``comm``, naming the rank and the array, for an array held outside
        its communicator (or not held on a member rank), ``array_comms`` naming different
        arrays on different ranks, or a Bridge that failed to be built (its error).

    Examples
    --------
    >>> edge = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)  # doctest: +SKIP
    >>> arrays = {"field": field_spec, **({"boundary": edge_spec} if rank < 2 else {})}
    >>> with BridgeGroup("scheduler.json", arrays, array_comms={"boundary": edge}) as group:
    ...     for step in range(nsteps):  # doctest: +SKIP
    ...         group.publish("field", field, step)
    ...         if rank < 2:
    ...             group.publish("boundary", field[:1], step)
    """

    def __init__(
        self,
        scheduler_file: str,
        arrays: Mapping[str, ArraySpec],
        *,
        comm: Any = None,
        array_comms: Mapping[str, Any] | None = None,
        options: BridgeOptions | None = None,
        **kwargs: Any,
    ) -> None:
        from mpi4py import MPI

        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank: int = self.comm.Get_rank()
        # the same on every Bridge; a bad value is raised by the Bridges, collectively
        self.options: BridgeOptions = build_options(options, kwargs)[0]
        self.bridges: dict[tuple[str, ...], Bridge] = {}
        self._bridge_of: dict[str, Bridge] = {}
        self._whole: Bridge | None = None  # the Bridge over comm
        self._closed = False
        self._making = (scheduler_file, options, kwargs)  # a Bridge over comm made by declare
        array_comms = {name: c for name, c in (array_comms or {}).items() if c != self.comm}
        groups, problem = _groups(arrays, array_comms, MPI.COMM_NULL)
        whole = groups[0][0] if groups and groups[0][1] is None else ()
        members = {
            name: _ranks_in(c, self.comm) for name, c in array_comms.items() if c != MPI.COMM_NULL
        }
        everyone = self.comm.allgather((problem, sorted(array_comms), whole, members))
        raise_first(
            [p for p, _, _, _ in everyone],
            _disagree([k for _, k, _, _ in everyone], [w for _, _, w, _ in everyone])
            or _members_disagree([m for _, _, _, m in everyone]),
            sep=" ",
        )
        failure: str | None = None
        for names, group_comm in groups:
            try:
                bridge = Bridge(
                    scheduler_file,
                    {name: arrays[name] for name in names},
                    comm=self.comm if group_comm is None else group_comm,
                    options=options,
                    **kwargs,
                )
            except (BridgeError, ValueError) as exc:  # on every rank of its communicator
                failure = f"the Bridge of {list(names)}: {exc}"
                break
            self.bridges[names] = bridge
            self._bridge_of.update(dict.fromkeys(names, bridge))
            if group_comm is None:
                self._whole = bridge
        # the ranks of comm outside a failed Bridge learn it here, and all close together
        first = next((f for f in self.comm.allgather(failure) if f), None)
        if first is not None:
            with contextlib.suppress(BridgeError):  # the construction's failure is the news
                self._close_all()
            raise BridgeError(first)
        logger.debug(
            "deisa bridge group: ranks per Bridge %s",
            {names: bridge.comm.Get_size() for names, bridge in self.bridges.items()},
        )

    def bridge(self, name: str) -> Bridge:
        """The Bridge of array ``name`` on this rank.

        Raises
        ------
        BridgeError
            If this rank holds no block of ``name`` (it is outside its communicator, or no
            such array).
        """
        bridge = self._bridge_of.get(name)
        if bridge is None:
            raise BridgeError(
                f"this rank ({self.rank} of comm) holds no block of {name!r}: it publishes "
                f"{sorted(self._bridge_of)}; an array of array_comms is published by the "
                "ranks of its communicator only"
            )
        return bridge

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
        """:meth:`deisa.Bridge.publish` on the Bridge of ``name``: collective over its ranks
        (boxes, ``start`` and ``shape`` as there: data that moves; ``attrs``: the step's)."""
        self.bridge(name).publish(name, block, step, start=start, shape=shape, attrs=attrs)

    def step(self, step: int) -> GroupStepScope:
        """``with group.step(t) as s: s.publish(name, block)``: step ``t`` of several arrays,
        one exchange per Bridge of this rank (:meth:`deisa.Bridge.step` on each,
        :class:`~deisa.bridge.step_scope.GroupStepScope`); collective over ``comm``."""
        return GroupStepScope(self.bridge, list(self.bridges.values()), step)

    def set_attrs(self, name: str, attrs: Mapping[str, Any]) -> None:
        """:meth:`deisa.Bridge.set_attrs` on the Bridge of ``name`` (its rank 0's are sent)."""
        self.bridge(name).set_attrs(name, attrs)

    def declare(self, arrays: Mapping[str, ArraySpec]) -> None:
        """:meth:`deisa.Bridge.declare` on the Bridge over ``comm``: arrays added once the run
        goes on, every rank of ``comm`` holding each; collective over ``comm``. A group whose
        arrays were all held by some ranks gets its Bridge over ``comm`` then."""
        if self._closed:
            raise BridgeError("declare() after close()")
        if self._whole is not None:
            self._whole.declare(arrays)
            self._bridge_of.update(dict.fromkeys(arrays, self._whole))
            return
        scheduler_file, options, kwargs = self._making
        bridge = Bridge(scheduler_file, dict(arrays), comm=self.comm, options=options, **kwargs)
        self.bridges = {tuple(arrays): bridge, **self.bridges}  # closed first, as construction's
        self._bridge_of.update(dict.fromkeys(arrays, bridge))
        self._whole = bridge

    def get(self, name: str, default: Any = None) -> Any:
        """:meth:`deisa.Bridge.get` on the Bridge over ``comm``: collective over ``comm``."""
        if self._whole is None:
            raise BridgeError(
                f"get({name!r}) needs an array that every rank of comm publishes (the group "
                "reads steering values through the Bridge over comm); this group has none"
            )
        return self._whole.get(name, default)

    def flush(self) -> None:
        """:meth:`deisa.Bridge.flush` on every Bridge of this rank, in construction order."""
        for bridge in self.bridges.values():
            bridge.flush()

    def close(self) -> None:
        """Close every Bridge of this rank, in construction order; collective over ``comm``.

        Closing a Bridge flushes it. Raises the first failure, after closing the others.
        """
        if self._closed:
            return
        self._closed = True
        self._close_all()

    def _close_all(self) -> None:
        self._closed = True
        error: BaseException | None = None
        for bridge in self.bridges.values():
            try:
                bridge.close()
            except BridgeError as exc:
                error = error or exc
        if error is not None:
            raise error

    def __enter__(self) -> BridgeGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _groups(
    arrays: Mapping[str, ArraySpec], array_comms: dict[str, Any], null: Any
) -> tuple[list[tuple[tuple[str, ...], Any]], str | None]:
    """This rank's Bridges to build, in order: (names, communicator or None for comm).

    The same order on every rank: the Bridge over comm first, then by first array name, so
    that the collective constructions never cross.
    """
    for name, group_comm in array_comms.items():
        if group_comm == null and name in arrays:
            return [], (
                f"holds a block of {name!r} but array_comms[{name!r}] is MPI.COMM_NULL here: "
                "give its communicator on the ranks that hold it"
            )
        if group_comm != null and name not in arrays:
            return [], (
                f"is in the communicator of {name!r} (array_comms) but gives no block of it in "
                "arrays; each rank of an array's communicator holds a block of it"
            )
    whole = tuple(sorted(name for name in arrays if name not in array_comms))
    partial: list[tuple[tuple[str, ...], Any]] = []
    for name in sorted(name for name in arrays if name in array_comms):
        for i, (names, group_comm) in enumerate(partial):
            if group_comm == array_comms[name]:
                partial[i] = ((*names, name), group_comm)
                break
        else:
            partial.append(((name,), array_comms[name]))
    return ([(whole, None)] if whole else []) + partial, None


def _ranks_in(sub: Any, comm: Any) -> list[int]:
    """The ranks in ``comm`` of the processes of ``sub`` (-1 for a process outside ``comm``)."""
    from mpi4py import MPI

    group, sub_group = comm.Get_group(), sub.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(sub_group, list(range(sub_group.Get_size())), group)
        return [-1 if r == MPI.UNDEFINED else int(r) for r in ranks]
    finally:
        group.Free()
        sub_group.Free()


def _members_disagree(per_rank: list[dict[str, list[int]]]) -> str | None:
    """Whether the ranks holding each array are exactly those of its communicator."""
    for name in sorted({name for members in per_rank for name in members}):
        holders = [rank for rank, members in enumerate(per_rank) if name in members]
        for rank in holders:
            if sorted(per_rank[rank][name]) != holders:
                return (
                    f"array {name!r} is held by ranks {holders} of comm, but the communicator "
                    f"rank {rank} gives for it (array_comms) holds ranks "
                    f"{sorted(per_rank[rank][name])} of comm (-1: outside comm): give the ranks "
                    "that hold an array one communicator of exactly those ranks "
                    "(comm.Split(color), MPI.UNDEFINED elsewhere)"
                )
    return None


def _disagree(keys: list[list[str]], whole: list[tuple[str, ...]]) -> str | None:
    for rank, names in enumerate(keys):
        if names != keys[0]:
            return (
                f"rank {rank} gives array_comms for {names}, rank 0 for {keys[0]}: give "
                "every rank the same names (MPI.COMM_NULL on the ranks outside a communicator)"
            )
    for rank, held in enumerate(whole):
        if held != whole[0]:
            return (
                f"rank {rank} publishes {list(held)} over comm, rank 0 publishes "
                f"{list(whole[0])}: an array that some ranks do not hold needs its own "
                "communicator (array_comms)"
            )
    return None
