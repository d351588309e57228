"""The private distributed calls deisa relies on, checked against the installed distributed."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest
from distributed import Client, LocalCluster

from deisa import _dask_internals
from deisa._loop import LoopThread
from deisa.bridge import _open_pool


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as c,
    ):
        yield c


def test_send_register_transfer_release(client) -> None:
    worker = next(iter(client.scheduler_info(n_workers=-1)["workers"]))
    block = np.arange(12.0).reshape(3, 4)[:, ::2]  # strided view
    key = ("deisa-test-x-0", 0, 0)
    loop = LoopThread()
    try:
        pool = loop.run(_open_pool())
        nbytes = loop.run(_dask_internals.send_blocks_to_worker(pool, worker, {key: block}))
        loop.run(pool.close())
    finally:
        loop.stop()
    assert nbytes[key] >= block.nbytes
    assert client.run_on_scheduler(lambda dask_scheduler: key in dask_scheduler.tasks) is False

    def register(dask_scheduler) -> bool:
        _dask_internals.register_keys(dask_scheduler, {key: [worker]}, nbytes, "holder")
        return key in _dask_internals.known_keys(dask_scheduler)

    assert client.run_on_scheduler(register)
    client_id = client.id
    client.run_on_scheduler(
        lambda dask_scheduler: _dask_internals.transfer_keys(
            dask_scheduler, [key], "holder", client_id
        )
    )
    future = _dask_internals.future_in_memory(key, client)
    assert future.status == "finished"
    np.testing.assert_array_equal(future.result(), block)
    del future
    for _ in range(50):  # the release travels on the client's batched stream
        if not client.run_on_scheduler(lambda dask_scheduler: key in dask_scheduler.tasks):
            break
        time.sleep(0.1)
    assert client.run_on_scheduler(lambda dask_scheduler: key in dask_scheduler.tasks) is False


def test_count_handler_calls(client) -> None:
    def count(dask_scheduler) -> None:
        counter: Counter[str] = Counter()
        dask_scheduler._deisa_test_counter = counter
        dask_scheduler._deisa_test_restore = _dask_internals.count_handler_calls(
            dask_scheduler, counter
        )

    client.run_on_scheduler(count)
    client.scheduler_info(n_workers=-1)
    assert client.submit(sum, [1, 2]).result() == 3  # update-graph: an async stream handler
    counts = client.run_on_scheduler(
        lambda dask_scheduler: dict(dask_scheduler._deisa_test_counter)
    )
    client.run_on_scheduler(lambda dask_scheduler: dask_scheduler._deisa_test_restore())
    assert counts.get("identity", 0) >= 1
    assert counts.get("update-graph", 0) >= 1
    assert sum(counts.values()) >= counts["identity"]
