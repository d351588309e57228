"""How one rank's Bridge closes: rank 0 ends every array's stream on the scheduler (with what
the ranks report of their run), then every rank stops its background work and its loop.

Runs on the rank's main thread (``Bridge.close``), which waits for what it hands the loop
thread (rank 0's last calls to the scheduler), then stops that thread.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from ..wire import is_ok
from ._collective import BridgeError
from .link.scheduler import SchedulerLost, until_answered
from .shm.pool import pool_totals

if TYPE_CHECKING:
    from ._async import AsyncPublisher
    from ._parts import BridgeParts
    from .link.scheduler import SchedulerLink

logger = logging.getLogger(__name__)


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
