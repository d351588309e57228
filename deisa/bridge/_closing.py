"""How one rank's Bridge closes: rank 0 ends every array's stream on the scheduler (with what
the ranks report of their run), then every rank stops its background work and its loop.

Runs on the rank's main thread (``Bridge.close``), which waits for what it hands the loop
thread (rank 0's last calls to the scheduler), then stops that thread.

Imports the Bridge's parts, its publishers and collective protocol, the scheduler link, the
shared-memory pool's totals and :mod:`deisa.wire`.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from ..wire import is_ok
from ._collective import BridgeError, on_root
from .link.scheduler import SchedulerLost, until_answered
from .shm.pool import pool_totals

if TYPE_CHECKING:
    from ._async import AsyncPublisher
    from ._losses import Losses
    from ._parts import BridgeParts
    from .link.scheduler import SchedulerLink

logger = logging.getLogger(__name__)


def close_bridge(
    parts: BridgeParts,
    link: SchedulerLink,
    publisher: AsyncPublisher,
    losses: Losses,
    opened: float,
) -> None:
    """Every rank, :meth:`deisa.Bridge.close` (``opened``: when the Bridge opened, on
    ``time.perf_counter``): wait for the steps published (``mode="async"``), end the streams
    (rank 0, with the ranks' transports and pools), shut down; raise, on every rank, a
    background failure no ``publish`` raised yet (after ending the streams if it can)."""
    error: BridgeError | None = None
    if parts.asynchronous and publisher.raised is None and not parts.detached:
        try:
            publisher.wait_until(lambda: publisher.ledger.flushed)
        except BridgeError as exc:
            error = exc
    nsteps = parts.steps.queued_steps()
    open_s = time.perf_counter() - opened
    try:
        # the same decision on every rank: the connection is known everywhere, or nowhere;
        # a lost scheduler is known everywhere too (no call to it: the loss was raised)
        connected = not parts.asynchronous or publisher.ledger.connection is not None
        if connected and losses.scheduler_lost is None:
            # how each rank sent, and its warm pool of shared memory
            mine = (parts.transport.used, parts.transport.slot_pool.summary())
            gathered = parts.comm.gather(mine, root=0)
            lost = on_root(parts.comm, lambda: end_streams(parts, link, gathered, nsteps, open_s))
            if lost is not None:  # detach (close returns) or fail, on every rank
                losses.lose_scheduler_now(lost)
    except BridgeError:
        if error is None:
            raise
        logger.warning("deisa bridge: ending the streams failed too", exc_info=True)
    finally:
        shut_down(parts, publisher, link)
    if error is not None:
        raise error


def end_streams(
    parts: BridgeParts,
    link: SchedulerLink,
    gathered: list[tuple[str, dict[str, Any]]],
    nsteps: dict[str, int],
    open_s: float,
) -> str | None:
    """Rank 0: end the stream of every array, reporting its steps queued (``nsteps``), the
    seconds flow control held the simulation (of ``open_s`` with the Bridge), how the ranks
    sent and their warm pools (``gathered``: each rank's ``(transport, shm_pool)``).

    Each call is made again while the scheduler does not answer, until it counts as lost
    (:func:`~deisa.bridge.link.scheduler.until_answered`): the message of its loss then, ``None``
    once every stream is ended."""
    used = [way for way, _ in gathered]
    pool = pool_totals([pool for _, pool in gathered])
    for name in parts.arrays.decompositions:
        reply = parts.loop.run(
            until_answered(
                parts.worker_book,
                partial(
                    link.end_stream,
                    name=name,
                    nsteps=nsteps.get(name, 0),
                    held_s=parts.timings.held_s(name),
                    open_s=open_s,
                    transports={way: used.count(way) for way in set(used)},
                    pool=pool,
                ),
                give_up=True,
                attempt_s=parts.options.connect_timeout,
            )
        )
        if isinstance(reply, SchedulerLost):
            return reply.message
        if not is_ok(reply):
            raise BridgeError(reply["message"])
    return None


def shut_down(parts: BridgeParts, publisher: AsyncPublisher, link: SchedulerLink) -> None:
    """Stop the sends and the background coroutines, close the notices, the transport and
    the link (best effort), then the loop thread."""
    publisher.shutdown()
    parts.loop.cancel_kept()
    if publisher.registrar.noticing:
        try:
            parts.loop.run(publisher.registrar.close_notices(), timeout=10)
        except Exception:  # best effort, as below
            logger.debug("deisa bridge: closing the notices failed", exc_info=True)
    if link.is_open:
        try:
            parts.loop.run(parts.transport.close(), timeout=10)
            parts.loop.run(link.close(), timeout=10)
        except Exception:  # closing is best effort; the process may be going down
            logger.debug("deisa bridge: closing connections failed", exc_info=True)
    parts.loop.stop()
