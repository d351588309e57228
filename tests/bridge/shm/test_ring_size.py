"""deisa.bridge.shm.ring_size: the slots a ring may hold, for the rank's arrays and the steps
that can be alive (issue 56 item 9)."""

from __future__ import annotations

from deisa.bridge.shm.ring_size import READ_AHEAD, STEADY_HELD, ring_slots


def test_a_ring_holds_each_array_for_every_step_alive() -> None:
    """A block of each array for each step waiting (``buffer_nb``), not registered yet
    (``max_in_flight``) and held by the analytics (its step and ``zip``'s read-ahead)."""
    assert READ_AHEAD == 2 and STEADY_HELD == 3
    assert ring_slots(20, 2, 2) == 20 * (2 + 2 + 2)
    assert ring_slots(1, 1, 1) == 4  # the channel keeps its MAX_SLOTS above that


def test_unbounded_steps_take_a_share_of_the_open_files() -> None:
    """``buffer_nb`` unbounded: an analytics behind lets steps pile up without bound; the ring
    may hold a quarter of the open-file limit (each slot a memfd here and on the worker), and
    never fewer than the unbounded budget's steps."""
    assert ring_slots(20, None, 2, open_files=20000) == 5000
    assert ring_slots(20, None, 2, open_files=64) == 20 * (4 + 2 + 2)
    assert ring_slots(1, None, 2) >= 8  # this process's own limit
