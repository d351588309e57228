"""How the deisa ADIOS2 engine declares the variables it publishes: fixed or moving.

An ADIOS2 code Puts any number of blocks of a variable in a step, each with its own selection
in the step's shape (``SetShape``, ``SetSelection``), or a joined array's blocks
(``JoinedDim``), and may Put a variable first at any step. The engine (``plugin/adios2/``)
declares each variable to its Bridge at the first published step where some rank Puts it,
with :func:`agree`, collective over the engine's communicator:

- a global single value: a one-element array, rank 0's (:data:`VALUE`), published over a
  communicator of rank 0 alone; one first Put once the Bridge exists: a moving array that
  rank 0 alone gives a box of (``Bridge.declare`` is collective over every rank);
- a variable whose blocks of that step are one per rank, none empty, tiling its shape on a
  grid (:class:`~deisa.bridge.arrays.decomposition.Decomposition`): a *fixed* array
  (:class:`~deisa.bridge.arrays.decomposition.ArraySpec`), today's path and costs; a later step
  that differs (another shape, other or more boxes, a rank with none) carries a layout;
- any other (several blocks on a rank, a rank with none, a gap or an overlap, a joined array):
  a *moving* array (:meth:`ArraySpec.moving <deisa.bridge.arrays.decomposition.ArraySpec.moving>`),
  every step published as boxes.

Every rank takes the same decision from every rank's blocks. Runs on the simulation's thread
that calls ``EndStep`` (from C++), the one that calls MPI.

Imports numpy, mpi4py and the arrays' decomposition only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays.decomposition import ArraySpec, Decomposition, DecompositionError

__all__ = [
    "FIXED",
    "MOVING",
    "VALUE",
    "Declaration",
    "Described",
    "EngineArrayError",
    "agree",
    "decide",
]

logger = logging.getLogger(__name__)

FIXED = "fixed"
"""A variable published on today's path: one block per rank on a grid (its declared block)."""
MOVING = "moving"
"""A variable published as boxes at every step (its shape given per step, or joined)."""
VALUE = "value"
"""A global single value: a one-element array published by rank 0."""

Dims = Sequence[int]
Block = tuple[Dims, Dims, Dims]
"""A block a rank Put in the step: (global shape, start, count); a joined array's start is empty."""


class EngineArrayError(ValueError):
    """The ranks describe one variable in ways that cannot be one array (dtypes, dimensions)."""


@dataclass(frozen=True)
class Described:
    """What one rank Put of a variable not yet declared, in the step being published.

    ``kind``: ``"array"``, ``"joined"`` or ``"value"``; ``joined_axis``: the axis of a joined
    array's ``JoinedDim`` (-1 otherwise)."""

    name: str
    dtype: str
    kind: str
    ndim: int
    joined_axis: int
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Declaration:
    """How a variable is published from now on, on this rank.

    ``path``: :data:`FIXED`, :data:`MOVING` or :data:`VALUE`; ``spec``: its
    :class:`ArraySpec` for ``Bridge``/``Bridge.declare`` (``None`` for a value on a rank other
    than 0); ``global_shape``, ``start``, ``count``: a fixed array's, this rank's block.
    """

    name: str
    dtype: str
    path: str
    joined_axis: int
    spec: ArraySpec | None
    global_shape: tuple[int, ...]
    start: tuple[int, ...]
    count: tuple[int, ...]


