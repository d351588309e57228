"""The scheduler extension's routes, in process: a real scheduler, two real workers, one client.

Each test drives ``deisa_open``/``deisa_publish``/``deisa_close`` as rank 0 of a Bridge does
(the blocks sent to the workers first with the Bridge's own helper, under the Bridge's keys) and
``deisa_get``/``deisa_meta`` as an Adapter does, through the scheduler's RPC, then checks what
the scheduler holds: the tasks, who wants them (the stream's pseudo-client or the reading
client) and the workers' memory, so that a key left behind by a transition fails here.

The real-process tests of the same behaviour (mpirun publishers, ``dask`` processes) are in
``analysis/test_adapter.py``, ``test_faults.py`` and ``test_bridge.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any
from unittest import mock

import numpy as np
import pytest
from distributed import Client, Worker
from distributed.core import Status as Status_
from distributed.utils_test import async_poll_for, captured_logger, gen_cluster
from stream_driver import (
    EXPIRE,
    META,
    WAIT,
    MovingRank0,
    Rank0,
    block,
    fields,
    get,
    held,
    holder,
    install,
    lists,
    moving_meta,
    opened,
    queue,
    take,
    until_released,
    wanted_by,
)

from deisa import _dask_internals
from deisa.launcher.dask_processes import HISTORY_LENGTH, history_config
from deisa.scheduler.extension import EXTENSION_NAME, StreamExtension
from deisa.wire import PROTOCOL, Status, error, is_ok, ok, status, step_key_name

# -- one step, end to end --------------------------------------------------------------------


@gen_cluster(client=True)
async def test_publish_holds_the_blocks_for_the_stream_then_hands_them_to_the_reader(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    rank0 = Rank0(c, [a, b], "t", "r1")
    assert await rank0.open() == ok(protocol=PROTOCOL)
    blocks = await rank0.send(0)
    assert not set(rank0.keys(0)) & set(s.tasks)  # on the workers, unknown to the scheduler
    assert set(rank0.keys(0)) <= set(a.data) | set(b.data)
    reply = await c.scheduler.deisa_publish(name="t", run="r1", step=0, blocks=blocks, timeout=WAIT)
    assert reply == ok()

    for key, worker in zip(rank0.keys(0), (a, b), strict=True):
        ts = s.tasks[key]
        assert ts.state == "memory"
        assert {ws.address for ws in ts.who_has} == {worker.address}
        assert wanted_by(s, key) == {holder("t", "r1")}  # alive with no client connected
    assert ext.stats()["streams"]["t"] == {
        "run": "r1", "published": 1, "taken": 0, "queued": 1, "closed": False, "dropped": [],
        "lost": [], "consumers": {},  # the step waits for the first consumer
    }  # fmt: skip

    record = await get(c, "t")
    assert status(record) is Status.OK
    assert (record["step"], record["run"]) == (0, "r1")
    assert [tuple(k) for k in record["keys"]] == rank0.keys(0)
    assert {k: lists(record["meta"][k]) for k in META} == META  # extra fields are fine
    for key in rank0.keys(0):
        assert wanted_by(s, key) == {c.id}  # handed over in the same call: never unreferenced
    assert held(s, holder("t", "r1")) == set()
    assert ext.stats()["streams"]["t"]["taken"] == 1

    values = await take(c, record)
    np.testing.assert_array_equal(values[0], block(0, 0))
    np.testing.assert_array_equal(values[1], block(0, 1))
    del values
    await until_released(s, [a, b], "r1")  # dropping the futures frees the blocks


@gen_cluster(client=True)
async def test_reader_waiting_before_the_run_opens_gets_its_first_step(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    waiting = asyncio.ensure_future(get(c, "t"))
    meta = asyncio.ensure_future(c.scheduler.deisa_meta(name="t", timeout=WAIT))
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    assert (await meta)["run"] == "r1"
    assert await rank0.publish(0) == ok()
    record = await waiting
    assert (status(record), record["step"], record["run"]) == (Status.OK, 0, "r1")
    assert all(wanted_by(s, key) == {c.id} for key in rank0.keys(0))


@gen_cluster(client=True)
async def test_get_and_meta_timeouts_say_what_is_missing(c: Client, s: Any, a: Any, b: Any) -> None:
    await install(c, s)
    reply = await get(c, "t", timeout=EXPIRE)
    assert fields(reply, "open", "published") == (Status.TIMEOUT, False, 0)
    assert status(await c.scheduler.deisa_meta(name="t", timeout=EXPIRE)) is Status.TIMEOUT
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    await rank0.publish(0)
    assert (await get(c, "t"))["step"] == 0
    reply = await get(c, "t", run="r1", timeout=EXPIRE)
    assert fields(reply, "open", "published") == (Status.TIMEOUT, True, 1)


# -- end of stream -----------------------------------------------------------------------------


@gen_cluster(client=True)
async def test_end_of_stream_follows_the_last_step_and_clears_the_stream(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b])
    for step in (0, 1):
        await rank0.publish(step)
    assert await rank0.close(2, held_s=0.25, open_s=2.0) == ok()
    # the same close again (rank 0 repeats a call whose relay left): nothing changes
    assert await rank0.close(2, held_s=0.25, open_s=2.0) == ok()
    assert ext.streams["t"].finished is False  # two steps still to take
    # what the Bridge says flow control cost it, beside the counts
    totals = ext.stats()["totals"]["t"]
    assert (totals["published"], totals["held_ms"], totals["open_ms"]) == (2, 250, 2000)

    steps = []
    while is_ok(record := await get(c, "t", run="r1")):
        steps.append(record["step"])
        assert [k for k in map(tuple, record["keys"]) if wanted_by(s, k) != {c.id}] == []
        await take(c, record)  # the reader's futures are dropped at once
    assert steps == [0, 1]
    assert fields(record, "nsteps", "run") == (Status.END, 2, "r1")
    # the stream object stays (readers of a next run may wait on it), its run is forgotten
    assert ext.streams["t"].run is None and ext.stats()["streams"]["t"]["run"] is None
    assert held(s, holder("t", "r1")) == set()
    await until_released(s, [a, b], "r1")


@gen_cluster(client=True)
async def test_run_that_published_no_step_ends_for_a_fresh_reader(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b])
    await rank0.close(0)
    assert ext.streams["t"].finished and not ext.streams["t"].consumed
    record = await get(c, "t")
    assert (status(record), record["nsteps"], record["run"]) == (Status.END, 0, "r1")


# -- finished, consumed, replaced ------------------------------------------------------------


@gen_cluster(client=True)
async def test_unfinished_run_refuses_a_new_run_and_stays_intact(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b], publish=[0])
    for closed in (False, True):  # open, then closed with a step not taken: not finished
        if closed:
            await rank0.close(1)
        reply = await Rank0(c, [a, b], "t", "r2").open()
        assert status(reply) is Status.ERROR
        assert (
            "array 't' is already published by run r1, which has not finished" in (reply["message"])
        )
        assert ext.streams["t"].run == "r1"
        assert all(wanted_by(s, key) == {holder("t", "r1")} for key in rank0.keys(0))
    record = await get(c, "t")
    assert (record["step"], record["run"]) == (0, "r1")  # r1's reader still gets its step


@gen_cluster(client=True)
async def test_new_run_replaces_a_finished_run_whose_end_was_never_read(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, old = await opened(c, s, [a, b], publish=[0])
    values = await take(c, await get(c, "t"))  # a loop over a known number of steps ...
    await old.close(1)  # ... never reads the end marker
    assert ext.streams["t"].finished and ext.streams["t"].consumed

    new = Rank0(c, [a, b], "t", "r2")
    assert await new.open() == ok(protocol=PROTOCOL)
    assert ext.streams["t"].queued_steps() == 0 and not ext.streams["t"].closed
    assert await new.publish(0) == ok()
    assert queue(ext, "t") == [0]  # r1's end went with r1

    assert fields(await get(c, "t", run="r1"), "nsteps", "run") == (Status.END, None, "r1")
    record = await get(c, "t")
    assert (status(record), record["step"], record["run"]) == (Status.OK, 0, "r2")
    assert record["meta"]["run"] == "r2"
    assert held(s, holder("t", "r1")) == held(s, holder("t", "r2")) == set()
    assert all(wanted_by(s, key) == {c.id} for key in new.keys(0))
    np.testing.assert_array_equal(values[1], block(0, 1))
    await until_released(s, [a, b], "r1")  # r1's data lived as long as its reader's futures


@gen_cluster(client=True)
async def test_fresh_reader_waits_for_the_next_run_not_a_consumed_end(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, old = await opened(c, s, [a, b], publish=[0])
    await get(c, "t")
    await old.close(1)
    assert ext.streams["t"].consumed
    reply = await get(c, "t", timeout=EXPIRE, consumer="late")  # another Adapter
    assert fields(reply, "open", "published") == (Status.TIMEOUT, False, 0)
    assert status(await c.scheduler.deisa_meta(name="t", timeout=EXPIRE)) is Status.TIMEOUT

    fresh = asyncio.ensure_future(get(c, "t", consumer="fresh"))
    meta = asyncio.ensure_future(c.scheduler.deisa_meta(name="t", timeout=WAIT))
    new = Rank0(c, [a, b], "t", "r2")
    await new.open()
    assert (await meta)["run"] == "r2"
    await new.publish(0)
    record = await fresh
    assert (status(record), record["step"], record["run"]) == (Status.OK, 0, "r2")


# -- flow control ------------------------------------------------------------------------------


async def until_called(ext: StreamExtension, route: str, count: int) -> None:
    """Wait until the route's handler has been entered ``count`` times (it runs on this loop:
    once entered, it is suspended at its wait, or done)."""
    await async_poll_for(lambda: ext.calls[route] >= count, WAIT, period=0.01)


@gen_cluster(client=True)
async def test_publish_waits_while_buffer_nb_steps_are_queued(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b], buffer_nb=2)
    for step in (0, 1):
        assert await rank0.publish(step) == ok()
    third = asyncio.ensure_future(rank0.publish(2))
    await until_called(ext, "publish", 3)
    assert not third.done()
    assert queue(ext, "t") == [0, 1]  # step 2 is not queued ...
    assert all(wanted_by(s, key) == {holder("t", "r1")} for key in rank0.keys(2))  # ... but held

    assert (await get(c, "t"))["step"] == 0  # taking a step makes room
    assert await third == ok()
    assert queue(ext, "t") == [1, 2]
    assert ext.stats()["streams"]["t"]["published"] == 3


@gen_cluster(client=True)
async def test_publish_times_out_and_drops_the_step_when_nobody_takes_one(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b], publish=[0], buffer_nb=1)
    reply = await rank0.publish(1, timeout=EXPIRE)
    assert status(reply) is Status.TIMEOUT
    assert reply["message"] == (
        f"the analytics took no step of 't' for {EXPIRE} s while buffer_nb=1 steps were "
        "waiting (taken so far: 0); step 1 was not delivered (no consumer is attached)"
    )
    assert queue(ext, "t") == [0]
    assert ext.stats()["streams"]["t"]["published"] == 1
    assert held(s, holder("t", "r1")) == set(rank0.keys(0))  # step 1 released ...
    await until_gone(s, [a, b], rank0.keys(1))  # ... and freed
    record = await get(c, "t")
    assert record["step"] == 0
    np.testing.assert_array_equal((await take(c, record))[1], block(0, 1))


@gen_cluster(client=True)
async def test_drop_oldest_keeps_the_newest_buffer_nb_steps_and_frees_the_rest(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b], buffer_nb=2, on_full="drop_oldest")
    with captured_logger("deisa.scheduler", level=logging.WARNING) as log:
        for step in range(5):
            assert await rank0.publish(step, timeout=None) == ok()  # never waits
    assert "dropped step 0 of 't': buffer_nb=2 steps were waiting" in log.getvalue()
    assert "(on_full='drop_oldest'; 3 step(s) dropped so far)" in log.getvalue()
    assert ext.stats()["streams"]["t"]["dropped"] == [0, 1, 2]
    assert held(s, holder("t", "r1")) == set(rank0.keys(3) + rank0.keys(4))
    await until_gone(s, [a, b], [key for step in (0, 1, 2) for key in rank0.keys(step)])

    await rank0.close(5)
    steps = []
    while is_ok(record := await get(c, "t", run="r1")):
        steps.append(record["step"])
        np.testing.assert_array_equal((await take(c, record))[0], block(record["step"], 0))
    assert steps == [3, 4]
    assert record["nsteps"] == 5


@gen_cluster(client=True)
async def test_drop_oldest_spares_the_end_marker(c: Client, s: Any, a: Any, b: Any) -> None:
    ext, rank0 = await opened(c, s, [a, b], publish=[0], buffer_nb=1, on_full="drop_oldest")
    await rank0.close(1)
    assert queue(ext, "t") == [0, "end"]
    assert (await get(c, "t"))["step"] == 0
    assert status(await get(c, "t", run="r1")) is Status.END


# -- errors --------------------------------------------------------------------------------------


@gen_cluster(client=True)
async def test_routes_refuse_a_run_that_did_not_open_the_array(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    stranger = Rank0(c, [a, b], "t", "r0")
    for reply in (await stranger.publish(0), await stranger.close(0)):
        assert reply == error("array 't' was not opened by run r0")
    await Rank0(c, [a, b], "t", "r1").open()
    reply = await stranger.publish(1)
    assert reply == error("array 't' was not opened by run r0")
    assert queue(ext, "t") == []
    assert not set(stranger.keys(1)) & set(s.tasks)  # refused blocks are not registered
    assert ext.stats()["calls"] == {"publish": 2, "close": 1, "open": 1}


@gen_cluster(client=True)
async def test_workers_route_lists_addresses_and_threads_sorted(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    workers = await c.scheduler.deisa_workers()
    assert [tuple(w) for w in workers] == sorted((w.address, w.state.nthreads) for w in (a, b))


@gen_cluster(client=True)
async def test_installing_twice_keeps_the_streams(c: Client, s: Any, a: Any, b: Any) -> None:
    ext = await install(c, s)
    await Rank0(c, [a, b], "t", "r1").open()
    await c.register_plugin(StreamExtension())  # the second Bridge or Adapter to connect
    assert s.plugins[EXTENSION_NAME] is ext and ext.streams["t"].run == "r1"


# -- defects found by these tests, fixed --------------------------------------------------------


@gen_cluster(client=True)
async def test_reader_waiting_on_a_consumed_run_gets_the_next_run_after_its_end_is_read(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, old = await opened(c, s, [a, b], publish=[0])
    await take(c, await get(c, "t"))
    await old.close(1)  # consumed, its end not read yet
    # a new Adapter starts while the old one is still reading (it expires only if never woken)
    fresh = asyncio.ensure_future(get(c, "t", timeout=5, consumer="fresh"))
    meta = asyncio.ensure_future(c.scheduler.deisa_meta(name="t", timeout=5))
    await until_called(ext, "meta", 1)
    assert status(await get(c, "t", run="r1")) is Status.END  # the old Adapter reads the end
    new = Rank0(c, [a, b], "t", "r2")
    await new.open()
    await new.publish(0)
    assert is_ok(await meta)
    record = await fresh
    assert (status(record), record["step"], record["run"]) == (Status.OK, 0, "r2")


@gen_cluster(client=True)
async def test_publish_naming_a_departed_worker_is_lost_for_the_readers_and_leaves_no_key(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b], publish=[0])
    blocks = await rank0.send(1)
    departed = b.address
    await b.close()
    reply = await c.scheduler.deisa_publish(name="t", run="r1", step=1, blocks=blocks, timeout=1)
    assert status(reply) is Status.LOST and departed in reply["message"]
    assert lists(reply["workers"]) == [departed]
    # step 0 had a block on b too: lost in the queue; step 1 never queued but lost in its place
    assert queue(ext, "t") == [("lost", 0), ("lost", 1)]
    assert ext.stats()["streams"]["t"]["lost"] == [[0, departed], [1, departed]]
    await until_released(s, [a], "r1")
    for step in (0, 1):  # the reader learns, in step order, that both were lost
        lost = await get(c, "t")
        assert fields(lost, "step", "run") == (Status.LOST, step, "r1")
        assert lists(lost["workers"]) == [departed] and f"step {step} of 't'" in lost["message"]


@gen_cluster(client=True)
async def test_reader_that_disconnects_while_waiting_does_not_swallow_the_next_step(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    gone = await Client(s.address, asynchronous=True)
    waiting = asyncio.ensure_future(
        gone.scheduler.deisa_get(name="t", client=gone.id, timeout=WAIT, run=None)
    )
    await until_called(ext, "get", 1)
    await gone.close()  # the analytics dies while its deisa_get waits
    with pytest.raises(OSError):
        await waiting
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    await rank0.publish(0)  # queued before the next reader asks: no deadline to meet
    record = await get(c, "t", timeout=EXPIRE)
    assert status(record) is Status.OK and record["step"] == 0
    assert gone.id not in s.clients


@gen_cluster(client=True)
async def test_finished_run_leaves_no_pseudo_client(c: Client, s: Any, a: Any, b: Any) -> None:
    await install(c, s)
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    await rank0.publish(0)
    await take(c, await get(c, "t"))
    await rank0.close(1)
    assert status(await get(c, "t", run="r1")) is Status.END
    await until_released(s, [a, b], "r1")
    assert holder("t", "r1") not in s.clients


# -- a step published again: what a file's slice would do ----------------------------------------


class Republisher(Rank0):
    """Rank 0 of a Bridge that may publish a step again: as the Bridge does, each publication
    of a step gets its own keys (a revision), and here its own values (``block + 100 * rev``)."""

    def __init__(self, c: Client, workers: list[Any], name: str, run: str) -> None:
        super().__init__(c, workers, name, run)
        self.revisions: dict[int, int] = {}

    def keys(self, step: int, revision: int | None = None) -> list[tuple[str, int, int]]:
        """The keys of a step's publication ``revision`` (by default, the next one's)."""
        rev = self.revisions.get(step, 0) if revision is None else revision
        return [(step_key_name(self.run, self.name, step, rev), i, 0) for i in range(2)]

    async def send(self, step: int) -> list[tuple[Any, str, int]]:
        rev = self.revisions.get(step, 0)
        blocks = []
        for i, (key, worker) in enumerate(zip(self.keys(step), self.workers, strict=True)):
            nbytes = await _dask_internals.send_blocks_to_worker(
                self.c.rpc, worker.address, {key: block(step, i) + 100 * rev}
            )
            blocks.append((key, worker.address, nbytes[key]))
        return blocks

    async def publish(self, step: int, timeout: float | None = WAIT) -> dict[str, Any]:
        try:
            return await super().publish(step, timeout)
        finally:
            self.revisions[step] = self.revisions.get(step, 0) + 1


async def until_gone(s: Any, workers: list[Any], keys: list[Any]) -> None:
    """Wait until ``keys`` are neither on the scheduler nor on a worker."""

    def present() -> set[Any]:
        return set(keys) & (set(s.tasks) | {k for w in workers for k in w.data})

    def kept() -> None:
        raise AssertionError(present())

    await async_poll_for(lambda: not present(), WAIT, kept, period=0.01)


@gen_cluster(client=True)
async def test_step_published_again_before_it_is_taken_replaces_it(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    rank0 = Republisher(c, [a, b], "t", "r1")
    await rank0.open(buffer_nb=2)
    for step in (0, 1):
        assert await rank0.publish(step) == ok()
    with captured_logger("deisa.scheduler", level=logging.INFO) as log:
        # buffer_nb steps are queued: a replacement takes no room, so it does not wait
        assert await rank0.publish(1, timeout=EXPIRE) == ok(replaced=True)
    assert "step 1 of 't' published again before the analytics took it" in log.getvalue()
    assert queue(ext, "t") == [0, 1]
    assert held(s, holder("t", "r1")) == set(rank0.keys(0, 0) + rank0.keys(1, 1))
    await until_gone(s, [a, b], rank0.keys(1, 0))  # the overwritten data is freed
    assert ext.stats()["streams"]["t"]["published"] == 2

    await rank0.close(2)
    steps = []
    while is_ok(record := await get(c, "t", run="r1")):
        steps.append(record["step"])
        values = await take(c, record)
        rev = 1 if record["step"] == 1 else 0
        assert [tuple(k) for k in record["keys"]] == rank0.keys(record["step"], rev)
        for i in range(2):
            np.testing.assert_array_equal(values[i], block(record["step"], i) + 100 * rev)
    assert steps == [0, 1] and record["nsteps"] == 2
    await until_released(s, [a, b], "r1")


@gen_cluster(client=True)
async def test_step_published_after_the_reader_passed_it_is_dropped_with_a_warning(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    rank0 = Republisher(c, [a, b], "t", "r1")
    await rank0.open()
    for step in (0, 1, 2):
        await rank0.publish(step)
    first = [await get(c, "t", run="r1") for _ in range(2)]  # the reader takes 0 and 1
    assert [r["step"] for r in first] == [0, 1]
    with captured_logger("deisa.scheduler", level=logging.WARNING) as log:
        again = await rank0.publish(1)  # the step itself was taken
        backwards = await rank0.publish(0)  # an index that goes back past taken steps
    for step, reply in ((1, again), (0, backwards)):
        assert status(reply) is Status.DROPPED
        assert reply["message"] == (
            f"step {step} of 't' was published after the analytics had taken step 1: this "
            "publication was dropped (a step the analytics has passed cannot be replaced)"
        )
        assert reply["message"] in log.getvalue()
    assert queue(ext, "t") == [2]
    assert held(s, holder("t", "r1")) == set(rank0.keys(2, 0))
    await until_gone(s, [a, b], rank0.keys(1, 1) + rank0.keys(0, 1))
    values = await take(c, first[1])  # what the reader took is untouched
    np.testing.assert_array_equal(values[0], block(1, 0))

    assert await rank0.publish(3) == ok()  # the run goes on
    assert [(await get(c, "t", run="r1"))["step"] for _ in range(2)] == [2, 3]
    assert ext.stats()["streams"]["t"]["published"] == 4


@gen_cluster(client=True)
async def test_index_going_backwards_before_the_reader_is_queued_in_step_order(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    rank0 = Republisher(c, [a, b], "t", "r1")
    await rank0.open()
    for step in (0, 2, 1):
        assert await rank0.publish(step) == ok()
    assert queue(ext, "t") == [0, 1, 2]
    await rank0.close(3)
    assert [(await get(c, "t", run="r1"))["step"] for _ in range(3)] == [0, 1, 2]


@gen_cluster(client=True)
async def test_step_waiting_for_room_is_dropped_if_the_reader_passes_it_meanwhile(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    rank0 = Republisher(c, [a, b], "t", "r1")
    await rank0.open(buffer_nb=1)
    await rank0.publish(1)
    earlier = asyncio.ensure_future(rank0.publish(0))  # goes back, waits for room
    await until_called(ext, "publish", 2)
    assert not earlier.done()
    assert (await get(c, "t"))["step"] == 1  # room, but the reader is past step 0 now
    reply = await earlier
    assert status(reply) is Status.DROPPED and "step 0 of 't'" in reply["message"]
    assert queue(ext, "t") == []
    await until_gone(s, [a, b], rank0.keys(0, 0))


# -- several consumers: fan-out, groups, detach ---------------------------------------------------


async def attach(c: Client, name: str, consumer: str, group: str | None = None) -> None:
    """Attach ``consumer`` as an Adapter's first ``meta`` does (the array need not exist)."""
    await c.scheduler.deisa_meta(
        name=name, timeout=EXPIRE, client=c.id, consumer=consumer, group=group
    )


