"""deisa.bridge._loop: the loop thread, and the calls a publish holds until it returns."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Iterator

import pytest

from deisa.bridge._loop import LoopThread

WAIT = 60.0  # a generous bound for the loop thread to run what it was handed (a loaded machine)


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("test-loop")
    try:
        yield thread
    finally:
        thread.stop()


def on_loop(loop: LoopThread) -> None:
    """Return once the loop has run everything handed to it before this call."""
    loop.run(asyncio.sleep(0), timeout=WAIT)


def test_calls_held_by_a_batch_reach_the_loop_in_order_when_it_ends(loop: LoopThread) -> None:
    seen: list[str] = []
    with loop.batched():
        loop.soon(seen.append, "first")
        future = loop.spawn_soon(_append(seen, "second"))
        loop.soon(seen.append, "third")
        # held: a concurrent wait inside the batch would find nothing run yet
        done, _ = concurrent.futures.wait([future], timeout=0.2)
        assert not done and seen == []
    assert future.result(timeout=WAIT) == "second"
    on_loop(loop)
    # in the order made, as without a batch: a spawned coroutine's task starts at the loop's
    # next turn, after the calls made right behind it (as asyncio.run_coroutine_threadsafe)
    assert seen == ["first", "third", "second"]


def test_outside_a_batch_the_calls_go_at_once(loop: LoopThread) -> None:
    seen: list[str] = []
    loop.soon(seen.append, "now")
    assert loop.spawn_soon(_append(seen, "also")).result(timeout=WAIT) == "also"
    assert seen == ["now", "also"]


def test_a_call_made_on_the_loop_thread_writes_no_wake_up(loop: LoopThread) -> None:
    """From the loop thread itself (a send's completion telling rank 0), ``soon`` and ``spawn``
    queue without writing the loop's self-pipe; from another thread they still wake it."""
    seen: list[str] = []
    writes: list[int] = []
    real = loop.loop._write_to_self  # type: ignore[attr-defined]

    def counted() -> None:
        writes.append(threading.get_ident())
        real()

    loop.loop._write_to_self = counted  # type: ignore[attr-defined]

    def on_the_loop() -> None:
        loop.soon(seen.append, "from the loop")
        spawned.append(loop.spawn(_append(seen, "spawned there")))
        seen.append("first")

    spawned: list[concurrent.futures.Future[str]] = []
    loop.soon(on_the_loop)
    on_loop(loop)
    assert spawned[0].result(timeout=WAIT) == "spawned there"
    assert seen == ["first", "from the loop", "spawned there"]
    assert writes  # this thread's calls woke the loop
    assert all(ident != loop._thread.ident for ident in writes)  # the loop's own call did not


def test_flush_hands_the_calls_over_inside_the_batch(loop: LoopThread) -> None:
    seen: list[str] = []
    with loop.batched():
        loop.soon(seen.append, "held")
        loop.flush()
        on_loop(loop)  # run() flushes too; the point is that flush() alone wakes the loop
        assert seen == ["held"]
        future = loop.spawn_soon(_append(seen, "after"))
        loop.flush()
        assert future.result(timeout=WAIT) == "after"


def test_another_thread_is_not_held_by_this_threads_batch(loop: LoopThread) -> None:
    seen: list[str] = []
    with loop.batched():
        other = threading.Thread(target=lambda: loop.soon(seen.append, "other thread"))
        other.start()
        other.join(WAIT)
        on_loop(loop)
        assert seen == ["other thread"]


def test_a_nested_batch_is_flushed_by_the_outer_one(loop: LoopThread) -> None:
    seen: list[str] = []
    with loop.batched():
        with loop.batched():
            loop.soon(seen.append, "inner")
        # the inner block's end did not flush: still held (nothing woke the loop)
        assert list(loop._calls) and seen == []
    on_loop(loop)
    assert seen == ["inner"]


def test_a_spawned_coroutines_error_reaches_its_future(loop: LoopThread) -> None:
    async def fails() -> None:
        raise ValueError("from the loop")

    with loop.batched():
        future = loop.spawn_soon(fails())
    with pytest.raises(ValueError, match="from the loop"):
        future.result(timeout=WAIT)


def test_a_future_cancelled_before_the_batch_ends_never_runs(loop: LoopThread) -> None:
    ran = threading.Event()

    async def runs() -> None:
        ran.set()

    with loop.batched():
        future = loop.spawn_soon(runs())
        assert future.cancel()
    on_loop(loop)
    assert future.cancelled() and not ran.is_set()


def test_cancelling_a_started_future_cancels_its_task(loop: LoopThread) -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with loop.batched():
        future = loop.spawn_soon(forever())
    assert started.wait(WAIT)
    assert future.cancel()
    assert cancelled.wait(WAIT)
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=WAIT)


def test_stop_closes_the_wake_up_descriptor() -> None:
    thread = LoopThread("test-stop")
    fd, ran = thread._wake_fd, threading.Event()
    assert _names(fd) == "anon_inode:[eventfd]"
    with thread.batched():
        thread.soon(ran.set)
    thread.stop()
    assert ran.is_set()  # the calls held reached the loop before it stopped
    assert _names(fd) != "anon_inode:[eventfd]"  # closed (the number may be reused since)


def _names(fd: int) -> str | None:
    """What descriptor ``fd`` of this process is, or ``None`` if it is closed."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def test_a_call_after_a_batch_runs_after_the_batchs_calls(loop: LoopThread) -> None:
    """The batch's wake-up reaches the loop at its next turn; a call made right after the batch
    (before the loop woke) must not overtake the calls the batch held."""
    seen: list[str] = []
    gate = threading.Event()
    loop.soon(gate.wait, WAIT)  # the loop thread busy, as when the GIL is the caller's
    with loop.batched():
        loop.soon(seen.append, "batched")
    loop.soon(seen.append, "soon after")
    future = loop.spawn(_append(seen, "spawned after"))
    gate.set()
    assert future.result(timeout=WAIT) == "spawned after"
    assert seen == ["batched", "soon after", "spawned after"]


async def _append(seen: list[str], what: str) -> str:
    seen.append(what)
    return what
