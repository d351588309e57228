"""What a Bridge does when a worker or the scheduler is lost (``on_worker_loss``,
``on_scheduler_loss``), once the exchange has told every rank: place again and send again, fail
at the same call on every rank, or detach. See ``docs/reliability.md``.

Runs on the rank's main thread, at the ``publish`` whose exchange told every rank of the loss.

Imports the Bridge's parts, its collective protocol and its asynchronous publisher only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._collective import BridgeError

if TYPE_CHECKING:
    from ._async import AsyncPublisher
    from ._parts import BridgeParts

logger = logging.getLogger(__name__)


class Losses:
    """What a Bridge does when a worker or the scheduler is lost (``on_worker_loss``,
    ``on_scheduler_loss``); called on every rank at the same call, right after the exchange
    (or the broadcast of a sync publish) that carried the news. Main thread only.
    """

    def __init__(self, parts: BridgeParts, publisher: AsyncPublisher) -> None:
        self.parts = parts
        self.publisher = publisher
        self.scheduler_lost: str | None = None  # why, once known (on every rank at once)

    def use_workers(self, workers: list[str]) -> None:
        """Place over the workers the scheduler now has; send again what went to one that left."""
        parts = self.parts
        routing = parts.routing
        used = {worker for ranks in routing.placements.values() for worker in ranks}
        departed = routing.use(workers)
        lost = sorted(set(departed) & used)
        if lost and parts.options.on_worker_loss == "fail":
            name, step = parts.steps.last()
            self._fail(
                f"worker(s) {', '.join(lost)} holding blocks of this Bridge left the cluster "
                f"at step {step} of {name!r} (on_worker_loss='fail')"
            )
        elif departed and parts.asynchronous:
            self.publisher.reroute(departed)

    def lose_scheduler(self, message: str) -> None:
        """The scheduler is gone: fail, or detach (publish sends nothing, close returns);
        either way :meth:`~deisa.Bridge.close` no longer calls it."""
        parts = self.parts
        if parts.detached or self.scheduler_lost is not None:
            return
        self.scheduler_lost = message
        if parts.options.on_scheduler_loss == "fail":
            self._fail(message)
            return
        parts.detachment.detach(message)
        if parts.rank == 0:
            logger.error(
                "deisa bridge: %s; publish() sends nothing from now on and the simulation "
                "goes on (on_scheduler_loss='continue')",
                message,
            )
        self.publisher.shutdown()
        parts.loop.cancel_kept()

    def lose_scheduler_now(self, message: str) -> None:
        """The scheduler is gone, found by a call that returns now (``get``, ``close``): detach
        (the call returns as detached), or raise the one message on every rank
        (``on_scheduler_loss="fail"``), now in either mode."""
        self.lose_scheduler(message)  # mode="sync", on_scheduler_loss="fail": raises
        if self.parts.options.on_scheduler_loss == "fail":
            if self.parts.asynchronous:
                self.publisher.raise_failure()  # the first failure recorded, this one or not
            raise BridgeError(self.scheduler_lost or message)

    def _fail(self, message: str) -> None:
        """A failure decided at the same call on every rank."""
        if self.parts.asynchronous:
            self.publisher.fail(message)
        else:
            raise BridgeError(message)
