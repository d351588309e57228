"""A rank's boxes of a moving step (:mod:`deisa.bridge.arrays.boxes`): checked on the rank with
errors that say what is wrong, packed one after another in C order, described in plain form, and
turned by rank 0 into the step's layout (a joined axis's offsets from the counts in rank order),
with errors naming the ranks; and the keys rank 0 registers
(:func:`deisa.bridge.registration.registrar.registered_blocks`)."""

from __future__ import annotations

import numpy as np
import pytest

from deisa import ArraySpec
from deisa.bridge._collective import check_publish
from deisa.bridge._publisher import Entry
from deisa.bridge.arrays.boxes import MAX_BOXES, Parcel, check_geometry, parcel_of, step_layout
from deisa.bridge.arrays.decomposition import Decomposition
from deisa.bridge.registration.registrar import registered_blocks
from deisa.wire.layout import Box, LayoutError, StepLayout

PARTICLES = Decomposition.from_specs("x", [ArraySpec.moving("f8", 1, joined_axis=0)] * 3)
ROWS = Decomposition.from_specs("p", [ArraySpec.moving("f4", 2, joined_axis=0)] * 2)
FIELD = Decomposition.from_specs("rho", [ArraySpec.moving("f8", 2)] * 3)
FIXED = Decomposition.from_specs("T", [ArraySpec("f8", (3, 4), (r, 0), (1, 4)) for r in range(3)])


def test_a_fixed_block_published_plain_takes_todays_path() -> None:
    assert parcel_of(FIXED, np.zeros((1, 4)), None, None) is None
    block, specs = np.zeros((1, 4)), {"T": ArraySpec("f8", (3, 4), (0, 0), (1, 4))}
    assert check_publish({"T": FIXED}, specs, "T", block, 0) == (block, None)
    assert check_publish({"T": FIXED}, specs, "T", block[:, :2], 0) == (
        None, "block of 'T' has shape (1, 2), declared (1, 4)"
    )  # fmt: skip
    sent, problem = check_publish({"T": FIXED}, specs, "T", block[:, :2], 0, start=(0, 2))
    assert isinstance(sent, Parcel) and problem is None  # a step that moves


def test_boxes_are_packed_one_after_another_in_c_order_one_copy_each() -> None:
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(100.0, 108.0).reshape(4, 2)[:, ::-1]  # a strided view is fine
    parcel = parcel_of(FIELD, [((0, 0), a), ((2, 0), b), ((5, 5), np.zeros((0, 3)))], None,
                       (8, 8))  # fmt: skip
    assert parcel is not None
    assert parcel.geometry == ((8, 8), ((0, 0, 2, 3), (2, 0, 4, 2)))  # the empty box left out
    assert parcel.size == 14 and parcel.shape == (14,)
    out = np.empty(parcel.shape)
    parcel.pack(out)
    np.testing.assert_array_equal(out, np.concatenate([a.ravel(), b.ravel()]))
    one = parcel_of(FIELD, b, (1, 1), None)  # one box: a block of its own shape
    assert one is not None and one.shape == (4, 2) and one.geometry == (None, ((1, 1, 4, 2),))


def test_a_joined_array_keeps_an_empty_boxs_count_for_its_other_axes() -> None:
    parcel = parcel_of(ROWS, [np.zeros((0, 3), "f4")], None, None)
    assert parcel == Parcel((), (None, ((0, 3),)))
    assert parcel.size == 0  # the rank sends nothing
    assert parcel_of(PARTICLES, [], None, None) == Parcel((), (None, ()))


