"""The few places where deisa relies on distributed internals.

Everything that is not part of distributed's documented API is wrapped here, in one small
module covered by ``tests/test_dask_internals.py``, so that an upgrade of distributed breaks one
file and one test, not the whole package.

- :func:`send_blocks_to_worker`: a worker's ``update_data`` RPC, what
  ``Client.scatter(direct=True)`` does internally, without the scheduler round trips
  scatter adds (a cores query and a registration per call).
- :func:`store_on_worker`: the same ``update_data``, called inside the worker (the
  shared-memory path, :mod:`deisa.worker.shm`, hands it arrays over shared slots).
- :func:`open_comm` and :func:`send_blocks_on`: the same RPC in two halves, the connection
  (``ConnectionPool.connect``, documented "for internal use") then the call over it, so that
  a caller can watch the connection being made (``mode="sync"`` sends, docs/reliability.md).
- :func:`register_keys`, :func:`share_keys`, :func:`release_keys`, :func:`forget_holder`: the
  scheduler's own ``update_data``, ``client_desires_keys``/``client_releases_keys`` and
  ``remove_client``, called from inside our scheduler extension (the same calls distributed's
  Queue and Variable extensions make).
- :func:`worker_pool`: a worker's connection pool and its scheduler's address (the relay of
  rank 0's calls, :mod:`deisa.worker.relay`, calls the scheduler as the worker does).
- :func:`send_batched`: a message on a client's batched stream to the scheduler.
- :func:`future_in_memory`: a :class:`~distributed.Future` for a key the scheduler already
  counts as wanted by this client.
- :func:`graph_mappings`: the mappings of the materialized layers of dask collections or of
  an expression (``Client.get`` receives dask's expression of a computation).
- :func:`forget_finished_spans`, :func:`trim_key_split_cache`, :func:`fold_span_digests`:
  bound what distributed keeps per computation for the life of the scheduler or worker (its
  spans, dask/distributed#7977, and their TaskGroups; the worker's metrics per span; dask's
  ``key_split`` cache), which every step of a stream adds to (its keys name the step).
- :func:`scheduler_records`: how full the scheduler's records are (benchmarks, tests).
- :func:`count_handler_calls`: wrap the scheduler's handler tables to count the messages it
  handles (benchmarks and tests only).

distributed is imported by the functions that use it, not by this module: a simulation rank
imports this module on its main thread and sends from its event-loop thread, which imports
distributed there, off the simulation's path (docs/benchmarks.md, "Start-up of a rank"). Such
an import off the main thread starts with :func:`import_distributed`.

Runs in every process of a run (a rank's loop thread, the workers', the scheduler's and the
analytics' event loops); imports nothing of deisa.
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import Future

Key = Hashable


def import_distributed() -> None:
    """Import the distributed package, whole, before any of its submodules.

    Python 3.11 raises "partially initialized module" when a thread imports one of
    distributed's submodules (``distributed.protocol.pickle``) while another thread is
    importing the package (the PDI plugin's preload, :mod:`deisa.bridge._preload`): the first
    holds the submodule's import lock while it waits for its parent, which the other needs. A
    thread importing the package itself first only waits for the other to finish it.
    """
    import distributed  # noqa: F401


async def send_blocks_to_worker(
    pool: Callable[[str], Any], worker: str, blocks: Mapping[Key, Any]
) -> dict[Key, int]:
    """Store ``blocks`` in ``worker``'s memory under their keys; return their sizes in bytes.

    The worker does not tell the scheduler (a scattered key is unknown to it until someone
    registers it), so this costs the scheduler nothing. The bytes are written from the arrays'
    own buffers; a non-contiguous view is packed once by distributed's numpy serializer.
    ``pool`` is a :class:`distributed.core.ConnectionPool` or a
    :class:`deisa.bridge.link.connect.Connections`.
    """
    import_distributed()
    from distributed.protocol import to_serialize

    data = {key: to_serialize(block) for key, block in blocks.items()}
    reply = await pool(worker).update_data(data=data)
    return _stored(worker, reply)


def store_on_worker(worker: Any, blocks: Mapping[Key, Any]) -> dict[Key, int]:
    """Store ``blocks`` in the memory of ``worker`` (a :class:`distributed.Worker`, from its
    event loop), as a ``update_data`` RPC from a peer would; return their sizes in bytes."""
    reply = worker.update_data(data=dict(blocks), stimulus_id="deisa-shared-memory")
    return _stored(str(worker.address), reply)


async def open_comm(pool: Any, address: str) -> Any:
    """A connection to ``address`` from the started :class:`distributed.core.ConnectionPool`
    ``pool`` (an idle one it holds, or a new one), for :func:`send_blocks_on`.

    A new connection is distributed's ``connect``, which retries a refused connection until
    ``distributed.comm.timeouts.connect`` (30 s by default): cancel the call to give up sooner.
    """
    return await pool.connect(address)


async def send_blocks_on(
    pool: Any, worker: str, comm: Any, blocks: Mapping[Key, Any]
) -> dict[Key, int]:
    """:func:`send_blocks_to_worker` over ``comm``, a connection to ``worker`` from
    :func:`open_comm`, handed back to ``pool`` afterwards (distributed closes it on a failure,
    as in its own RPC calls)."""
    import_distributed()
    from distributed.core import send_recv
    from distributed.protocol import to_serialize

    data = {key: to_serialize(block) for key, block in blocks.items()}
    try:
        reply = await send_recv(
            comm=comm,
            op="update_data",
            data=data,
            serializers=pool.serializers,
            deserializers=pool.deserializers,
        )
    finally:
        pool.reuse(worker, comm)
    return _stored(worker, reply)


def worker_pool(worker: Any) -> tuple[Callable[[str], Any], str]:
    """``worker``'s connection pool (``pool(address).<route>(**kwargs)``, with the worker's TLS
    credentials) and the address of its scheduler."""
    return worker.rpc, str(worker.scheduler.address)


def _stored(worker: str, reply: Mapping[str, Any]) -> dict[Key, int]:
    """The sizes of the blocks in a worker's ``update_data`` reply."""
    if reply.get("status") != "OK":
        raise RuntimeError(f"worker {worker} refused the data: {reply!r}")
    return dict(reply["nbytes"])


