"""How one rank's Bridge opens: its arrays declared on every rank, rank 0's connection (at once
in ``mode="sync"``, in the background in ``mode="async"``), and what every rank takes in once
the connection is known (the run, the workers, the placement; rank 0's watches).

Runs on the rank's main thread (the Bridge's construction and first ``publish``); rank 0's
connection runs on the loop thread, in the background in ``mode="async"``.

Imports the Bridge's parts, its collective protocol and publishers, the arrays (decomposition,
placement), the scheduler link and the shared-memory pool.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._collective import BridgeError, check_arrays, names_disagree, on_root, raise_first
from .arrays.placement import needs_hosts, this_host
from .shm.pool import by_node

if TYPE_CHECKING:
    from ._async import AsyncPublisher
    from ._parts import BridgeParts
    from ._publisher import Connection
    from .arrays.decomposition import ArraySpec
    from .link.scheduler import SchedulerLink

logger = logging.getLogger(__name__)


def declare_arrays(parts: BridgeParts, arrays: dict[str, ArraySpec], problem: str | None) -> None:
    """Every rank: check ``arrays`` (``problem``: one found before), the same names on every
    rank, then declare them (:class:`~.arrays.declared.Arrays`), size the shared-memory pool and
    give the routing what it places; a :class:`~._collective.BridgeError` on every rank
    otherwise."""
    comm, options = parts.comm, parts.options
    problem = problem or check_arrays(arrays)
    everyone = comm.allgather((problem, sorted(arrays)))
    raise_first(
        [p for p, _ in everyone],
        extra=names_disagree([names for _, names in everyone]),
    )
    # ArraySpec objects travel as they are: their dtype is converted once, in ArraySpec
    parts.arrays.declare(arrays, comm.allgather(arrays))
    by_host = needs_hosts(options.placement)
    hosts = comm.allgather(this_host()) if by_host or by_node(options) else None
    parts.transport.slot_pool.size_for(options, parts.arrays.specs.values(), hosts)
    parts.transport.slot_pool.moving = {n for n, s in parts.arrays.specs.items() if s.is_moving}
    parts.routing.declare(parts.arrays.decompositions, hosts if by_host else None)


def declare_more(
    parts: BridgeParts, link: SchedulerLink, publisher: AsyncPublisher, arrays: dict[str, ArraySpec]
) -> None:
    """Every rank, :meth:`deisa.Bridge.declare`: the arrays checked and declared as at the
    construction (:func:`declare_arrays`), placed over the workers in use, and opened on the
    scheduler by rank 0, once every rank knows the connection (``mode="async"`` exchanges until
    then); a :class:`~._collective.BridgeError` on every rank otherwise."""
    if parts.asynchronous:  # rank 0 opens the arrays it connects with: wait for that first
        publisher.wait_until(lambda: publisher.ledger.connection is not None)
        publisher.raise_failure()
    declare_arrays(parts, arrays, None)
    if parts.detached:
        return
    if parts.routing.workers:  # the same outcome on every rank
        try:
            parts.routing.place(parts.routing.workers)
        except ValueError as exc:
            raise BridgeError(str(exc)) from None
    news = {name: parts.arrays.decompositions[name] for name in arrays}
    on_root(
        parts.comm,
        lambda: parts.loop.run(link.open_arrays(news, parts.options, parts.contracts)),
    )
    logger.debug("deisa bridge: arrays %s declared", sorted(arrays))


def connect_now(parts: BridgeParts, link: SchedulerLink, scheduler_file: str) -> Connection:
    """``mode="sync"``, every rank: rank 0 connects, every rank gets its connection (or its
    error)."""
    return on_root(
        parts.comm,
        lambda: parts.loop.run(
            link.connect(scheduler_file, parts.options, parts.arrays.decompositions,
                         parts.contracts, None)
        ),
    )  # fmt: skip


def take_connection(
    parts: BridgeParts, link: SchedulerLink, publisher: AsyncPublisher, connection: Connection
) -> str | None:
    """Take in rank 0's connection (every rank): the run, the workers, the placement; rank 0
    starts its registrar (``mode="async"``) and its watches of the contracts and the workers.

    Returns the placement's problem, the same on every rank, if any.
    """
    options = parts.options
    link.connected(connection)
    try:  # the same outcome on every rank: all compute the whole placement
        parts.routing.place(connection.workers)
    except ValueError as exc:
        return str(exc)
    publisher.registrar.notify_to(connection)
    if parts.asynchronous:  # the handshakes with this rank's workers, before its next copy
        for worker in sorted(set(parts.routing.worker_of.values())):
            parts.transport.open_soon(worker, parts.loop.spawn)
    if parts.rank != 0:
        return None
    logger.info(
        "deisa bridge: run %s, %d ranks, %d workers, arrays %s, placement %s, "
        "buffer_nb %s, mode %s",
        link.run, parts.comm.Get_size(), len(connection.workers),
        sorted(parts.arrays.decompositions), options.placement, options.buffer_nb, options.mode,
    )  # fmt: skip
    wake, address = publisher.progress.set, connection.address
    if parts.asynchronous:  # its contracts watch runs since it connected
        parts.loop.keep(publisher.registrar.start())
    else:  # contracts set during the run, and the scheduler's heartbeat (deisa.contract)
        names = sorted(parts.arrays.decompositions)
        watch = link.watch_contracts(address, parts.contracts, names, wake)
        parts.loop.keep(parts.loop.spawn(watch))
    parts.worker_book.known(connection.workers)
    parts.worker_book.scheduler = connection.address
    parts.loop.keep(  # a worker that joins or leaves (docs/reliability.md)
        parts.loop.spawn(link.watch_workers(address, parts.worker_book, wake))
    )
    return None
