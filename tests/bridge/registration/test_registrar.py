"""deisa.bridge.registration.registrar: rank 0's registrations when the scheduler does not
answer, with a link that fails as a dead scheduler's connection does (pure: no MPI, no Dask).

A registration that fails with an ``OSError`` (the connection reset, refused) is the scheduler
not answering, under either ``on_scheduler_loss``: the worker book decides the loss after
``connect_timeout`` and names it in one message (``docs/reliability.md``); the run with a real
scheduler SIGKILLed is ``tests/test_faults.py``.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

import pytest
from conftest import STARTUP
from distributed.utils_test import async_poll_for
from failing_link import FailingLink, RankZeroComm

from deisa.bridge._parts import BridgeParts
from deisa.bridge._publisher import Entry
from deisa.bridge.options import BridgeOptions
from deisa.bridge.registration.notices import NoticeListener, encode_notice
from deisa.bridge.registration.registrar import EarlyRegistration, Registrar, next_wave
from deisa.wire import ok

W = "tcp://w0"


def _registrar(policy: str, link: Any, lost_after: float) -> Registrar:
    options = BridgeOptions(on_scheduler_loss=policy, connect_timeout=lost_after)
    return Registrar(BridgeParts.new(RankZeroComm(), options), link, threading.Event())  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["continue", "fail"])
def test_a_reset_registration_is_made_again_and_the_scheduler_answering_clears_it(
    policy: str,
) -> None:
    link = FailingLink([ConnectionResetError("reset by peer"), ConnectionRefusedError("refused")])
    registrar = _registrar(policy, link, STARTUP)
    try:
        reply = asyncio.run(registrar._register(Entry(0, "a", 0, 0), []))
        book = registrar.parts.worker_book
        assert reply == ok() and link.calls == 3
        assert book.scheduler_lost() is None
        book.lost_after = 0.0
        assert book.scheduler_lost() is None  # the registration's answer counts as one
    finally:
        registrar.parts.loop.stop()


@pytest.mark.parametrize("policy", ["continue", "fail"])
def test_a_scheduler_whose_registrations_reset_is_lost_with_the_one_message(policy: str) -> None:
    """The book's message, whatever the policy; the registration goes on meanwhile (the
    exchange acts on the loss: fails or detaches every rank at the same call)."""
    link = FailingLink([ConnectionResetError("reset by peer")] * 1000)
    registrar = _registrar(policy, link, 0.5)
    book = registrar.parts.worker_book

    async def run() -> str | None:
        task = asyncio.ensure_future(registrar._register(Entry(0, "a", 0, 0), []))
        await async_poll_for(lambda: book.scheduler_lost() is not None, STARTUP, period=0.05)
        assert not task.done()  # not failed on the reset itself
        task.cancel()
        return book.scheduler_lost()

    try:
        lost = asyncio.run(run())
    finally:
        registrar.parts.loop.stop()
    assert lost is not None and lost.startswith("the scheduler has not answered for")
    assert "connect_timeout=0.5 s" in lost and "its connection closed" in lost  # a reset, in words


def test_a_registration_the_scheduler_refuses_fails_at_once() -> None:
    """Not an OSError (here, what a scheduler without deisa's extension raises): no retry."""
    link = FailingLink([ValueError("no route deisa_publish")])
    registrar = _registrar("continue", link, STARTUP)
    try:
        reply = asyncio.run(registrar._register(Entry(0, "a", 3, 0), []))
    finally:
        registrar.parts.loop.stop()
    assert reply["status"] == "error" and link.calls == 1
    why = "ValueError: no route deisa_publish"
    assert reply["message"] == f"registering step 3 of 'a' failed: {why}"


class CountingLink:
    """A scheduler link that answers every registration after a short wait, recording the
    order of the calls and how many were in flight at once."""

    address = "tcp://127.0.0.1:8786"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.messages: list[list[tuple[str, int]]] = []  # the publications of each message
        self.in_flight = 0
        self.most = 0

    async def register(self, *, name: str, step: int, **_: object) -> dict[str, object]:
        self.messages.append([(name, step)])
        return await self._one(name, step)

    async def _one(self, name: str, step: int) -> dict[str, object]:
        self.calls.append((name, step))
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return ok()

    def publication(self, name: str, step: int, *_: object, **__: object) -> dict[str, object]:
        return {"name": name, "step": step}

    async def register_many(self, publications: list[dict[str, Any]]) -> dict[str, object]:
        self.messages.append([(p["name"], p["step"]) for p in publications])
        replies = await asyncio.gather(*(self._one(p["name"], p["step"]) for p in publications))
        return ok(replies=tuple(replies))  # as msgpack gives a list back

    def register_failed(self, name: str, step: int, exc: BaseException) -> str:
        return f"registering step {step} of {name!r} failed: {exc!r}"


def test_a_steps_arrays_are_registered_together_and_each_array_in_order() -> None:
    """Issue 56 item 9: the publications queued together, one per array (a step of three
    arrays), go to the scheduler at once, one round trip for the step; a second step of an
    array waits for its first; the watermark covers every publication at the end."""
    link = CountingLink()
    registrar = _registrar("continue", link, STARTUP)  # type: ignore[arg-type]
    published = [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1)]

    async def run() -> None:
        registrar._queue = asyncio.Queue()
        for seq, (name, step) in enumerate(published):
            registrar._queue.put_nowait((Entry(seq, name, step, 0), ([], None)))
        registrar._queue.put_nowait(None)
        await registrar._run()

    try:
        asyncio.run(run())
    finally:
        registrar.parts.loop.stop()
    assert link.calls == published and link.most == 3  # waves a0 b0 c0, then a1 b1
    assert link.messages == [published[:3], published[3:]]  # one message a wave
    assert registrar.news.registered == len(published)
    assert registrar.parts.steps.queued_steps() == {"a": 2, "b": 2, "c": 1}