def register_keys(
    scheduler: Any, who_has: Mapping[Key, list[str]], nbytes: Mapping[Key, int], holder: str
) -> None:
    """Tell the scheduler that ``who_has`` keys are in memory, wanted by the pseudo-client
    ``holder`` (which keeps them alive until :func:`release_keys`)."""
    scheduler.update_data(who_has=dict(who_has), nbytes=dict(nbytes), client=holder)


def share_keys(scheduler: Any, keys: list[Key], target: str) -> None:
    """Add client ``target`` to the wanters of ``keys`` (the holders they had keep them).

    A stream with several consumers shares a step's keys with each taker, then lets go of them
    itself (:func:`release_keys`) once the last one has taken them.
    """
    scheduler.client_desires_keys(keys=keys, client=target)


def send_batched(client: Any, op: str, **msg: Any) -> None:
    """Send ``op`` to the scheduler on ``client``'s batched stream (no reply; in order with the
    client's own messages there, such as the release of a dropped future's key). The scheduler
    calls its stream handler ``op`` with ``client=`` the sender's id and ``msg``."""
    client._send_to_scheduler({"op": op, **msg})


def release_keys(scheduler: Any, keys: list[Key], holder: str) -> None:
    """Drop ``holder``'s claim on ``keys``; data nobody else wants is freed on the workers."""
    if holder in scheduler.clients:
        scheduler.client_releases_keys(keys=keys, client=holder)


def forget_holder(scheduler: Any, holder: str) -> None:
    """Remove the pseudo-client ``holder`` (releasing whatever it still wants)."""
    if holder in scheduler.clients:
        scheduler.remove_client(client=holder, stimulus_id=f"deisa-forget-{holder}")


def workers_of(client: Any) -> dict[str, dict[str, Any]]:
    """The scheduler's workers (address -> their identity: ``name``, ``status``...), asked of
    the scheduler now by a synchronous ``client``.

    ``client.scheduler_info()["workers"]`` can come back empty: distributed 2026.8 refreshes
    the client's cached identity every ``scheduler-info-interval`` without per-worker
    information, and that refresh can land between ``scheduler_info``'s own fetch and its
    return (seen under load: a worker that ``wait_for_workers`` had just counted was missing).
    """
    identity = client.sync(client.scheduler.identity, n_workers=-1)
    return dict(identity["workers"])


