"""deisa.bridge.link.scheduler.until_answered: every call of rank 0 to a scheduler that is lost
ends in its loss, in process (no MPI, no Dask): a call that never answers, as one to a dead
scheduler waits in distributed's connect retries."""

from __future__ import annotations

import asyncio
import time

from deisa.bridge.link.scheduler import SchedulerLost, until_answered
from deisa.bridge.link.workers import WorkerBook


async def _never() -> None:
    await asyncio.Event().wait()


def test_a_waiting_call_is_abandoned_once_another_call_found_the_scheduler_lost() -> None:
    """Issue 54: the steering ``get`` waited past the loss (until its own timeout), then
    raised an empty TimeoutError."""
    book = WorkerBook(lost_after=1.0)
    book.failing(ConnectionResetError("the worker watch's connection closed"))
    started = time.monotonic()
    reply = asyncio.run(until_answered(book, _never, give_up=True, attempt_s=60))
    assert isinstance(reply, SchedulerLost)
    assert reply.message.startswith("the scheduler has not answered for 1 s")
    assert "its connection closed" in reply.message
    assert time.monotonic() - started < 10


def test_a_call_without_an_answer_counts_from_when_it_was_made() -> None:
    book = WorkerBook(lost_after=1.0)  # nothing failed before: this call alone decides
    reply = asyncio.run(until_answered(book, _never, give_up=True, attempt_s=1.0))
    assert isinstance(reply, SchedulerLost) and "it did not answer in time" in reply.message


def test_failures_are_asked_again_until_an_answer_clears_them() -> None:
    book = WorkerBook(lost_after=60.0)
    failures = [ConnectionRefusedError("refused"), ConnectionResetError("reset")]

    async def call() -> str:
        if failures:
            raise failures.pop(0)
        return "answer"

    assert asyncio.run(until_answered(book, call, give_up=True)) == "answer"
    assert book.scheduler_lost() is None


def test_without_give_up_the_calls_go_on_past_the_loss() -> None:
    """``mode="async"``'s registrar: the exchange acts on the loss, the call goes on."""
    book = WorkerBook(lost_after=0.0)
    book.failing(ConnectionResetError("reset"))
    failures = [ConnectionRefusedError("refused")]

    async def call() -> str:
        if failures:
            raise failures.pop(0)
        return "answer"

    assert asyncio.run(until_answered(book, call, give_up=False)) == "answer"
