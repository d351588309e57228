"""deisa.analysis.moving: one step of a moving array assembled from its boxes' dask arrays."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from deisa.analysis.moving import MissingRegionError, assemble
from deisa.wire.layout import Box, LayoutError, StepLayout

FULL = np.arange(24.0).reshape(4, 6)


def boxes_of(layout, full=FULL):
    return [da.from_array(full[b.slices]) for b in layout.boxes]


def test_boxes_on_a_grid_keep_their_chunks():
    layout = StepLayout((4, 6), (Box((0, 0), (2, 6)), Box((2, 0), (2, 6))), (1, 1))
    x = assemble(layout, boxes_of(layout))
    assert x.chunks == ((2, 2), (6,))
    np.testing.assert_array_equal(x.compute(), FULL)


def test_boxes_off_a_grid_are_cut_finer():
    layout = StepLayout(
        (4, 6), (Box((0, 0), (4, 3)), Box((0, 3), (2, 3)), Box((2, 3), (2, 3))), (2, 1)
    )
    x = assemble(layout, boxes_of(layout))
    assert x.chunks == ((2, 2), (3, 3))
    np.testing.assert_array_equal(x.compute(), FULL)


def test_a_region_no_box_holds_is_named_unless_filled():
    layout = StepLayout((4, 6), (Box((0, 0), (4, 3)), Box((1, 3), (2, 3))), (1, 1))
    with pytest.raises(MissingRegionError, match=r"no block holds \[0:1, 3:6\], \[3:4, 3:6\]"):
        assemble(layout, boxes_of(layout), what="step 2 of 'rho'")
    x = assemble(layout, boxes_of(layout), fill=-1.0).compute()
    expected = FULL.copy()
    expected[[0, 3], 3:] = -1.0
    np.testing.assert_array_equal(x, expected)


def test_overlapping_boxes_are_named():
    layout = StepLayout((4, 6), (Box((0, 0), (4, 4)), Box((0, 3), (4, 3))), (2,))
    with pytest.raises(LayoutError, match=r"boxes 0 \[0:4, 0:4\] and 1 \[0:4, 3:6\]"):
        assemble(layout, boxes_of(layout))


def test_a_joined_step_with_empty_ranks():
    layout = StepLayout.joined(0, [[(3,)], [], [(2,), (0,)]])
    parts = [da.arange(3.0), da.arange(3.0, 5.0), da.zeros((0,))]
    x = assemble(layout, parts)
    assert x.chunks == ((3, 2),)
    np.testing.assert_array_equal(x.compute(), np.arange(5.0))


def test_an_empty_step_has_the_dtype_given():
    layout = StepLayout.joined(0, [[], []])
    x = assemble(layout, [], dtype="int32")
    assert x.shape == (0,) and x.dtype == np.int32


def test_a_box_array_of_the_wrong_shape_is_named():
    layout = StepLayout((4,), (Box((0,), (4,)),), (1,))
    with pytest.raises(LayoutError, match=r"box 0 \[0:4\] holds an array of shape \(3,\)"):
        assemble(layout, [da.zeros(3)])