def future_in_memory(key: Key, client: Any) -> Future:
    """A Future for ``key``, already in memory and already wanted by ``client`` on the
    scheduler side (our extension did that), so no extra message is needed."""
    import_distributed()
    from distributed import Future

    return Future(key, client, state="memory")  # type: ignore[arg-type]


def graph_mappings(obj: Any) -> Iterator[Mapping[Any, Any]]:
    """The mapping of every materialized layer of the high-level graphs in ``obj``: a dask
    collection, dask's expression of a computation (what ``Client.get`` receives: its
    ``HLGExpr`` nodes hold a ``dsk``), or lists, tuples and dict values of them."""
    from dask.base import is_dask_collection
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    graphs: list[Any] = []
    todo = [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, (list, tuple, set)):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif callable(getattr(item, "walk", None)) and hasattr(item, "operands"):
            graphs.extend(getattr(node, "dsk", None) for node in item.walk())
        elif is_dask_collection(item):
            graphs.append(item.__dask_graph__())
    for graph in graphs:
        if isinstance(graph, HighLevelGraph):
            for layer in graph.layers.values():
                if isinstance(layer, MaterializedLayer):
                    yield layer.mapping


def forget_finished_spans(scheduler: Any, keep: int, grace_s: float) -> int:
    """Forget the spans of computations finished more than ``grace_s`` seconds ago, all of
    whose tasks the scheduler has forgotten, but the newest ``keep`` (top-level ones, with their
    sub-spans); how many were forgotten.

    distributed keeps every span forever (dask/distributed#7977), and with it the TaskGroups of
    its computation. Its own workflows reuse a few group names; a stream's keys name their step,
    so each step's computation adds a span and its groups: about 8 KiB a step on the scheduler.
    ``grace_s``: a worker's heartbeat may still carry metrics of a span that just finished,
    which count if the span is still there; the scheduler's handler of them is made to skip a
    span forgotten (it looks each one up, a ``KeyError`` otherwise).
    """
    import time

    spans = scheduler.extensions.get("spans")
    if spans is None or len(spans.root_spans) <= keep:
        return 0
    _skip_forgotten_spans(spans)
    live = scheduler.task_groups
    horizon = time.time() - grace_s
    gone: set[Any] = set()
    kept: list[Any] = []
    for root in spans.root_spans[:-keep]:
        tree = list(root.traverse_spans())
        groups = [tg for span in tree for tg in span.groups]
        finished = (
            groups
            and root.done
            and not any(live.get(tg.name) is tg for tg in groups)
            and max(tg.stop for tg in groups) < horizon
        )
        if finished:
            gone.update(tree)
        else:
            kept.append(root)
    if not gone:
        return 0
    spans.root_spans[:] = kept + spans.root_spans[-keep:]
    for span in gone:
        spans.spans.pop(span.id, None)
    for index in (spans.spans_search_by_name, spans.spans_search_by_tag):
        for name in [name for name, found in index.items() if any(s in gone for s in found)]:
            index[name] = [span for span in index[name] if span not in gone]
            if not index[name]:
                del index[name]
    return len(gone)


def _skip_forgotten_spans(spans: Any) -> None:
    """Make ``spans.heartbeat`` (a worker's metrics per span) skip the spans forgotten."""
    if getattr(spans, "_deisa_skips_forgotten", False):
        return
    heartbeat = spans.heartbeat

    def known_spans_only(ws: Any, data: Mapping[tuple[Hashable, ...], float]) -> None:
        heartbeat(ws, {key: value for key, value in data.items() if key[1] in spans.spans})

    spans.heartbeat = known_spans_only
    spans._deisa_skips_forgotten = True


def trim_key_split_cache(limit: int) -> bool:
    """Empty dask's cache of key prefixes (``dask.utils.key_split``, up to 100,000 entries of
    about 340 B, one per key name: per step, for a stream) once it holds ``limit``; whether it
    was emptied. The scheduler calls ``key_split`` for every task it makes."""
    from dask.utils import key_split

    if key_split.cache_info().currsize < limit:
        return False
    key_split.cache_clear()
    return True


