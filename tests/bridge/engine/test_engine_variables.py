"""deisa.bridge.engine.variables: which of the ADIOS2 engine's variables are fixed, moving or
values.

The decision is pure (:func:`decide`, from every rank's blocks of the step); :func:`agree` makes
the exchange on a real communicator (one rank here; several: tests/test_adios2_moving.py).
"""

from __future__ import annotations

import pytest
from mpi4py import MPI

from deisa.bridge.engine.variables import (
    FIXED,
    MOVING,
    VALUE,
    Described,
    EngineArrayError,
    agree,
    decide,
)


def array(*blocks: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]) -> Described:
    return Described("U", "float64", "array", len(blocks[0][0]) if blocks else 2, -1, blocks)


def test_one_block_per_rank_on_a_grid_is_fixed() -> None:
    writers = {0: array(((4, 6), (0, 0), (2, 6))), 1: array(((4, 6), (2, 0), (2, 6)))}
    got = decide("U", writers, 2, 1, 0, False)
    assert got.path == FIXED and (got.start, got.count, got.global_shape) == (
        (2, 0),
        (2, 6),
        (4, 6),
    )
    assert got.spec is not None and got.spec.start == (2, 0)


@pytest.mark.parametrize(
    "writers",
    [
        {
            0: array(((4, 6), (0, 0), (2, 6)), ((4, 6), (2, 0), (2, 3))),
            1: array(((4, 6), (2, 3), (2, 3))),
        },
        {0: array(((4, 6), (0, 0), (4, 6)))},  # rank 1 Puts nothing
        {0: array(((4, 6), (0, 0), (4, 6))), 1: array(((4, 6), (4, 0), (0, 6)))},  # empty
        {0: array(((4, 6), (0, 0), (2, 6))), 1: array(((4, 6), (1, 0), (2, 6)))},  # an overlap
        {0: array(((4, 6), (0, 0), (1, 6))), 1: array(((4, 6), (2, 0), (2, 6)))},  # a gap
        {0: array(((4, 6), (0, 0), (2, 6))), 1: array(((4, 6), (2, 0), (2, 3)))},  # off the grid
    ],
    ids=["two boxes on a rank", "a rank with none", "an empty block", "overlap", "gap", "off grid"],
)
def test_anything_else_is_moving(writers: dict[int, Described]) -> None:
    got = decide("U", writers, 2, 0, 3, False)
    assert got.path == MOVING and got.spec is not None and got.spec.is_moving
    assert got.spec.ndim == 2 and got.spec.joined_axis is None


def test_a_joined_array_is_moving_along_its_axis() -> None:
    joined = Described("P", "float32", "joined", 2, 0, (((0, 3), (), (5, 3)),))
    got = decide("P", {0: joined, 1: joined}, 2, 0, 0, False)
    assert got.path == MOVING and got.spec is not None and got.spec.joined_axis == 0


def test_a_value_is_rank_0s_and_a_late_one_moves() -> None:
    value = Described("step", "int32", "value", 1, -1, (((1,), (0,), (1,)),))
    first = [decide("step", {0: value}, 3, rank, 0, False) for rank in range(3)]
    assert [d.path for d in first] == [VALUE] * 3
    assert first[0].spec is not None and first[1].spec is None  # over rank 0 alone
    late = decide("step", {0: value}, 3, 2, 4, True)  # once the Bridge exists: declared by all
    assert late.path == MOVING and late.spec is not None and late.spec.ndim == 1


def test_ranks_that_disagree_are_named() -> None:
    other = Described("U", "int32", "array", 2, -1, (((4, 6), (2, 0), (2, 6)),))
    with pytest.raises(EngineArrayError) as error:
        decide("U", {0: array(((4, 6), (0, 0), (2, 6))), 3: other}, 4, 0, 7, False)
    assert str(error.value) == (
        "deisa ADIOS2 engine: variable `U' is Put at step 7 with dtype 'int32' by rank 3 and "
        "'float64' by rank 0: one variable is one array"
    )


def test_agree_on_one_rank_declares_by_name() -> None:
    comm = MPI.COMM_WORLD.Dup()
    try:
        mine = [
            ("x", "float64", "array", 1, -1, [((10,), (0,), (4,)), ((10,), (4,), (6,))]),
            ("T", "int32", "array", 2, -1, [((4, 6), (0, 0), (4, 6))]),
        ]
        got = agree(comm.py2f(), mine, 2, False)
    finally:
        comm.Free()
    assert [(d.name, d.path) for d in got] == [("T", FIXED), ("x", MOVING)]
