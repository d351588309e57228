"""Decomposition checks: any rectilinear tiling is accepted, anything else names the rank."""

from __future__ import annotations

import numpy as np
import pytest

from deisa.bridge.arrays.decomposition import (
    ArraySpec,
    Decomposition,
    DecompositionError,
    even_split,
)


def grid_specs(shape: tuple[int, int], grid: tuple[int, int]) -> list[ArraySpec]:
    specs = []
    for cx in range(grid[0]):
        for cy in range(grid[1]):
            (x0, h), (y0, w) = even_split(shape[0], grid[0], cx), even_split(shape[1], grid[1], cy)
            specs.append(ArraySpec("float64", shape, (x0, y0), (h, w)))
    return specs


@pytest.mark.parametrize(
    ("shape", "grid"), [((8, 8), (2, 2)), ((31, 34), (2, 2)), ((7, 5), (3, 1))]
)
def test_decomposition_even_and_ragged_grids(shape, grid) -> None:
    dec = Decomposition.from_specs("t", grid_specs(shape, grid))
    assert dec.grid_shape == grid
    assert tuple(sum(c) for c in dec.chunks) == shape
    assert dec.block_index == tuple((cx, cy) for cx in range(grid[0]) for cy in range(grid[1]))


def test_decomposition_ranks_in_any_order() -> None:
    specs = grid_specs((10, 10), (2, 2))[::-1]
    dec = Decomposition.from_specs("t", specs)
    assert dec.block_index == ((1, 1), (1, 0), (0, 1), (0, 0))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.__setitem__(3, ArraySpec("float64", (8, 8), (0, 0), (4, 4))), "ranks 0 and 3"),
        (lambda s: s.pop(), r"1 block\(s\) .* published by no rank: \[4:8, 4:8\]"),
        (
            lambda s: s.__setitem__(1, ArraySpec("float32", (8, 8), (0, 4), (4, 4))),
            "rank 1 has dtype",
        ),
        (
            lambda s: s.__setitem__(2, ArraySpec("float64", (8, 9), (4, 0), (4, 4))),
            "rank 2 has global",
        ),
        (
            lambda s: s.__setitem__(1, ArraySpec("float64", (8, 8), (0, 4), (5, 4))),
            "rank 1's block",
        ),
    ],
)
def test_decomposition_errors_name_the_rank(mutate, message) -> None:
    specs = grid_specs((8, 8), (2, 2))
    mutate(specs)
    with pytest.raises(DecompositionError, match=message):
        Decomposition.from_specs("t", specs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": (0,), "shape": (1, 1)}, "same, non-zero length"),
        (
            {"start": (7, 0), "shape": (2, 8)},
            r"axis 0: block \[7:9\] lies outside the global size 8",
        ),
        ({"start": (0, -1), "shape": (1, 1)}, "must be positive"),
        ({"start": ("a", 0), "shape": (1, 1)}, "start='a'|start=\\('a', 0\\) must be a sequence"),
        ({"dtype": "nope"}, "dtype='nope' is not a numpy dtype"),
    ],
)
def test_array_spec_rejects_bad_blocks(kwargs, message) -> None:
    args = {"dtype": "float64", "global_shape": (8, 8), "start": (0, 0), "shape": (8, 8)} | kwargs
    with pytest.raises((ValueError, TypeError), match=message):
        ArraySpec(**args)


@pytest.mark.parametrize(
    ("dims", "error", "message"),
    [
        ("xy", TypeError, r"dims='xy' must be a list or tuple of names"),
        (("x", 1), TypeError, r"dims=\('x', 1\): 1 is not a string"),
        (("x", ""), ValueError, r"dims=\('x', ''\): a dimension name cannot be empty"),
        (("x",), ValueError, r"dims=\('x',\) gives 1 name\(s\) for 2 spatial axes"),
        (("x", "y", "z"), ValueError, r"dims=.* gives 3 name\(s\) for 2 spatial axes"),
        (["x", "x"], ValueError, r"dims=\['x', 'x'\] names two axes 'x'"),
        (("step", "y"), ValueError, r"dims=.*'step' is the name of the time axis"),
    ],
)
def test_array_spec_dims_errors_name_the_argument(dims, error, message) -> None:
    with pytest.raises(error, match=message):
        ArraySpec("float64", (8, 8), (0, 0), (8, 8), dims=dims)