@pytest.mark.parametrize(
    ("dec", "block", "start", "shape", "message"),
    [
        (FIELD, np.zeros((2, 2)), None, (4, 4), "needs its start="),
        (FIELD, [((0, 0), np.zeros((2, 2)))], (0, 0), None, "with a list of boxes"),
        (FIELD, [((3, 3), np.zeros((2, 2)))], None, (4, 4), r"box 0 \[3:5, 3:5\] .* outside"),
        (FIELD, [((0,), np.zeros((2, 2)))], None, None, "start of box 0=.* 2 non-negative"),
        (FIELD, [((0, -1), np.zeros((2, 2)))], None, None, "non-negative"),
        (FIELD, [np.zeros((2, 2))], None, None, "box 0 of 'rho' is not a \\(start, array\\)"),
        (FIELD, [((0, 0), np.zeros(2))], None, None, "box 0 of 'rho' has 1 axes, declared 2"),
        (FIELD, [((0, 0), np.zeros((2, 2), "f4"))], None, None, "dtype float32, declared"),
        (FIELD, [((0, 0), [[1.0]])], None, None, "is a list, not a numpy array"),
        (FIELD, np.zeros((2, 2)), (0, 0), (4, 4.5), "shape=.* integers"),
        (PARTICLES, np.zeros(3), (0,), None, "joined along axis 0: .* give no start="),
        (PARTICLES, np.zeros(3), None, (3,), "give no start= or shape="),
        (FIXED, np.zeros((1, 4)), (0, 1), (3, 4), r"box 0 \[0:1, 1:5\] .* outside .* \(3, 4\)"),
    ],
)  # fmt: skip
def test_wrong_boxes_say_what_is_wrong(
    dec: Decomposition, block: object, start: object, shape: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parcel_of(dec, block, start, shape)


def test_too_many_boxes_are_refused() -> None:
    with pytest.raises(ValueError, match=f"at most {MAX_BOXES}"):
        parcel_of(PARTICLES, [np.zeros(1)] * (MAX_BOXES + 1), None, None)


def test_a_geometry_from_elsewhere_holds_only_non_negative_integers() -> None:
    assert check_geometry([[4, 4], [[0, 0, 2, 2]]]) == ((4, 4), ((0, 0, 2, 2),))
    assert check_geometry([None, []]) == (None, ())
    assert check_geometry(None) is None
    for bad in ([[4], [[True]]], [[4], [[-1]]], [[4], [[1.5]]], [[4]], "xx", [None, "ab"],
                [None, [[0]] * (MAX_BOXES + 1)], [None, [["0"]]]):  # fmt: skip
        with pytest.raises(ValueError):
            check_geometry(bad)


def test_joined_offsets_come_from_the_counts_in_rank_order() -> None:
    geometries = [(0, (None, ())), (1, (None, ((3,),))), (2, (None, ((2,), (4,))))]
    layout, ranks = step_layout(PARTICLES, geometries)
    assert ranks == [1, 2]  # rank 0 holds nothing: no parcel, no box
    assert layout == StepLayout((9,), (Box((0,), (3,)), Box((3,), (2,)), Box((5,), (4,))), (1, 2))
    empty, none = step_layout(ROWS, [(0, (None, ((0, 3),))), (1, (None, ()))])
    assert empty.shape == (0, 3) and none == []  # nobody holds a row: the other axes still known


def test_joined_boxes_that_differ_across_the_other_axes_name_both_ranks() -> None:
    with pytest.raises(LayoutError, match="rank 1's box of count \\(2, 4\\) and rank 0's"):
        step_layout(ROWS, [(0, (None, ((1, 3),))), (1, (None, ((2, 4),)))])


def test_a_boxed_steps_layout_takes_the_shape_one_rank_gives() -> None:
    geometries = [(0, (None, ((0, 0, 2, 4),))), (1, ((4, 4), ((2, 0, 2, 4),))), (2, (None, ()))]
    layout, ranks = step_layout(FIELD, geometries)
    assert layout.shape == (4, 4) and layout.parcels == (1, 1) and ranks == [0, 1]


@pytest.mark.parametrize(
    ("geometries", "message"),
    [
        ([(0, ((4, 4), ())), (2, ((5, 4), ()))], r"rank 2 gives the shape \(5, 4\), rank 0 gives"),
        ([(0, (None, ((0, 0, 1, 1),)))], "no rank gave the step's shape="),
        ([(0, ((4, 4), ())), (1, (None, ((3, 0, 2, 4),)))], r"rank 1's box \[3:5, 0:4\] lies out"),
    ],
)
def test_a_layout_that_does_not_hold_together_names_the_ranks(
    geometries: list, message: str
) -> None:
    with pytest.raises(LayoutError, match=message):
        step_layout(FIELD, geometries)


def test_a_fixed_arrays_step_with_boxes_places_the_plain_ranks_at_their_declared_block() -> None:
    assert step_layout(FIXED, [(0, None), (1, None), (2, None)]) is None  # today's path
    geometries = [(0, None), (1, (None, ((1, 0, 1, 2), (1, 2, 1, 2)))), (2, None)]
    layout, ranks = step_layout(FIXED, geometries)
    assert layout.shape == (3, 4) and ranks == [0, 1, 2]
    assert [str(b) for b in layout.boxes] == [
        "[0:1, 0:4]",
        "[1:2, 0:2]",
        "[1:2, 2:4]",
        "[2:3, 0:4]",
    ]
    # registered: the plain ranks under their grid keys, the boxed one under (step key, rank)
    entry = Entry(0, "T", 5, 0)
    sent = [(32, "w0"), (32, "w1", geometries[1][1]), (32, "w0")]
    blocks, registered = registered_blocks("run", FIXED, entry, sent)
    assert registered == layout
    assert [key for key, _, _ in blocks] == [
        ("deisa-run-T-5", 0, 0), ("deisa-run-T-5", 1), ("deisa-run-T-5", 2, 0)
    ]  # fmt: skip
    plain, none = registered_blocks("run", FIXED, entry, [(32, "w0"), (32, "w1"), (32, "w0")])
    assert none is None and [k for k, _, _ in plain][1] == ("deisa-run-T-5", 1, 0)