def consumers(ext: StreamExtension, name: str) -> dict[str, Any]:
    return dict(ext.stats()["streams"][name]["consumers"])


@gen_cluster(client=True)
async def test_every_consumer_receives_every_step_and_the_stream_lets_go_after_the_last(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    async with Client(s.address, asynchronous=True) as c2:
        await attach(c, "t", "A")
        await attach(c2, "t", "B")
        rank0 = Rank0(c, [a, b], "t", "r1")
        await rank0.open()
        for step in (0, 1):
            await rank0.publish(step)
        await rank0.close(2)
        assert queue(ext, "t", "A") == queue(ext, "t", "B") == [0, 1, "end"]

        record = await get(c, "t", consumer="A")
        assert record["step"] == 0 and record["confirm"] is False
        assert all(wanted_by(s, k) == {holder("t", "r1"), c.id} for k in rank0.keys(0))
        await take(c, record)
        values = {}
        for step in (0, 1):
            other = await get(c2, "t", consumer="B")
            assert other["step"] == step
            values[step] = await take(c2, other)
        # step 0 went to both: the stream let go; step 1 waits for A
        assert held(s, holder("t", "r1")) == set(rank0.keys(1))
        assert consumers(ext, "t") == {
            "A": {"members": ["A"], "taken": 1, "queued": 1},
            "B": {"members": ["B"], "taken": 2, "queued": 0},
        }
        assert (await take(c, await get(c, "t", consumer="A")))[0][0, 0] == 10.0
        assert status(await get(c2, "t", run="r1", consumer="B")) is Status.END
        assert status(await get(c, "t", run="r1", consumer="A")) is Status.END
        assert ext.streams["t"].run is None  # both read the end: the run retired
        np.testing.assert_array_equal(values[1][1], block(1, 1))
        del values, other
    await until_released(s, [a, b], "r1")


@gen_cluster(client=True)
async def test_group_members_share_the_steps_beside_a_consumer_of_its_own(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    async with (
        Client(s.address, asynchronous=True) as c2,
        Client(s.address, asynchronous=True) as c3,
    ):
        await attach(c, "t", "g1", group="pool")
        await attach(c2, "t", "g2", group="pool")
        await attach(c3, "t", "alone")
        rank0 = Rank0(c, [a, b], "t", "r1")
        await rank0.open()
        for step in range(4):
            await rank0.publish(step)
        assert set(consumers(ext, "t")) == {"group:pool", "alone"}
        assert consumers(ext, "t")["group:pool"]["members"] == ["g1", "g2"]
        shared = []
        for member, client in (("g1", c), ("g2", c2), ("g2", c2), ("g1", c)):
            record = await get(client, "t", consumer=member, group="pool")
            shared.append(record["step"])
            assert all(client.id in wanted_by(s, k) for k in map(tuple, record["keys"]))
            await take(client, record)
        assert shared == [0, 1, 2, 3]  # each step to one member, none twice
        alone = [await get(c3, "t", consumer="alone") for _ in range(4)]
        assert [r["step"] for r in alone] == [0, 1, 2, 3]
        assert held(s, holder("t", "r1")) == set()
        for record in alone:
            await take(c3, record)
        await rank0.close(4)
        for member, client in (("g1", c), ("g2", c2)):  # the end goes to every member
            end = await get(client, "t", run="r1", consumer=member, group="pool")
            assert status(end) is Status.END
        assert set(consumers(ext, "t")) == {"alone"}
    await until_released(s, [a, b], "r1")


@gen_cluster(client=True)
async def test_flow_control_waits_for_the_slowest_and_a_detached_one_stops_counting(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    await attach(c, "t", "fast")
    await attach(c, "t", "slow")
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open(buffer_nb=2)
    for step in (0, 1):
        await rank0.publish(step)
    fast = [await get(c, "t", consumer="fast") for _ in range(2)]
    futures = [_dask_internals.future_in_memory(k, c) for r in fast for k in r["keys"]]
    third = asyncio.ensure_future(rank0.publish(2))
    await until_called(ext, "publish", 3)
    assert not third.done()  # the slow consumer has buffer_nb steps to take
    assert ext.stats()["streams"]["t"]["queued"] == 2

    assert await c.scheduler.deisa_detach(consumer="slow") == ok()
    assert await third == ok()
    assert set(consumers(ext, "t")) == {"fast"}
    # steps 0 and 1: the slow consumer's claim went with it, the fast one's futures hold them
    assert held(s, holder("t", "r1")) == set(rank0.keys(2))
    assert all(wanted_by(s, k) == {c.id} for k in rank0.keys(0) + rank0.keys(1))
    np.testing.assert_array_equal(await futures[2], block(1, 0))
    del futures
    await until_gone(s, [a, b], rank0.keys(0) + rank0.keys(1))


@gen_cluster(client=True)
async def test_consumer_whose_client_dies_is_detached_and_its_steps_released(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    c2 = await Client(s.address, asynchronous=True)
    await attach(c, "t", "alive")
    await attach(c2, "t", "dead")
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open(buffer_nb=1)
    await rank0.publish(0)
    await take(c, await get(c, "t", consumer="alive"))
    blocked = asyncio.ensure_future(rank0.publish(1))  # "dead" has step 0 to take
    await until_called(ext, "publish", 2)
    assert not blocked.done()
    await c2.close()  # the scheduler's remove_client: at once for a closed connection
    assert await blocked == ok()
    assert set(consumers(ext, "t")) == {"alive"}
    assert ext.consumers == {"alive": c.id}
    await until_gone(s, [a, b], rank0.keys(0))  # nobody holds step 0 any more
    assert held(s, holder("t", "r1")) == set(rank0.keys(1))


@gen_cluster(client=True)
async def test_consumer_joining_mid_run_starts_at_the_next_step(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b])
    await rank0.publish(0)  # waits for the first consumer
    await attach(c, "t", "first")
    await rank0.publish(1)
    await attach(c, "t", "late")
    await rank0.publish(2)
    assert queue(ext, "t", "first") == [0, 1, 2]
    assert queue(ext, "t", "late") == [2]
    assert (await get(c, "t", consumer="late"))["step"] == 2
    await rank0.close(3)
    assert status(await get(c, "t", run="r1", consumer="late")) is Status.END
    assert [(await get(c, "t", consumer="first"))["step"] for _ in range(3)] == [0, 1, 2]


@gen_cluster(client=True)
async def test_steps_the_last_consumer_left_wait_for_the_next_one(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    await attach(c, "t", "gone")
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    for step in (0, 1):
        await rank0.publish(step)
    await get(c, "t", consumer="gone")
    await c.scheduler.deisa_detach(consumer="gone", names=["t"])
    assert consumers(ext, "t") == {} and queue(ext, "t") == [1]
    assert held(s, holder("t", "r1")) == set(rank0.keys(1))
    assert (await get(c, "t", consumer="next"))["step"] == 1


@gen_cluster(client=True)
async def test_two_consumers_of_one_client_keep_the_step_until_the_client_confirms(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    await attach(c, "t", "x")
    await attach(c, "t", "y")
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    await rank0.publish(0)
    first = await get(c, "t", consumer="x")
    assert first["confirm"] is False
    del first  # x is done with it: the client may release the keys at any time
    second = await get(c, "t", consumer="y")
    assert second["confirm"] is True
    assert held(s, holder("t", "r1")) == set(rank0.keys(0))  # kept until confirmed
    futures = [_dask_internals.future_in_memory(k, c) for k in second["keys"]]
    c._send_to_scheduler({"op": "client-releases-keys", "keys": rank0.keys(0), "client": c.id})
    _dask_internals.send_batched(c, "deisa_step_taken", name="t", run="r1", step=0)
    await until_called(ext, "step_taken", 1)
    assert held(s, holder("t", "r1")) == set()
    assert all(wanted_by(s, k) == {c.id} for k in rank0.keys(0))  # the claim is back
    np.testing.assert_array_equal(await futures[1], block(0, 1))


# -- workers leaving and joining (issue 25) -----------------------------------------------------


@gen_cluster(client=True)
async def test_watch_workers_answers_when_the_workers_change_or_at_its_timeout(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    both = sorted([[a.address, a.state.nthreads], [b.address, b.state.nthreads]])
    idle = await c.scheduler.deisa_watch_workers(known=[a.address, b.address], timeout=EXPIRE)
    assert fields(idle) == (Status.OK,) and lists(idle["workers"]) == both  # no change
    stale = await c.scheduler.deisa_watch_workers(known=[a.address], timeout=WAIT)
    assert lists(stale["workers"]) == both  # differs already: at once
    watching = asyncio.ensure_future(
        c.scheduler.deisa_watch_workers(known=[a.address, b.address], timeout=WAIT)
    )
    await until_called(s.plugins[EXTENSION_NAME], "watch_workers", 3)
    await b.close()
    left = await watching
    assert lists(left["workers"]) == [[a.address, a.state.nthreads]]
    watching = asyncio.ensure_future(
        c.scheduler.deisa_watch_workers(known=[a.address], timeout=WAIT)
    )
    await until_called(s.plugins[EXTENSION_NAME], "watch_workers", 4)
    async with Worker(s.address, nthreads=3) as w:
        joined = await watching
        assert lists(joined["workers"]) == sorted([[a.address, a.state.nthreads], [w.address, 3]])


@gen_cluster(client=True)
async def test_worker_leaving_loses_the_queued_steps_of_the_readers_that_had_not_taken_them(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b])
    for consumer in ("A", "B"):
        await c.scheduler.deisa_attach(name="t", client=c.id, consumer=consumer)
    for step in (0, 1):
        await rank0.publish(step)
    record = await get(c, "t", consumer="A")  # A takes step 0: its client holds the keys
    futures = [_dask_internals.future_in_memory(key, c) for key in record["keys"]]
    departed = b.address
    await b.close()
    # A had taken step 0: it keeps it (dask reports the block on b lost), B had not
    assert queue(ext, "t", "A") == [("lost", 1)]
    assert queue(ext, "t", "B") == [("lost", 0), ("lost", 1)]
    assert ext.stats()["streams"]["t"]["lost"] == [[0, departed], [1, departed]]
    assert ext.stats()["streams"]["t"]["queued"] == 0  # lost steps do not count
    assert held(s, holder("t", "r1")) == set()  # the stream let go of every lost key
    assert wanted_by(s, rank0.keys(0)[0]) == {c.id}  # step 0's block on a: A's
    rank1 = Rank0(c, [a, a], "t", "r1")  # the simulation goes on, on the worker left
    assert await rank1.publish(2) == ok()
    await rank1.close(3)
    for consumer, steps in (("A", [1]), ("B", [0, 1])):
        for step in steps:
            lost = await get(c, "t", consumer=consumer)
            assert fields(lost, "step") == (Status.LOST, step)
            assert lists(lost["workers"]) == [departed]
        record = await get(c, "t", consumer=consumer)
        assert record["step"] == 2
        await take(c, record)
        if record["confirm"]:  # B took step 2 on the client that took it for A
            _dask_internals.send_batched(c, "deisa_step_taken", name="t", run="r1", step=2)
        assert status(await get(c, "t", run="r1", consumer=consumer)) is Status.END
    del futures, record
    await until_released(s, [a], "r1")


@gen_cluster(client=True)
async def test_a_publish_waiting_for_room_is_freed_by_a_lost_step_and_lost_itself(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b], publish=[0], buffer_nb=1)
    waiting = asyncio.ensure_future(rank0.publish(1))  # buffer_nb=1: waits for room
    await until_called(ext, "publish", 2)
    departed = b.address
    await b.close()
    reply = await waiting  # step 0 lost: room again, but step 1 has a block on b too
    assert status(reply) is Status.LOST and lists(reply["workers"]) == [departed]
    assert "step 1 of 't'" in reply["message"] and departed in reply["message"]
    assert queue(ext, "t") == [("lost", 0), ("lost", 1)]
    await until_released(s, [a], "r1")


@gen_cluster(client=True)
async def test_a_lost_step_published_again_takes_the_place_of_its_lost_marker(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b])
    blocks = await rank0.send(0)
    await b.close()
    reply = await c.scheduler.deisa_publish(name="t", run="r1", step=0, blocks=blocks, timeout=1)
    assert status(reply) is Status.LOST and queue(ext, "t") == [("lost", 0)]
    again = Rank0(c, [a, a], "t", "r1", revision=1)  # sent again, to the worker left
    assert await again.publish(0) == ok()
    assert queue(ext, "t") == [0] and ext.stats()["streams"]["t"]["lost"] == []
    record = await get(c, "t")
    assert record["step"] == 0
    assert [block.tolist() for block in await take(c, record)] == [
        block(0, 0).tolist(),
        block(0, 1).tolist(),
    ]
    await until_released(s, [a], "r1")


@gen_cluster(client=True)
async def test_a_lost_step_whose_marker_was_read_is_passed_and_not_delivered_again(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext, rank0 = await opened(c, s, [a, b], publish=[0])
    await b.close()  # step 0 is lost in the queue
    lost = await get(c, "t")
    assert fields(lost, "step") == (Status.LOST, 0)
    # the reader has passed step 0: a publication of it (or of an earlier step) comes too late
    again = Rank0(c, [a, a], "t", "r1", revision=1)
    reply = await again.publish(0)
    assert status(reply) is Status.DROPPED and "taken step 0" in reply["message"]
    assert queue(ext, "t") == []
    await until_gone(s, [a], rank0.keys(0) + again.keys(0))  # neither publication is held
    assert await again.publish(1) == ok()  # the run goes on after it
    assert fields(await get(c, "t"), "step") == (Status.OK, 1)


@gen_cluster(client=True)
async def test_a_timeout_after_every_consumer_detached_says_so_not_no_consumer(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    _, rank0 = await opened(c, s, [a, b], publish=[0], buffer_nb=1)
    assert (await get(c, "t", consumer="pca"))["step"] == 0
    await rank0.publish(1)
    await c.scheduler.deisa_detach(consumer="pca")  # e.g. the analytics gave up and closed
    reply = await rank0.publish(2, timeout=EXPIRE)
    assert status(reply) is Status.TIMEOUT
    assert reply["message"].endswith(
        "(taken so far: 1); step 2 was not delivered (the consumers that took steps have "
        "detached: none is attached now)"
    )


@gen_cluster(client=True)
async def test_a_run_for_two_consumers_holds_every_step_for_the_one_that_attaches_late(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    """Two analytics started with the simulation: under load the second attaches steps later
    (issue #54: one of them ended with 6 of 20 steps). A run opened for consumers=2 holds its
    steps for the second until it comes, and flow control waits for it meanwhile."""
    ext, rank0 = await opened(c, s, [a, b], publish=[0, 1], buffer_nb=2, consumers=2)
    assert [(await get(c, "t", consumer="first"))["step"] for _ in range(2)] == [0, 1]
    assert status(await rank0.publish(2, timeout=EXPIRE)) is Status.TIMEOUT  # held for "late"
    assert (
        "1 of the consumers=2 expected have not attached"
        in (await rank0.publish(2, timeout=EXPIRE))["message"]
    )
    assert [(await get(c, "t", consumer="late"))["step"] for _ in range(2)] == [0, 1]
    for step in (2, 3):
        assert await rank0.publish(step) == ok()
    await rank0.close(4)
    for consumer in ("first", "late"):
        assert [(await get(c, "t", consumer=consumer)).get("step") for _ in range(3)] == [
            2, 3, None,  # then the end
        ]  # fmt: skip
    assert ext.stats()["streams"]["t"]["run"] is None  # both read the end: the run retired
    assert held(s, holder("t", "r1")) == set()  # the stream let go of every step


@gen_cluster(client=True)
async def test_a_consumer_joining_a_run_for_one_starts_at_the_next_step(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    _, rank0 = await opened(c, s, [a, b], publish=[0], buffer_nb=2)  # consumers=1 (default)
    assert (await get(c, "t", consumer="first"))["step"] == 0
    await c.scheduler.deisa_attach(name="t", client=c.id, consumer="late")
    assert await rank0.publish(1) == ok()
    assert (await get(c, "t", consumer="late"))["step"] == 1


# -- memory pressure ---------------------------------------------------------------------------


@gen_cluster(
    client=True, nthreads=[("", 1), ("", 1)], worker_kwargs={"memory_limit": "100 MB"}, timeout=120
)
async def test_a_worker_paused_for_memory_is_named_to_both_sides_while_flow_control_holds(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    """This test process uses more than 80 % of 100 MB: its workers pause, as a worker whose
    blocks and the analytics' temporaries outgrow its limit does (issue #54: the simulation
    was told "no consumer is attached" while the analytics waited for memory)."""
    await async_poll_for(lambda: all(ws.status.name == "paused" for ws in s.workers.values()), WAIT)
    with captured_logger("deisa.scheduler") as log:
        ext, rank0 = await opened(c, s, [a, b], publish=[0], buffer_nb=1)
        a.status = Status_.running  # its memory monitor pauses it again at once
        await async_poll_for(lambda: "paused for memory" in log.getvalue(), WAIT)
    assert f"worker {a.address} paused for memory (memory limit 95 MiB)" in log.getvalue()

    record = await get(c, "t", consumer="pca")  # the steps still come; computing them waits
    assert record["step"] == 0
    assert any(
        line.startswith(f"worker {a.address} is paused for memory: ")
        and line.endswith("of its memory limit of 95 MiB; its tasks wait until it frees some")
        for line in record["memory"]
    ), record["memory"]
    assert ext.stats()["memory"] == list(ext.pressure())
    assert await rank0.publish(1) == ok()
    reply = await rank0.publish(2, timeout=EXPIRE)  # flow control held it, then gave up
    assert status(reply) is Status.TIMEOUT
    message = reply["message"]
    assert (
        "step 2 was not delivered (slowest reader: pca); the analytics' tasks wait for " in message
    )
    assert f"worker {a.address} is paused for memory" in message
    assert "deisa-run --memory-limit" in message and "no consumer" not in message


# -- long runs ---------------------------------------------------------------------------------


@gen_cluster(client=True, timeout=240)
async def test_a_long_run_keeps_the_schedulers_records_per_step_bounded(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    """Each step's analytics is a computation of its own, on keys naming the step: distributed
    keeps a span and its task groups per computation, forever (about 8 KiB a step, issue #54).
    The extension forgets the finished ones every TRIM_EVERY steps published, beyond the newest
    SPANS_KEPT: the scheduler's records stay flat however many steps a run takes."""
    import dask.array as da
    from dask.utils import key_split

    from deisa.scheduler import _state

    spans = s.extensions["spans"]
    sizes = []
    with (
        mock.patch.object(_state, "SPANS_GRACE_S", 0.0),
        mock.patch.object(_state, "SPANS_KEPT", 5),
        mock.patch.object(_state, "KEY_SPLIT_CACHE", 50),
    ):
        ext, rank0 = await opened(c, s, [a, b], buffer_nb=2)
        for step in range(3 * _state.TRIM_EVERY):
            assert await rank0.publish(step) == ok()
            record = await get(c, "t")
            futures = [_dask_internals.future_in_memory(key, c) for key in record["keys"]]
            blocks = [da.from_delayed(f, (2, 3), float) for f in futures]
            assert await c.compute(da.concatenate(blocks).sum()) == 6 * (20 * step + 1)
            del futures, blocks
            if step % _state.TRIM_EVERY == _state.TRIM_EVERY - 1:
                sizes.append(len(spans.spans))
        await rank0.close(3 * _state.TRIM_EVERY)
    assert max(sizes) <= 5 + 2, sizes  # the newest kept, and those of the last step's take
    # emptied at the first publish after it reached its bound: one step's keys past it at most
    assert key_split.cache_info().currsize <= 50 + 10
    stream = ext.streams["t"]
    assert not stream.pending and not stream.deferred and stream.dropped == deque()
    await until_released(s, [a, b], "r1")


@gen_cluster(client=True, timeout=600, config=history_config(dashboard=False))
async def test_a_long_run_of_moving_steps_leaves_no_record_per_step(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    """Issue 56 item 7: steps of a moving array whose shape changes at every step (8 boxes a
    rank, one parcel each), each taken and summed as the analytics does. After many steps the
    extension holds no record of a taken step (no step, no layout, no queue entry), the
    scheduler no task of one, its spans stay within the newest kept, and distributed's
    histories within the lengths deisa-run gives them (:func:`history_config`), whatever the
    steps taken: a long run's memory is level."""
    import dask.array as da
    from dask.utils import key_split

    from deisa.scheduler import _state

    nboxes, width, steps = 8, 3, _state.TRIM_EVERY + 20  # past the histories' lengths
    seen, cached = [], []
    with (
        mock.patch.object(_state, "SPANS_GRACE_S", 0.0),
        mock.patch.object(_state, "SPANS_KEPT", 5),
        mock.patch.object(_state, "KEY_SPLIT_CACHE", 50),
    ):
        ext = await install(c, s)
        rank0 = MovingRank0(c, [a, b], "m", moving_meta(2))
        assert is_ok(await rank0.open())
        for step in range(steps):
            rows = 1 + step % 5  # of each box: the step's shape changes at every step
            ranks = [
                [((r * nboxes * rows + k * rows, 0), np.full((rows, width), float(step)))
                 for k in range(nboxes)]
                for r in range(2)
            ]  # fmt: skip
            assert await rank0.publish(step, ranks, shape=(2 * nboxes * rows, width)) == ok()
            cached.append(key_split.cache_info().currsize)  # a step's keys (its analytics') added
            record = await get(c, "m", run="r1")
            assert tuple(record["layout"]["shape"]) == (2 * nboxes * rows, width)
            futures = [_dask_internals.future_in_memory(key, c) for key in record["keys"]]
            parcels = [da.from_delayed(f, (nboxes * rows * width,), float) for f in futures]
            total = await c.compute(da.concatenate(parcels).sum())
            assert total == step * 2 * nboxes * rows * width
            del futures, parcels, record
            seen.append(ext.held())
            if step in (steps // 2, steps - 1):
                await asyncio.sleep(0.2)  # the last step's releases in
                ext._trim()
                seen[-1]["records"] = _dask_internals.scheduler_records(s)
        await rank0.close(steps)
    assert max(cached) < 50  # emptied at the publish after it reached its bound, every step
    assert max(h["steps_pending"] for h in seen) <= 1  # the step in hand, never more
    assert max(h["layouts_pending"] for h in seen) <= 1
    assert max(h["queued_entries"] for h in seen) <= 1
    middle, end = seen[steps // 2]["records"], seen[-1]["records"]
    for records in (middle, end):
        assert records["transition_log"] <= HISTORY_LENGTH
        assert records["events"] <= HISTORY_LENGTH * records["event_topics"]
        assert records["stream_messages"] <= HISTORY_LENGTH * 4  # a stream per worker, client
        assert records["spans"] <= 5 + 2, records  # the newest kept, the last steps' takes
        assert records["task_groups"] <= 4, records
    # what the second half of the run added to the records: nothing that counts steps
    assert {k: end[k] - middle[k] for k in ("event_topics", "task_prefixes")} == {
        "event_topics": 0,
        "task_prefixes": 0,
    }
    held_now = ext.held()
    assert held_now["steps_pending"] == held_now["layouts_pending"] == 0
    assert held_now["deferred"] == held_now["tasks"] == 0
    await until_released(s, [a, b], "r1")
    assert not [key for key in s.tasks if "m" in str(key)]
