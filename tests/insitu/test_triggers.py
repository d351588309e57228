"""deisa.insitu.triggers: windows and AND/OR triggers of deisa.insitu.Deisa, without Dask."""

from __future__ import annotations

from collections import namedtuple

import pytest

from deisa.insitu.triggers import (
    AND_AHEAD,
    DEFAULT_SLIDING_WINDOW_SIZE,
    Registration,
    parse_windows,
)

Window = namedtuple("Window", ["name", "size"])  # deisa-core's, without importing it


def test_names_and_windows_parse_as_deisa_dask_does() -> None:
    assert parse_windows(["t", Window("p", 3), Window("d", None)]) == [
        ("t", DEFAULT_SLIDING_WINDOW_SIZE),
        ("p", 3),
        ("d", DEFAULT_SLIDING_WINDOW_SIZE),
    ]
    with pytest.raises(TypeError, match="at least one"):
        parse_windows([])
    with pytest.raises(TypeError, match="str or Window"):
        parse_windows([3])
    with pytest.raises(ValueError, match="positive"):
        parse_windows([Window("t", 0)])
    with pytest.raises(ValueError, match="twice"):
        parse_windows(["t", Window("t", 2)])


def test_a_window_holds_the_last_steps_oldest_first() -> None:
    r = Registration("cb", print, [("t", 3)])
    calls = [r.arrive("t", step, f"t{step}") for step in range(5)]
    assert calls == [
        [["t0"]],
        [["t0", "t1"]],
        [["t0", "t1", "t2"]],
        [["t1", "t2", "t3"]],
        [["t2", "t3", "t4"]],
    ]


def test_and_waits_for_every_array_at_the_same_step() -> None:
    r = Registration("cb", print, [("t", 1), ("p", 2)], when="AND")
    assert r.arrive("t", 0, "t0") is None
    assert r.arrive("p", 0, "p0") == [["t0"], ["p0"]]
    assert r.arrive("t", 1, "t1") is None
    assert r.arrive("t", 2, "t2") is None  # p has not reached 1 yet
    assert r.arrive("p", 1, "p1") == [["t1"], ["p0", "p1"]]  # as they stood at 1: never mixed
    assert r.arrive("p", 2, "p2") == [["t2"], ["p1", "p2"]]
    assert r.arrive("t", 3, "t3") is None
    assert r.arrive("p", 3, "p3") == [["t3"], ["p2", "p3"]]
    assert r.arrive("p", 3, "p3") is None  # step 3 ran already


def test_and_pairs_by_timestep_whichever_array_runs_ahead() -> None:
    """Each array has a reader thread of its own: one may take step 1 before the other's step
    0 arrives. Step 0's run still comes (issue #54: the pair (0, 0) went missing)."""
    for order in (["t0", "t1", "p0", "p1"], ["t0", "p0", "t1", "p1"], ["p0", "t0", "t1", "p1"],
                  ["t0", "t1", "t2", "p0", "p1", "p2"]):  # fmt: skip
        r = Registration("cb", print, [("t", 1), ("p", 1)], when="AND")
        runs = [r.arrive(a[0], int(a[1]), a) for a in order]
        pairs = [(w[0][-1], w[1][-1]) for w in runs if w is not None]
        expected = [(f"t{s}", f"p{s}") for s in range(len(order) // 2)]
        assert pairs == expected, order


def test_and_skips_a_step_one_array_never_received() -> None:
    r = Registration("cb", print, [("t", 2), ("p", 1)], when="AND")
    arrivals = [("t", 0), ("t", 1), ("t", 2), ("p", 0), ("p", 2)]
    runs = [r.arrive(n, s, f"{n}{s}") for n, s in arrivals]
    assert [w for w in runs if w is not None] == [[["t0"], ["p0"]], [["t1", "t2"], ["p2"]]]


def test_and_keeps_a_bounded_number_of_steps_ahead_of_the_others() -> None:
    r = Registration("cb", print, [("t", 2), ("p", 1)], when="AND")
    for step in range(AND_AHEAD * 3):
        assert r.arrive("t", step, step) is None  # p never comes
    assert len(r._steps["t"]) == 2 + AND_AHEAD


def test_or_runs_at_every_arrival_with_the_others_as_they_are() -> None:
    r = Registration("cb", print, [("t", 1), ("p", 1)], when="OR")
    assert r.arrive("t", 0, "t0") == [["t0"], []]
    assert r.arrive("p", 0, "p0") == [["t0"], ["p0"]]
    assert r.arrive("p", 1, "p1") == [["t0"], ["p1"]]


def test_steps_must_arrive_in_order_and_when_is_checked() -> None:
    r = Registration("cb", print, [("t", 1)])
    r.arrive("t", 4, "t4")
    with pytest.raises(ValueError, match="monotonically"):
        r.arrive("t", 3, "t3")
    with pytest.raises(ValueError, match="'AND' or 'OR'"):
        Registration("cb", print, [("t", 1)], when="XOR")  # type: ignore[arg-type]
