"""Several arrays of a step with one exchange (:mod:`deisa.bridge.step_scope`): inside
``bridge.step(t)`` each publish's exchange is held (``AsyncPublisher.post_or_hold``) and the end
of the step posts one, whose call names the arrays and the step and whose problem is the first
one, naming its array; ``mode="sync"`` publishes as before. Under mpirun:
tests/test_moving_mpi.py (``--scoped``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import STARTUP

from deisa.bridge._async import AsyncPublisher
from deisa.bridge._loop import LoopThread
from deisa.bridge.step_scope import StepScope


class Transport:
    """What a step tells the transport: its start, the end of its copies, the settle after."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def begin_step(self, expected: Any = None) -> None:
        self.calls.append("begin")

    def end_step(self) -> None:
        self.calls.append("end")

    def settle(self) -> None:
        self.calls.append("settle")


class Parts:
    def __init__(self, calls: list[Any]) -> None:
        self.loop = LoopThread("deisa-test-step-scope")
        self.transport = Transport(calls)


class Publisher:
    """The part of :class:`AsyncPublisher` a step scope drives: its held calls and its posts
    (its own ``begin_step``, ``end_step``), and its Bridge's event loop (real)."""

    begin_step = AsyncPublisher.begin_step
    end_step = AsyncPublisher.end_step
    _declared_bytes = AsyncPublisher._declared_bytes  # asked by the transport (here: never)

    def __init__(self) -> None:
        self.held: list[Any] | None = None
        self.posted: list[tuple[Any, Any]] = []
        self.calls: list[Any] = []  # the transport's, and the posts, in order
        self.parts = Parts(self.calls)

    def post(self, call: Any = None, problem: str | None = None) -> None:
        self.posted.append((call, problem))
        self.calls.append("post")


def scope(publisher: Publisher | None, problems: dict[str, str]) -> tuple[StepScope, list[Any]]:
    published: list[Any] = []

    def publish(name: str, block: Any, step: int, **kwargs: Any) -> None:
        published.append((name, step, kwargs))
        if publisher is not None:  # what AsyncPublisher._publish does at its end
            AsyncPublisher.post_or_hold(publisher, (name, step), problems.get(name))  # type: ignore[arg-type]

    return StepScope(publish, publisher, 7), published  # type: ignore[arg-type]


def test_a_steps_arrays_post_one_exchange_at_its_end() -> None:
    publisher = Publisher()
    step, published = scope(publisher, {})
    with step as s:
        s.publish("Ex", [1])
        s.publish("x", [2], start=(0,), shape=(4,))
        assert publisher.posted == []  # held until the end of the step
    assert publisher.posted == [((("Ex", "x"), 7), None)]
    # the step's blocks packed from its start to the end of its copies, settled after them
    assert publisher.calls == ["begin", "end", "post", "settle"]
    assert published[1] == ("x", 7, {"start": (0,), "shape": (4,)})
    assert publisher.held is None
    AsyncPublisher.post_or_hold(publisher, ("Ex", 8), None)  # type: ignore[arg-type]
    assert publisher.posted[-1] == (("Ex", 8), None)  # outside a step: posted at once


def test_the_first_problem_of_a_step_names_its_array() -> None:
    publisher = Publisher()
    step, _ = scope(publisher, {"rho": "box 1 lies outside", "T": "wrong dtype"})
    with step as s:
        for name in ("x", "rho", "T"):
            s.publish(name, [])
    assert publisher.posted == [((("x", "rho", "T"), 7), "'rho': box 1 lies outside")]


def test_a_step_in_sync_mode_publishes_each_array_and_posts_nothing() -> None:
    step, published = scope(None, {})
    with step as s:
        s.publish("x", [1])
    assert published == [("x", 7, {"start": None, "shape": None})]
    with pytest.raises(RuntimeError, match=r"outside its bridge\.step\(7\)"):
        s.publish("x", [1])


def test_steps_do_not_nest() -> None:
    publisher = Publisher()
    outer, _ = scope(publisher, {})
    inner, _ = scope(publisher, {})
    with outer, pytest.raises(RuntimeError, match=r"inside another bridge\.step"):
        inner.__enter__()


def test_the_loop_calls_of_a_steps_publishes_reach_the_loop_together_at_its_end() -> None:
    """The sends of a step's blocks start together (one hand-over per worker, one registration
    message): the loop runs nothing the step's publishes asked of it before the step ends."""
    publisher = Publisher()
    ran: list[str] = []
    loop = publisher.parts.loop
    try:
        step, _ = scope(publisher, {})
        with step as s:
            for name in ("Ex", "Ey"):
                s.publish(name, [1])
                loop.soon(ran.append, name)  # what a publish's send asks of the loop
            loop.soon(ran.append, "last")
            turn = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "turn"), loop.loop)
            assert turn.result(STARTUP) == "turn" and ran == []  # a call not held would have run
        turn = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "turn"), loop.loop)
        assert turn.result(STARTUP) == "turn"
        assert ran == ["Ex", "Ey", "last"]
    finally:
        loop.stop()
