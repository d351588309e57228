"""The Bridge's own buffers (:mod:`deisa.bridge._buffers`): a parcel of boxes, whose size changes
from step to step, reuses a free buffer large enough, and a new one leaves room to grow."""

from __future__ import annotations

import numpy as np

from deisa.bridge._buffers import Buffers

F8 = np.dtype("f8")


def test_a_parcel_buffer_is_reused_while_the_parcel_fits_and_grows_a_quarter_beyond() -> None:
    buffers = Buffers()
    first = buffers.take_parcel("x", (100,), F8)
    assert first.shape == (100,) and first.dtype == F8
    buffers.give_back("x", first)
    smaller = buffers.take_parcel("x", (5, 24), F8)  # 120 elements: within the 125 allocated
    assert smaller.shape == (5, 24) and np.shares_memory(smaller, first)
    bigger = buffers.take_parcel("x", (200,), F8)  # the other is still taken: a new one
    assert not np.shares_memory(bigger, smaller) and buffers.peak["x"] == 2
    buffers.give_back("x", smaller)
    buffers.give_back("x", bigger)
    assert np.shares_memory(buffers.take_parcel("x", (150,), F8), bigger)  # the one that fits
    block = buffers.take("y", (2, 2), F8)
    buffers.give_back("y", block)
    assert buffers.take("y", (2, 2), F8) is block