def test_next_wave_stops_before_an_arrays_second_publication() -> None:
    pending = collections.deque((Entry(seq, name, 0, 0), None) for seq, name in enumerate("abab"))
    assert [e.name for e, _ in next_wave(pending)] == ["a", "b"]
    assert [e.name for e, _ in next_wave(pending)] == ["a", "b"]
    assert not pending and next_wave(pending) == []


def test_a_wave_of_one_publication_is_one_deisa_publish_and_a_refused_message_fails_each() -> None:
    """A wave of one array (a fixed array published alone) keeps ``deisa_publish``; a
    ``deisa_publish_many`` the scheduler refuses outright is an error for each publication,
    naming its step and array (the Bridge raises the first on every rank)."""
    link = CountingLink()
    registrar = _registrar("continue", link, STARTUP)  # type: ignore[arg-type]

    async def refuse(publications: list[dict[str, Any]]) -> dict[str, object]:
        raise ValueError("no route deisa_publish_many")

    try:
        one = asyncio.run(registrar._outcomes([(Entry(0, "a", 0, 0), ([], None))]))
        assert one == [ok()] and link.messages == [[("a", 0)]]
        link.register_many = refuse  # type: ignore[method-assign]
        wave = [(Entry(1, "a", 1, 0), ([], None)), (Entry(2, "b", 1, 0), "bad layout")]
        wave.append((Entry(3, "c", 1, 0), ([], None)))
        outcomes = asyncio.run(registrar._outcomes(wave))
    finally:
        registrar.parts.loop.stop()
    assert [o["status"] for o in outcomes] == ["error"] * 3
    assert outcomes[1]["message"] == "bad layout"  # its own error, not the message's
    assert "step 1 of 'a'" in outcomes[0]["message"] and "step 1 of 'c'" in outcomes[2]["message"]
    assert "no route deisa_publish_many" in outcomes[0]["message"]


def test_early_registration_hands_each_publication_once_in_order() -> None:
    """Rank 0's sends, the notices (any order, any rank, through the listener) and the
    exchange's ``ready`` all feed it; each publication reaches the registrar once, in sequence,
    only once it is active."""

    handed: list[tuple[int, list[int]]] = []
    early = EarlyRegistration(
        3, lambda entry, sent: handed.append((entry.seq, [n for n, _ in sent]))
    )
    listener = NoticeListener(3, early.sent)  # as the registrar wires them
    entries = [Entry(seq, "a", seq, 0) for seq in range(3)]
    for entry in entries:
        early.known(entry)
    for rank in range(3):  # publication 1 is complete first, but waits for 0
        early.sent(1, rank, 10 + rank, W)
    assert listener.notice(encode_notice("another job", 0, 0, 1, W)) is False
    early.sent(0, 0, 5, W)
    early.sent(0, 2, 5, W)
    assert handed == []  # rank 1's block of 0 is missing (and the registrar is not running)
    early.activate()
    assert handed == []
    assert listener.notice(encode_notice(listener.token, 0, 1, 5, W)) is True
    assert handed == [(0, [5, 5, 5]), (1, [10, 11, 12])]
    early.ready(entries[0], [(5, W), (5, W), (5, W)])  # the exchange comes later: already handed
    early.ready(entries[1], [(10, W), (11, W), (12, W)])
    early.ready(entries[2], [(7, W), (7, W), (7, W)])  # no notice came for 2: the exchange hands it
    assert handed == [(0, [5, 5, 5]), (1, [10, 11, 12]), (2, [7, 7, 7])]
    assert early.early == 2 and early.next_seq == 3
    early.sent(2, 0, 7, W)  # a late notice is ignored
    assert len(handed) == 3


def test_early_registration_counts_only_the_senders_of_a_contract() -> None:
    handed: list[tuple[int, list[int]]] = []
    early = EarlyRegistration(
        4, lambda entry, sent: handed.append((entry.seq, [n for n, _ in sent]))
    )
    early.activate()
    early.known(Entry(0, "a", 0, 0, senders=(1, 3)))
    early.sent(0, 3, 8, W)
    assert handed == []
    early.sent(0, 1, 8, W)
    assert handed == [(0, [0, 8, 0, 8])]