def test_array_spec_dims_are_carried_by_the_decomposition_and_agree_across_ranks() -> None:
    assert ArraySpec("float64", (8, 8), (0, 0), (8, 8)).dims is None
    specs = [
        ArraySpec(s.dtype, s.global_shape, s.start, s.shape, dims=["x", "y"])
        for s in grid_specs((8, 8), (2, 2))
    ]
    assert specs[0].dims == ("x", "y")  # a list is kept as a tuple
    assert Decomposition.from_specs("t", specs).dims == ("x", "y")
    assert Decomposition.from_specs("t", grid_specs((8, 8), (2, 2))).dims is None
    s = specs[2]
    specs[2] = ArraySpec(s.dtype, s.global_shape, s.start, s.shape, dims=("y", "x"))
    with pytest.raises(DecompositionError, match=r"'t': rank 2 has dims=\('y', 'x'\), rank 0"):
        Decomposition.from_specs("t", specs)
    specs[2] = ArraySpec(s.dtype, s.global_shape, s.start, s.shape)
    with pytest.raises(DecompositionError, match="rank 2 has dims=None"):
        Decomposition.from_specs("t", specs)


def test_array_spec_time_length_reaches_the_metadata_and_agrees_across_ranks() -> None:
    from deisa.bridge.link.connect import meta

    assert ArraySpec("float64", (8, 8), (0, 0), (8, 8)).time_length is None
    specs = [
        ArraySpec(s.dtype, s.global_shape, s.start, s.shape, time_length=np.int64(500))
        for s in grid_specs((8, 8), (2, 2))
    ]
    assert specs[0].time_length == 500 and type(specs[0].time_length) is int
    dec = Decomposition.from_specs("t", specs)
    assert dec.time_length == 500 and meta(dec, "run")["time_length"] == 500
    assert "time_length" not in meta(Decomposition.from_specs("t", grid_specs((8, 8), (2, 2))), "r")
    s = specs[1]
    specs[1] = ArraySpec(s.dtype, s.global_shape, s.start, s.shape, time_length=499)
    with pytest.raises(DecompositionError, match="'t': rank 1 has time_length=499, rank 0 has"):
        Decomposition.from_specs("t", specs)
    for bad in (0, -3, 2.5, True, "500"):
        with pytest.raises(ValueError, match=r"time_length=.* must be a positive integer or None"):
            ArraySpec("float64", (8, 8), (0, 0), (8, 8), time_length=bad)  # type: ignore[arg-type]


def test_even_split_covers_everything() -> None:
    parts = [even_split(10, 4, i) for i in range(4)]
    assert parts == [(0, 3), (3, 3), (6, 2), (8, 2)]


def test_a_moving_array_declares_its_dtype_axes_and_joined_axis() -> None:
    spec = ArraySpec.moving("f4", 2, joined_axis=1, dims=("n", "c"))
    assert (spec.is_moving, spec.ndim, spec.joined_axis, spec.dims) == (True, 2, 1, ("n", "c"))
    assert spec.global_shape == () and not ArraySpec("f8", (4,), (0,), (4,)).is_moving
    dec = Decomposition.from_specs("p", [spec] * 3)
    # its ranks are its grid, in rank order: what the placement policies place
    assert dec.is_moving and dec.chunks == ((1, 1, 1),) and dec.block_index == ((0,), (1,), (2,))
    assert (dec.ndim, dec.joined_axis, dec.global_shape) == (2, 1, ())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"dtype": "nope", "ndim": 1}, TypeError, "dtype='nope'"),
        ({"dtype": "f8", "ndim": 0}, ValueError, "ndim=0 must be a positive integer"),
        ({"dtype": "f8", "ndim": True}, ValueError, "ndim=True"),
        ({"dtype": "f8", "ndim": 2, "joined_axis": 2}, ValueError, "joined_axis=2 must be an axis"),
        ({"dtype": "f8", "ndim": 1, "dims": ("a", "b")}, ValueError, "dims"),
    ],
)
def test_a_moving_arrays_bad_declaration_names_the_argument(kwargs, error, message) -> None:
    dtype, ndim = kwargs.pop("dtype"), kwargs.pop("ndim")
    with pytest.raises(error, match=message):
        ArraySpec.moving(dtype, ndim, **kwargs)


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (ArraySpec.moving("f8", 2), "rank 1 has ndim=2, rank 0 has ndim=1"),
        (ArraySpec.moving("f8", 1), "rank 1 has joined_axis=None, rank 0 has joined_axis=0"),
        (ArraySpec.moving("f4", 1, joined_axis=0), "rank 1 has dtype float32"),
        (ArraySpec("f8", (4,), (0,), (4,)), "rank 1 declares it fixed, rank 0 moving"),
    ],
)
def test_ranks_that_declare_a_moving_array_differently_are_named(other, message) -> None:
    with pytest.raises(DecompositionError, match=message):
        Decomposition.from_specs("x", [ArraySpec.moving("f8", 1, joined_axis=0), other])


def test_a_fixed_blocks_declared_box() -> None:
    dec = Decomposition.from_specs("t", grid_specs((7, 5), (3, 1)))
    assert [dec.declared_box(r) for r in range(3)] == [((0, 0), (3, 5)), ((3, 0), (2, 5)),
                                                       ((5, 0), (2, 5))]  # fmt: skip
