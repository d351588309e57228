"""deisa.wire.layout: a moving array's step layout, checked, on the wire and joined."""

from __future__ import annotations

import pytest

from deisa.wire.layout import Box, LayoutError, StepLayout


def test_round_trip_through_the_wire_form():
    layout = StepLayout(
        (4, 6), (Box((0, 0), (4, 3)), Box((0, 3), (2, 3)), Box((2, 3), (2, 3))), (2, 1)
    )
    assert StepLayout.from_wire(layout.to_wire()) == layout
    assert layout.offsets() == (0, 12, 0)
    assert layout.parcel_sizes() == (18, 6)
    assert layout.parcel_of() == (0, 0, 1)


def test_a_box_outside_the_shape_is_named():
    with pytest.raises(LayoutError, match=r"box 1 \[3:5\] lies outside the step's shape \(4,\)"):
        StepLayout((4,), (Box((0,), (3,)), Box((3,), (2,))), (2,))


def test_parcels_must_count_the_boxes():
    with pytest.raises(LayoutError, match="hold 1 boxes in all, the layout has 2"):
        StepLayout((4,), (Box((0,), (2,)), Box((2,), (2,))), (1,))


def test_joined_places_the_counts_in_rank_order_with_empty_ranks():
    layout = StepLayout.joined(0, [[(3, 2)], [], [(4, 2), (0, 2)]])
    assert layout.shape == (7, 2)
    assert [b.start for b in layout.boxes] == [(0, 0), (3, 0), (7, 0)]
    assert layout.parcels == (1, 0, 2)


def test_joined_refuses_a_box_that_does_not_span_the_other_axes():
    with pytest.raises(LayoutError, match=r"parcel 1: a box of count \(4, 3\)"):
        StepLayout.joined(0, [[(3, 2)], [(4, 3)]])


def test_a_joined_step_nobody_published_is_empty():
    assert StepLayout.joined(0, [[], []]).shape == (0,)


@pytest.mark.parametrize(
    "bad", [{"shape": [4]}, {"shape": [4], "boxes": [[0]], "parcels": [1]}, None]
)
def test_from_wire_refuses_what_is_not_a_layout(bad):
    with pytest.raises(LayoutError):
        StepLayout.from_wire(bad)
