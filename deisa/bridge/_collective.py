"""The Bridge's collective error protocol: every rank raises the same :class:`BridgeError`.

A rank that finds a problem (a bad block, a failed send) does not raise on its own: it hands
the problem to a collective call (``allgather``, ``gather`` then ``bcast``) and every rank
raises the first problem, naming the rank at fault, at the same call. So no rank is left
waiting in a collective that another has abandoned. The checks here are pure: they return the
problem as a string, or ``None``.

Runs on the rank's main thread, the only one that calls MPI.

Imports numpy, the Bridge's options, the arrays' decomposition and boxes, and the exchange's
:func:`~deisa.bridge._exchange.wait` (a request completed without spinning a core).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from ._exchange import wait
from .arrays.boxes import Parcel, parcel_of
from .arrays.decomposition import ArraySpec, Decomposition
from .options import BridgeOptionError, BridgeOptions

logger = logging.getLogger(__name__)

T = TypeVar("T")


class BridgeError(RuntimeError):
    """A collective Bridge operation failed; raised on every rank with the same message."""


def on_root(comm: Any, fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 of ``comm`` and broadcast its result, or its error to raise on
    every rank (as a :class:`BridgeError`).

    The other ranks wait for rank 0 at a non-blocking barrier that they poll
    (:func:`~deisa.bridge._exchange.wait`), not in the broadcast, where the MPI spins a core
    (where ``comm`` has ``Ibarrier``: an mpi4py communicator)."""
    outcome: tuple[bool, Any] = (True, None)
    if comm.Get_rank() == 0:
        try:
            outcome = (True, fn())
        except Exception as exc:
            logger.exception("deisa bridge: rank 0 failed")
            outcome = (False, f"{type(exc).__name__}: {exc}")
    ibarrier = getattr(comm, "Ibarrier", None)  # not on deisa-core's communicators
    if ibarrier is not None:
        wait(ibarrier())
    succeeded, value = comm.bcast(outcome, root=0)
    if not succeeded:
        raise BridgeError(value)
    return value


class ExchangeFields:
    """Named values that rank 0 passes to every rank at a step boundary (main threads).

    Rank 0 calls :meth:`collect` before a collective call (an exchange, the broadcast that ends
    a sync publish) and every rank calls :meth:`deliver` with what came out of it, at the same
    call. For contracts, the worker list and the scheduler's loss: rank 0 caches what the
    scheduler told it, the collective call spreads it.
    """

    def __init__(self) -> None:
        self._fields: dict[str, tuple[Callable[[], Any] | None, Callable[[Any], None]]] = {}

    def add(
        self, name: str, provide: Callable[[], Any] | None, receive: Callable[[Any], None]
    ) -> None:
        """Let rank 0 pass a value named ``name`` to every rank at a step boundary.

        At each exchange (every ``publish``, and the waits of ``publish`` and ``close``), rank 0
        calls ``provide()`` on its main thread (``provide`` is ``None`` on the other ranks); a
        value other than ``None`` is carried to every rank, which calls ``receive(value)`` on
        its main thread right after the exchange, at the same call on every rank. In
        ``mode="sync"`` the value rides on the broadcast that ends each ``publish``.
        """
        self._fields[name] = (provide, receive)

    def collect(self) -> dict[str, Any]:
        """Rank 0: the values to pass now, by name."""
        values: dict[str, Any] = {}
        for name, (provide, _) in self._fields.items():
            value = provide() if provide is not None else None
            if value is not None:
                values[name] = value
        return values

    def deliver(self, values: Mapping[str, Any]) -> None:
        """Every rank: hand each value to its field's ``receive``."""
        for name, value in values.items():
            if name in self._fields:
                self._fields[name][1](value)


