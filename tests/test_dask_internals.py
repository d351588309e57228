"""The private distributed calls deisa relies on, checked against the installed distributed.

In process: a real scheduler and real workers on this event loop (``gen_cluster``), the block
sent from a Bridge's own event-loop thread and connection pool, as a simulation rank sends it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import dask.array as da
import numpy as np
from distributed import Client
from distributed.utils_test import async_poll_for, gen_cluster

from deisa import _dask_internals
from deisa.bridge._loop import LoopThread
from deisa.bridge.link.connect import open_pool

# a release travels on the client's batched stream: wait for it, generously (a loaded machine)
RELEASE = 60.0


def send_from_a_bridge_thread(worker: str, blocks: dict[Any, np.ndarray]) -> dict[Any, int]:
    """Send ``blocks`` from a private loop thread and pool, as :class:`deisa.Bridge` does."""
    loop = LoopThread()
    try:
        pool = loop.run(open_pool())
        try:
            return loop.run(_dask_internals.send_blocks_to_worker(pool, worker, blocks))
        finally:
            loop.run(pool.close())
    finally:
        loop.stop()


async def held_block(c: Client, s: Any, worker: Any, name: str) -> tuple[str, int, int]:
    """The key of a block of three ones sent to ``worker`` and registered for "holder"."""
    key = (name, 0, 0)
    await _dask_internals.send_blocks_to_worker(c.rpc, worker.address, {key: np.ones(3)})
    _dask_internals.register_keys(s, {key: [worker.address]}, {key: 24}, "holder")
    return key


@gen_cluster(client=True)
async def test_send_register_share_release(c: Client, s: Any, a: Any, b: Any) -> None:
    block = np.arange(12.0).reshape(3, 4)[:, ::2]  # strided view
    key = ("deisa-test-x-0", 0, 0)
    nbytes = await asyncio.to_thread(send_from_a_bridge_thread, a.address, {key: block})
    assert nbytes[key] >= block.nbytes
    assert key in a.data and key not in s.tasks  # no scheduler message

    _dask_internals.register_keys(s, {key: [a.address]}, nbytes, "holder")
    assert key in s.tasks
    assert {cs.client_key for cs in s.tasks[key].who_wants} == {"holder"}
    assert {ws.address for ws in s.tasks[key].who_has} == {a.address}

    _dask_internals.share_keys(s, [key], c.id)  # the taker first: never unreferenced
    _dask_internals.release_keys(s, [key], "holder")
    assert {cs.client_key for cs in s.tasks[key].who_wants} == {c.id}
    future = _dask_internals.future_in_memory(key, c)
    assert future.status == "finished"
    np.testing.assert_array_equal(await future, block)

    del future
    await async_poll_for(lambda: key not in s.tasks and key not in a.data, RELEASE, period=0.01)


@gen_cluster(client=True)
async def test_send_blocks_on_a_comm_of_the_pool_hands_it_back(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    block = np.arange(12.0).reshape(3, 4)[:, ::2]
    key = ("deisa-test-w-0", 0, 0)
    pool = await open_pool()
    try:
        comm = await _dask_internals.open_comm(pool, a.address)
        nbytes = await _dask_internals.send_blocks_on(pool, a.address, comm, {key: block})
        assert nbytes[key] >= block.nbytes
        np.testing.assert_array_equal(a.data[key], block)
        assert key not in s.tasks  # no scheduler message, as send_blocks_to_worker
        assert await _dask_internals.open_comm(pool, a.address) is comm  # back in the pool
    finally:
        await pool.close()


@gen_cluster(client=True)
async def test_release_keys_of_an_unknown_holder_is_a_no_op(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    key = await held_block(c, s, a, "deisa-test-y-0")
    _dask_internals.release_keys(s, [key], "nobody")
    assert {cs.client_key for cs in s.tasks[key].who_wants} == {"holder"}
    _dask_internals.release_keys(s, [key], "holder")
    assert key not in s.tasks


@gen_cluster(client=True)
async def test_share_keys_then_send_batched_after_a_release(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    key = await held_block(c, s, a, "deisa-test-z-0")
    _dask_internals.share_keys(s, [key], c.id)
    assert {cs.client_key for cs in s.tasks[key].who_wants} == {"holder", c.id}

    # a message sent on the batched stream after a release is handled after it
    seen: list[tuple[str, set[str]]] = []

    def handler(client: str, tag: str) -> None:
        seen.append((tag, {cs.client_key for cs in s.tasks[key].who_wants or ()}))

    s.stream_handlers["deisa_test"] = handler
    c._send_to_scheduler({"op": "client-releases-keys", "keys": [key], "client": c.id})
    _dask_internals.send_batched(c, "deisa_test", tag="after")
    await async_poll_for(lambda: bool(seen), RELEASE, period=0.01)
    assert seen == [("after", {"holder"})]
    _dask_internals.release_keys(s, [key], "holder")


@gen_cluster(client=True)
async def test_count_handler_calls(c: Client, s: Any, a: Any, b: Any) -> None:
    counter: Counter[str] = Counter()
    restore = _dask_internals.count_handler_calls(s, counter)
    try:
        await c.scheduler.identity()
        assert await c.submit(sum, [1, 2]) == 3  # update-graph: an async stream handler
    finally:
        restore()
    assert counter["identity"] >= 1
    assert counter["update-graph"] >= 1
    calls = sum(counter.values())
    await c.scheduler.identity()
    assert sum(counter.values()) == calls  # restored: no longer counted


def test_graph_mappings_finds_a_layer_in_collections_and_in_dasks_expression() -> None:
    """What a client's ``compute``/``persist`` (collections) and ``get`` (dask's expression of
    a computation) are given: the mapping a dask array was built on is found in both."""
    import dask.array as da
    from dask.base import collections_to_expr

    mapping = {("own", 0): np.zeros(2), ("own", 1): np.ones(2)}
    array = da.Array(mapping, "own", chunks=((2, 2),), dtype=float)
    derived = (array + 1).sum()

    def found(obj: Any) -> bool:
        return any(m is mapping for m in _dask_internals.graph_mappings(obj))

    assert found(derived) and found([derived]) and found({"x": (array,)})
    assert found(collections_to_expr([derived]))
    assert not found(da.zeros(4, chunks=2)) and not found(3)


async def _per_step_computations(c: Client, steps: int) -> None:
    """What a stream's analytics does: one computation per step, on keys naming the step."""
    for step in range(steps):
        x = da.full((4, 4), float(step), chunks=2, name=f"deisa-r-t-{step}")
        assert await c.compute(x.sum()) == 16 * step


