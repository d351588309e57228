"""deisa.bridge.link.workers: the worker list rank 0 spreads, and the placement every rank derives
from it (pure: no MPI, no Dask)."""

from __future__ import annotations

import asyncio
import time

from conftest import STARTUP

from deisa.bridge.arrays.decomposition import ArraySpec, Decomposition
from deisa.bridge.arrays.placement import Host
from deisa.bridge.link.workers import Routing, WorkerBook, failure_in_words, refuses_connections
from deisa.wire import ok

W = ["tcp://10.0.0.1:1", "tcp://10.0.0.1:2", "tcp://10.0.0.2:1"]


def grid(nranks: int = 4) -> dict[str, Decomposition]:
    specs = [ArraySpec("f8", (2, 2 * nranks), (0, 2 * r), (2, 2)) for r in range(nranks)]
    return {"t": Decomposition.from_specs("t", specs)}


def test_routing_places_again_over_the_workers_left_the_same_on_every_rank() -> None:
    routings = [Routing("round_robin", grid(), rank, None) for rank in range(4)]
    for routing in routings:
        routing.place(W)
    assert routings[3].worker_of == {"t": W[0]}
    departed = [routing.use(W[:1] + W[2:]) for routing in routings]
    assert departed == [[W[1]]] * 4
    assert [r.worker_of["t"] for r in routings] == [W[0], W[2], W[0], W[2]]
    assert routings[0].use([*W, "tcp://10.0.0.3:1"]) == []  # a worker joins: used at once
    assert "tcp://10.0.0.3:1" in routings[0].placements["t"]


def test_routing_with_no_worker_left_keeps_its_placement() -> None:
    routing = Routing("locality", grid(), 0, None)
    routing.place(W)
    before = dict(routing.placements)
    assert routing.use([]) == W
    assert routing.workers == [] and routing.placements == before


def test_node_local_whose_node_lost_its_workers_places_as_locality() -> None:
    a, b = Host("a", frozenset({"10.0.0.1"})), Host("b", frozenset({"10.0.0.2"}))
    routing = Routing("node_local", grid(), 3, [a, a, b, b])
    routing.place(W)
    assert routing.placements["t"] == [W[0], W[1], W[2], W[2]]  # node-local
    routing.use(W[:2])  # node b's only worker left
    assert routing.policy == "node_local" and set(routing.placements["t"]) == set(W[:2])
    routing.use(W)  # it comes back: node-local again
    assert routing.placements["t"] == [W[0], W[1], W[2], W[2]]


def test_worker_book_spreads_each_change_once_and_names_a_lost_scheduler() -> None:
    book = WorkerBook(lost_after=0.0)
    assert book.to_spread() is None
    book.known(W)
    assert book.to_spread() is None  # every rank has the connection's list
    assert book.scheduler_lost() is None
    book.failing(OSError("connection refused"))
    lost = book.scheduler_lost()
    assert lost is not None and "connect_timeout=0 s" in lost and "it refuses connections" in lost
    book.answered()
    assert book.scheduler_lost() is None
    # issue 54: the scheduler's address, and what failed in words, not distributed's text
    book.scheduler = "tls://127.0.0.1:8786"
    closed = OSError(
        "CommClosedError: in <TCP (closed) ConnectionPool.deisa_watch_workers local=tcp://"
        "127.0.0.1:50090 remote=tcp://127.0.0.1:37879>: Stream is closed"
    )
    book.failing(closed)
    lost = book.scheduler_lost()
    assert lost is not None and lost.startswith("the scheduler has not answered for 0 s")
    assert "(at tls://127.0.0.1:8786; connect_timeout=0 s; its connection closed)" in lost
    assert "Stream is closed" not in lost
    book.answered()
    book.failing(TimeoutError(), since=time.monotonic() - 5)  # unanswered since it was asked
    assert "has not answered for 5 s" in (book.scheduler_lost() or "")
    assert "it did not answer in time" in (book.scheduler_lost() or "")


def test_failure_in_words_keeps_an_unknown_error_short() -> None:
    words = failure_in_words(ValueError("x" * 500 + "\nsecond line"))
    assert words.startswith("last error ValueError: xxx") and len(words) < 220


def test_worker_book_watch_caches_the_scheduler_list_for_one_spread() -> None:
    book = WorkerBook(lost_after=30.0)
    book.known(W)
    asked: list[list[str]] = []

    async def call(known: list[str], timeout: float) -> dict[str, object]:
        asked.append(known)
        if len(asked) > 1:
            await asyncio.Event().wait()  # no further change
        return ok(workers=[[W[2], 1], [W[0], 1]])

    async def watch_until_changed() -> None:
        changed = asyncio.Event()
        task = asyncio.create_task(book.watch(call, changed.set))
        await asyncio.wait_for(changed.wait(), 10)
        task.cancel()

    asyncio.run(watch_until_changed())
    assert asked[0] == W
    assert book.to_spread() == [W[0], W[2]]  # sorted, as every rank places over it
    assert book.to_spread() is None


def test_refuses_connections_only_where_nothing_listens() -> None:
    """A sync send's check that its worker is gone (deisa.bridge._sync): a refusal only."""

    async def check() -> tuple[bool, ...]:
        server = await asyncio.start_server(lambda _, writer: writer.close(), "127.0.0.1", 0)
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        listening = [await refuses_connections(f"{p}://{address}", STARTUP) for p in ("tcp", "tls")]
        server.close()
        await server.wait_closed()
        gone = await refuses_connections(f"tcp://{address}", STARTUP)
        other = await refuses_connections("inproc://127.0.0.1/1/1", STARTUP)  # never checked
        return (*listening, gone, other)

    assert asyncio.run(check()) == (False, False, True, False)