def raise_first(problems: list[str | None], extra: str | None = None, sep: str = ": ") -> None:
    """Raise the first rank's problem (``problems[rank]``) as ``rank R<sep><problem>``, else
    ``extra``."""
    for rank, problem in enumerate(problems):
        if problem:
            raise BridgeError(f"rank {rank}{sep}{problem}")
    if extra:
        raise BridgeError(extra)


def check_arrays(arrays: Mapping[str, ArraySpec]) -> str | None:
    """What is wrong with the ``arrays`` given to a Bridge, or ``None``."""
    if not arrays:
        return "arrays is empty: give at least one name -> ArraySpec"
    for name, spec in arrays.items():
        if not isinstance(name, str) or not name:
            return f"array names must be non-empty strings, got {name!r}"
        if not isinstance(spec, ArraySpec):
            return f"arrays[{name!r}] is a {type(spec).__name__}, not an ArraySpec"
    return None


def names_disagree(per_rank: list[list[str]]) -> str | None:
    """Why the ranks' array names (``per_rank[rank]``) do not make one Bridge, or ``None``."""
    for rank, names in enumerate(per_rank):
        if names != per_rank[0]:
            return (
                f"rank {rank} publishes arrays {names}, rank 0 publishes {per_rank[0]}: every "
                "rank of a Bridge's comm holds a block of each of its arrays; an array of some "
                "ranks only needs a Bridge over its own communicator (see deisa.BridgeGroup)"
            )
    return None


def check_block(
    decompositions: Mapping[str, Decomposition],
    specs: Mapping[str, ArraySpec],
    name: str,
    block: Any,
    step: Any,
) -> str | None:
    """What is wrong with this rank's ``publish(name, block, step)``, or ``None``."""
    if name not in decompositions:
        return f"unknown array {name!r}; this Bridge publishes {sorted(decompositions)}"
    if not isinstance(step, (int, np.integer)) or step < 0:
        return f"step={step!r} must be a non-negative integer"
    spec = specs[name]
    if not isinstance(block, np.ndarray):
        return f"block of {name!r} is a {type(block).__name__}, not a numpy array"
    if block.shape != spec.shape:
        return f"block of {name!r} has shape {block.shape}, declared {spec.shape}"
    if block.dtype != spec.dtype:
        return f"block of {name!r} has dtype {block.dtype}, declared {spec.dtype}"
    return None


def check_publish(
    decompositions: Mapping[str, Decomposition],
    specs: Mapping[str, ArraySpec],
    name: str,
    block: Any,
    step: Any,
    start: Any = None,
    shape: Any = None,
) -> tuple[np.ndarray | Parcel | None, str | None]:
    """This rank's ``publish(name, block, step, start=, shape=)``: what it sends (a fixed
    array's block published plain, or this rank's :class:`~.boxes.Parcel` of boxes) and what is
    wrong with it, or ``None``."""
    if name not in decompositions or not isinstance(step, (int, np.integer)) or step < 0:
        return None, check_block(decompositions, specs, name, block, step)
    try:
        parcel = parcel_of(decompositions[name], block, start, shape)
    except ValueError as exc:
        return None, str(exc)
    if parcel is not None:
        return parcel, None
    problem = check_block(decompositions, specs, name, block, step)
    return (None if problem else block), problem


def reply_problem(reply: tuple[str, int, Any], name: str, step: int) -> str | None:
    """A rank's gathered ``(name, step, payload)`` of a sync publish: its problem, or ``None``
    (the payload is the problem when it is a string)."""
    rname, rstep, payload = reply
    if (rname, rstep) != (name, step):
        return (
            f"called publish({rname!r}, step={rstep}) while rank 0 called "
            f"publish({name!r}, step={step})"
        )
    return payload if isinstance(payload, str) else None


def build_options(
    options: BridgeOptions | None, kwargs: dict[str, Any]
) -> tuple[BridgeOptions, str | None]:
    """The options of a Bridge (``options`` with ``kwargs`` applied), and the problem with them
    (to raise collectively) if any; a ``TypeError`` at once for a misspelt keyword."""
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