def fold_span_digests(worker: Any) -> int:
    """Fold the worker's cumulative metrics per span (``digests_total``, ``digests_max``, keyed
    ``("execute", span_id, prefix, activity, unit)``) into one entry per prefix and activity
    (``span_id`` None); how many entries went. distributed adds a dozen per computation and
    never removes them; the scheduler receives its copy per span at each heartbeat, from
    ``digests_total_since_heartbeat``, which this leaves alone."""
    folded = 0
    for digest, merge in ((worker.digests_total, float.__add__), (worker.digests_max, max)):
        for key in [k for k in digest if _per_span(k)]:
            value = digest.pop(key)
            merged = (key[0], None, *key[2:])
            digest[merged] = merge(float(digest.get(merged, 0.0)), float(value))
            folded += 1
    if getattr(worker, "digests", None) is not None:  # with crick: one t-digest per key
        for key in [k for k in worker.digests if _per_span(k)]:
            del worker.digests[key]
    return folded


def _per_span(key: Any) -> bool:
    return isinstance(key, tuple) and len(key) > 2 and key[0] == "execute" and key[1] is not None


def count_handler_calls(scheduler: Any, counter: Counter[str]) -> Callable[[], None]:
    """Count every RPC and stream message ``scheduler`` handles into ``counter``.

    Returns a function that restores the original handlers.
    """
    originals = (dict(scheduler.handlers), dict(scheduler.stream_handlers))

    def wrap(op: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        # distributed inspects handlers: keep the signature (a leading ``comm``, ``serializers``)
        # with wraps(), and keep coroutine functions coroutine functions, or stream handlers
        # would never be awaited
        if inspect.iscoroutinefunction(handler):

            @functools.wraps(handler)
            async def counted_async(*args: Any, **kwargs: Any) -> Any:
                counter[op] += 1
                return await handler(*args, **kwargs)

            return counted_async

        @functools.wraps(handler)
        def counted(*args: Any, **kwargs: Any) -> Any:
            counter[op] += 1
            return handler(*args, **kwargs)

        return counted

    for table in (scheduler.handlers, scheduler.stream_handlers):
        for op, handler in list(table.items()):
            table[op] = wrap(op, handler)

    def restore() -> None:
        scheduler.handlers.clear()
        scheduler.handlers.update(originals[0])
        scheduler.stream_handlers.clear()
        scheduler.stream_handlers.update(originals[1])

    return restore


def scheduler_records(scheduler: Any) -> dict[str, int]:
    """How many entries each of the scheduler's records holds that could grow with the steps
    of a stream: its tasks, task groups and prefixes, spans, computations, transition log,
    events (per topic, summed), the batched streams' message logs, the system monitor's
    samples, dask's ``key_split`` cache (benchmarks and tests: what stays flat over a long run)."""
    from dask.utils import key_split

    spans = scheduler.extensions.get("spans")
    topics = scheduler._broker._topics
    streams = [*scheduler.stream_comms.values(), *scheduler.client_comms.values()]
    monitor = getattr(scheduler, "monitor", None)
    quantities = getattr(monitor, "quantities", {}) or {}
    return {
        "tasks": len(scheduler.tasks),
        "task_groups": len(scheduler.task_groups),
        "task_prefixes": len(scheduler.task_prefixes),
        "task_metadata": len(scheduler.task_metadata),
        "spans": len(spans.spans) if spans is not None else 0,
        "root_spans": len(spans.root_spans) if spans is not None else 0,
        "span_index": sum(len(v) for v in spans.spans_search_by_name.values())
        + sum(len(v) for v in spans.spans_search_by_tag.values())
        if spans is not None
        else 0,
        "computations": len(scheduler.computations),
        "transition_log": len(scheduler.transition_log),
        "event_topics": len(topics),
        "events": sum(len(topic.events) for topic in topics.values()),
        "stream_messages": sum(len(getattr(b, "recent_message_log", ())) for b in streams),
        "monitor_samples": sum(len(q) for q in quantities.values()),
        "key_split_cache": key_split.cache_info().currsize,
        "clients": len(scheduler.clients),
    }