def agree(comm_handle: int, mine: Sequence[Any], step: int, created: bool) -> list[Declaration]:
    """Declare the variables that some rank Puts for the first time at ``step``; collective.

    ``comm_handle``: the Fortran handle of the engine's communicator; ``mine``: this rank's new
    variables, tuples ``(name, dtype, kind, ndim, joined_axis, blocks)`` (:class:`Described`;
    rank 0 alone describes single values: the others' are not published); ``created``: whether
    the Bridge exists (the arrays go to ``Bridge.declare``), else they are its first.
    Returns every rank's new variables, by name, the same list on every rank (but for
    ``spec`` and this rank's block).

    Raises
    ------
    EngineArrayError
        On every rank, naming the variable, the step and the ranks: two ranks Put a variable
        with other dtypes, dimensions or kinds.
    """
    from mpi4py import MPI

    comm = MPI.Intracomm(MPI.Comm.f2py(comm_handle))
    rank = comm.Get_rank()
    described = [Described(n, d, k, int(nd), int(j), tuple(_as_block(b) for b in bl))
                 for n, d, k, nd, j, bl in mine]  # fmt: skip
    everyone: list[list[Described]] = comm.allgather(described)
    by_name: dict[str, dict[int, Described]] = {}
    for writer, variables in enumerate(everyone):
        for variable in variables:
            by_name.setdefault(variable.name, {})[writer] = variable
    size = comm.Get_size()
    return [decide(name, by_name[name], size, rank, step, created) for name in sorted(by_name)]


def _as_block(block: Sequence[Dims]) -> Block:
    shape, start, count = block
    return tuple(int(n) for n in shape), tuple(int(s) for s in start), tuple(int(c) for c in count)


def decide(
    name: str, writers: dict[int, Described], size: int, rank: int, step: int, created: bool
) -> Declaration:
    """How ``name`` is published from ``step`` on, on ``rank`` of ``size``, from what each rank
    that Put it (``writers``, by rank) Put of it in that step; ``created``: whether the Bridge
    exists. Pure: :func:`agree` after its exchange.

    Raises
    ------
    EngineArrayError
        The writers disagree on its dtype, kind, dimensions or joined axis.
    """
    first_writer = min(writers)
    ref = writers[first_writer]
    for writer, variable in sorted(writers.items()):
        for field in ("dtype", "kind", "ndim", "joined_axis"):
            if getattr(variable, field) != getattr(ref, field):
                raise EngineArrayError(
                    f"deisa ADIOS2 engine: variable `{name}' is Put at step {step} with "
                    f"{field} {getattr(variable, field)!r} by rank {writer} and "
                    f"{getattr(ref, field)!r} by rank {first_writer}: one variable is one array"
                )
    if ref.kind == "value" and not created:
        spec = ArraySpec(ref.dtype, (1,), (0,), (1,)) if rank == 0 else None
        return Declaration(name, ref.dtype, VALUE, -1, spec, (1,), (0,), (1,))
    fixed = None if ref.kind == "value" else _fixed_specs(name, ref, writers, size)
    if fixed is None:
        joined = None if ref.joined_axis < 0 else ref.joined_axis
        spec = ArraySpec.moving(ref.dtype, ref.ndim, joined_axis=joined)
        logger.debug("variable `%s' published as a moving array from step %d", name, step)
        return Declaration(name, ref.dtype, MOVING, ref.joined_axis, spec, (), (), ())
    mine = fixed[rank]
    return Declaration(name, ref.dtype, FIXED, -1, mine, mine.global_shape, mine.start, mine.shape)


def _fixed_specs(
    name: str, ref: Described, writers: dict[int, Described], size: int
) -> list[ArraySpec] | None:
    """Every rank's block as a fixed array's, if the step's blocks are one per rank, none
    empty, tiling the shape on a grid; else ``None`` (a moving array)."""
    if ref.kind != "array" or len(writers) != size:
        return None
    if any(len(writers[rank].blocks) != 1 for rank in range(size)):
        return None
    blocks = [writers[rank].blocks[0] for rank in range(size)]
    if any(np.prod(count) == 0 for _, _, count in blocks):
        return None
    try:
        specs = [ArraySpec(ref.dtype, shape, start, count) for shape, start, count in blocks]
        Decomposition.from_specs(name, specs)
    except (ValueError, TypeError, DecompositionError):
        return None
    return specs
