"""The workers a Bridge places blocks on, kept up to date while the run goes on.

Rank 0's event loop keeps ``deisa_watch_workers`` open on the scheduler (:meth:`WorkerBook.watch`,
as :class:`~deisa.bridge.contracts.ContractBook` watches contracts): the scheduler answers as
soon as a worker joins or leaves. The Bridge's exchange spreads the new list to every rank
(:meth:`WorkerBook.to_spread` on rank 0, then :meth:`Routing.use` on every rank at the same
call), so every rank recomputes the same placement at the same publish. The watch failing for
longer than ``connect_timeout`` is how rank 0 learns that the scheduler itself is gone
(:meth:`WorkerBook.scheduler_lost`). See ``docs/reliability.md``.

Runs in a simulation rank: its main thread routes blocks (:class:`Routing`); rank 0's loop
thread watches the scheduler's workers (:class:`WorkerBook`), whose news reach every rank
through the exchange. Imports the arrays (decomposition, placement), :mod:`.net` and
:mod:`deisa.wire` only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from ...wire import WATCH_SECONDS, Reply, is_ok
from ..arrays.decomposition import Decomposition
from ..arrays.placement import Host, place
from .net import host_port, split_address

logger = logging.getLogger(__name__)


class WorkerBook:
    """Rank 0: the live workers as the scheduler last told them (see the module docstring).

    Written by rank 0's loop thread (:meth:`watch`), read by its main thread (:meth:`to_spread`,
    :meth:`scheduler_lost`), under a lock.

    Parameters
    ----------
    lost_after
        Seconds of failed calls to the scheduler after which it counts as lost
        (``connect_timeout``).
    """

    def __init__(self, lost_after: float) -> None:
        self.lost_after = lost_after
        self._lock = threading.Lock()
        self._latest: tuple[str, ...] | None = None
        self._spread: tuple[str, ...] | None = None  # main thread: the list last spread
        self._failing_since: float | None = None
        self._failure = ""
        self.scheduler: str | None = None  # its address, once connected (for the messages)

    def known(self, workers: Sequence[str]) -> None:
        """The list every rank already has (the connection's): nothing to spread."""
        with self._lock:
            self._latest = self._spread = tuple(workers)

    def latest(self) -> tuple[str, ...]:
        with self._lock:
            return self._latest or ()

    def to_spread(self) -> list[str] | None:
        """Rank 0, at each exchange: the new worker list if it changed since the last spread."""
        with self._lock:
            if self._latest is None or self._latest == self._spread:
                return None
            self._spread = self._latest
            return list(self._latest)

    def failing(self, exc: BaseException, since: float | None = None) -> None:
        """A call to the scheduler failed (any thread); unanswered ``since`` (a
        ``time.monotonic()``: when a call that timed out was made), now by default."""
        with self._lock:
            if self._failing_since is None:
                self._failing_since = time.monotonic() if since is None else since
            self._failure = failure_in_words(exc)

    def answered(self) -> None:
        """The scheduler answered a call (any thread)."""
        with self._lock:
            self._failing_since = None

    def scheduler_lost(self) -> str | None:
        """Why the scheduler counts as lost (no answer for ``lost_after`` seconds), or ``None``."""
        with self._lock:
            since = self._failing_since
            if since is None or time.monotonic() - since < self.lost_after:
                return None
            at = f"at {self.scheduler}; " if self.scheduler else ""
            return (
                f"the scheduler has not answered for {time.monotonic() - since:.0f} s "
                f"({at}connect_timeout={self.lost_after:g} s; {self._failure})"
            )

    async def watch(
        self, call: Callable[..., Awaitable[Reply]], on_change: Callable[[], None]
    ) -> None:
        """Rank 0's event loop: keep ``deisa_watch_workers`` open until cancelled.

        ``call(known=, timeout=)`` is the scheduler's route; ``on_change`` wakes the Bridge's
        waits (the list is spread at the next exchange).
        """
        while True:
            known = list(self.latest())
            try:
                reply = await asyncio.wait_for(
                    call(known=known, timeout=WATCH_SECONDS), WATCH_SECONDS + self.lost_after
                )
            except asyncio.CancelledError:
                raise
            except (OSError, asyncio.TimeoutError) as exc:  # the scheduler is gone or busy
                logger.debug("deisa bridge: watching workers failed: %r", exc)
                self.failing(exc)
                on_change()
                await asyncio.sleep(0.5)
                continue
            except Exception as exc:  # not a deisa scheduler extension of this version
                reply = {"status": "error", "message": repr(exc)}
            if not is_ok(reply):
                logger.warning(
                    "deisa bridge: the scheduler does not report workers leaving (%s); a worker "
                    "that leaves is noticed only when a send to it fails",
                    reply.get("message"),
                )
                return
            self.answered()
            workers = tuple(sorted(address for address, _ in reply.get("workers") or ()))
            with self._lock:
                changed = workers != self._latest
                self._latest = workers
            if changed:
                logger.info("deisa bridge: workers now %s", ", ".join(workers) or "none")
                on_change()


def failure_in_words(exc: BaseException) -> str:
    """What a failed call to the scheduler says of it, in words: its connection closed (a
    distributed ``CommClosedError``, a reset), it refuses connections, it did not answer in
    time; otherwise the exception's type and first line."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ConnectionRefusedError) or "refused" in text.lower():
        return "it refuses connections"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)) or "CommClosedError" in text:
        return "its connection closed"
    if isinstance(exc, TimeoutError) or "timed out" in text.lower():
        return "it did not answer in time"
    first = text.splitlines()[0] if str(exc) else type(exc).__name__
    return f"last error {first[:200]}"


class Detachment:
    """Whether the Bridge stopped sending: its scheduler lost, with
    ``on_scheduler_loss="continue"``. The same on every rank: :class:`~._losses.Losses` detaches
    at the same call on every rank, once."""

    def __init__(self) -> None:
        self._reason: str | None = None

    @property
    def reason(self) -> str | None:
        """Why the Bridge detached; ``None`` while it sends."""
        return self._reason

    def detach(self, reason: str) -> None:
        """Stop sending, for ``reason`` (the first reason stays)."""
        if self._reason is None:
            self._reason = reason


async def refuses_connections(address: str, timeout: float) -> bool:
    """Whether nothing listens at ``address`` any more: a TCP connection to it is refused.

    distributed's ``connect`` retries a refused connection until its connect timeout (30 s by
    default), as a worker may be starting; a worker the scheduler has listed has started, so a
    refusal means that it is gone (its host answers, its process does not). ``False`` for an
    address other than ``tcp://`` or ``tls://``, and when the attempt does not end within
    ``timeout`` seconds (a host that does not answer: its loss shows only as a timeout). The
    connection made to a live worker is closed at once: the worker logs it (at ``info``; a TLS
    worker, at ``warning``, as a failed handshake).
    """
    scheme, location = split_address(address)
    if scheme not in ("tcp", "tls"):
        return False
    host, port = host_port(location)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except ConnectionRefusedError:
        return True
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return False


class Routing:
    """Where each rank's block of each array goes: the workers in use and the placement.

    The same on every rank: built from the connection's worker list, then changed only by
    :meth:`use` at the same exchange on every rank. Main thread only.

    Parameters
    ----------
    policy
        The placement policy (``options.placement``).
    decompositions
        The Bridge's arrays.
    rank
        This rank.
    hosts
        Every rank's host, for ``node_local``.
    """

    def __init__(
        self,
        policy: str,
        decompositions: Mapping[str, Decomposition],
        rank: int,
        hosts: Sequence[Host] | None,
    ) -> None:
        self.policy = policy
        self.decompositions = decompositions
        self.rank = rank
        self.hosts = hosts
        self.workers: list[str] = []
        self.placements: dict[str, list[str]] = {}  # name -> worker of each rank
        self.worker_of: dict[str, str] = {}  # name -> this rank's worker

    def declare(
        self, decompositions: Mapping[str, Decomposition], hosts: Sequence[Host] | None
    ) -> None:
        """The arrays to place, and every rank's host (for ``node_local``), once they are
        known (the Bridge's construction), before the first :meth:`place`."""
        self.decompositions = decompositions
        self.hosts = hosts

    def place(self, workers: Sequence[str]) -> None:
        """Place every array over ``workers`` (raises the policy's ``ValueError``)."""
        placements = {
            name: place(self.policy, dec, workers, self.hosts)
            for name, dec in self.decompositions.items()
        }
        self.workers = list(workers)
        self.placements = placements
        self.worker_of = {name: ranks[self.rank] for name, ranks in placements.items()}

    def use(self, workers: Sequence[str]) -> list[str]:
        """Place over the new worker list; the workers that left. Same outcome on every rank.

        With no worker left the placement stays (its sends fail, their steps are lost); a
        policy that cannot place over the workers left (``node_local`` with a node whose
        workers all left) places as ``locality`` over them, with a warning.
        """
        departed = sorted(set(self.workers) - set(workers))
        if not workers:
            logger.warning("deisa bridge: no Dask worker left; steps are lost until one joins")
            self.workers = []
            return departed
        try:
            self.place(workers)
        except ValueError as exc:
            logger.warning("deisa bridge: %s; placing as 'locality' over the workers left", exc)
            saved, self.policy = self.policy, "locality"
            try:
                self.place(workers)
            finally:
                self.policy = saved
        return departed