@gen_cluster(client=True, timeout=RELEASE * 4)
async def test_forget_finished_spans_keeps_the_newest_and_the_unfinished(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    spans = s.extensions["spans"]
    await _per_step_computations(c, 30)
    assert len(spans.spans) == 30  # distributed keeps one per computation, forever
    assert _dask_internals.forget_finished_spans(s, keep=5, grace_s=3600) == 0  # too recent
    held = c.compute(da.ones(4, chunks=2, name="held").sum())
    await held  # finished, but its result is still wanted: its groups are alive
    assert _dask_internals.forget_finished_spans(s, keep=5, grace_s=0) == 25
    assert len(spans.spans) == len(spans.root_spans) == 6
    assert sum(len(found) for found in spans.spans_search_by_name.values()) == 6
    await _per_step_computations(c, 3)  # a new computation gets a span as before
    assert len(spans.spans) == 9
    # a worker's heartbeat with metrics of a forgotten span: skipped, not a KeyError
    s.extensions["spans"].heartbeat(s.workers[a.address], {("execute", "gone", "x", "y", "s"): 1.0})
    del held


@gen_cluster(client=True, nthreads=[("", 1)], timeout=RELEASE * 4)
async def test_fold_span_digests_keeps_the_totals_in_one_entry_per_prefix(
    c: Client, s: Any, a: Any
) -> None:
    await _per_step_computations(c, 20)

    def execute_total(digest: Any) -> float:
        return sum(v for k, v in digest.items() if isinstance(k, tuple) and k[0] == "execute")

    before, keys = execute_total(a.digests_total), len(a.digests_total)
    assert _dask_internals.fold_span_digests(a) > 0
    assert np.isclose(execute_total(a.digests_total), before)
    assert len(a.digests_total) < keys
    folded = len(a.digests_total)
    await _per_step_computations(c, 20)
    _dask_internals.fold_span_digests(a)
    assert len(a.digests_total) == folded  # flat: new steps land in the same entries


def test_trim_key_split_cache_empties_it_at_its_limit() -> None:
    from dask.utils import key_split

    for step in range(50):
        key_split(f"deisa-run-t-{step}")
    assert not _dask_internals.trim_key_split_cache(10**9)
    assert _dask_internals.trim_key_split_cache(50)
    assert key_split.cache_info().currsize == 0


def test_workers_of_names_every_worker_where_scheduler_info_can_miss_them() -> None:
    """``Client.scheduler_info()`` races with the client's own periodic refresh, which fetches
    no per-worker information (here every 1 ms, to make the race common): a worker the
    scheduler has is then missing. :func:`workers_of` asks the scheduler and sees them all."""
    import dask
    from distributed import LocalCluster

    with (
        dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}),
        LocalCluster(
            n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        names = {w.name for w in cluster.workers.values()}
        for _ in range(300):
            workers = _dask_internals.workers_of(client)
            assert {w["name"] for w in workers.values()} == names
            assert all(w["status"] == "running" for w in workers.values())


@gen_cluster(client=True, timeout=RELEASE * 4, config={"distributed.admin.low-level-log-length": 7})
async def test_scheduler_records_counts_each_record_that_could_grow_with_the_steps(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    before = _dask_internals.scheduler_records(s)
    await _per_step_computations(c, 12)
    after = _dask_internals.scheduler_records(s)
    assert after["spans"] == after["root_spans"] == after["computations"] == 12
    assert after["span_index"] == 2 * 12  # each span found by name and by tag
    assert before["transition_log"] < after["transition_log"] == 7  # its configured length
    assert after["events"] <= 7 * after["event_topics"]
    assert 0 < after["stream_messages"] <= 7 * 3  # a batched stream per worker and client
    assert after["clients"] >= 1
    assert set(after) >= {
        "tasks",
        "task_groups",
        "task_prefixes",
        "monitor_samples",
        "key_split_cache",
    }
