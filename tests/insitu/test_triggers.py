"""deisa.insitu.triggers: windows and AND/OR triggers of deisa.insitu.Deisa, without Dask."""

from __future__ import annotations

from collections import namedtuple

import pytest

from deisa.insitu.triggers import DEFAULT_SLIDING_WINDOW_SIZE, Registration, parse_windows

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
    assert r.arrive("p", 1, "p1") is None  # t is at 2, p at 1: never mixed
    assert r.arrive("p", 2, "p2") == [["t2"], ["p1", "p2"]]  # both moved, both at 2
    assert r.arrive("t", 3, "t3") is None
    assert r.arrive("p", 3, "p3") == [["t3"], ["p2", "p3"]]


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
