"""When the analytics stops waiting for a step: a slow simulation is not a stuck one.

Real codes write every few minutes, or less often, so the wait for the next step has no deadline
of its own. :class:`StepWatch` ends it, saying why, only when

- the simulation has exited (its exit status is known: ``deisa-run`` owns its processes) and
  its stream of the array is not closed: it died, or stopped without closing (``deisa-run``
  reports an exit status other than 0 first, with the simulation's log);
- where the simulation's processes cannot be seen (``deisa-run analytics``, the client of a Slurm
  job, whose ranks run on other nodes), rank 0 of its Bridge has not been heard for
  :data:`SILENT_AFTER` seconds while the array is open. Rank 0's event loop keeps
  ``deisa_watch_contracts`` open on the scheduler from its connection to its ``close``, asking
  again at least every :data:`~deisa.wire.WATCH_SECONDS` whatever the simulation computes, and the
  scheduler notes when it last did (:mod:`deisa.scheduler.contracts`): a heartbeat that costs no
  message, where a process of the launcher's own could only watch the node it runs on;
- the user set ``step_timeout`` (``--step-timeout``) and that many seconds passed without a step.

The scheduler is asked (``deisa_stats``) only when it matters: once the simulation has exited,
and every :data:`ASK_EVERY` seconds of waiting where its processes cannot be seen.

Examples
--------
>>> watch = StepWatch("gtemp", client, exit_status=simulation.poll)  # doctest: +SKIP
>>> watch.check(step=3)  # None: wait on; else why the wait must end  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..wire import WATCH_SECONDS, Route
from .failures import tail

logger = logging.getLogger(__name__)

SILENT_AFTER = 6 * WATCH_SECONDS
"""Seconds without a word from rank 0 (six of its heartbeats) before the simulation is taken
for gone: the 60 s after which the Slurm job's scheduler drops a silent worker too."""

ASK_EVERY = WATCH_SECONDS / 2
"""Seconds between two questions to the scheduler while waiting with the processes unseen."""


@dataclass(frozen=True)
class StreamSnapshot:
    """What the scheduler knows of one array's stream, as its stats say it now (its own state is
    :class:`deisa.scheduler._state.StreamState`).

    Attributes
    ----------
    opened
        A run has the array open (closed or not).
    closed
        That run closed it: the end of the stream is queued for the analytics.
    published
        Steps that run published.
    silent_s
        Seconds since the run opened the array or its rank 0 was last heard; ``None``: never.
    others
        The other arrays published to this scheduler, for a simulation that opened none of
        ``array`` (a wrong ``--array``).
    """

    opened: bool = False
    closed: bool = False
    published: int = 0
    silent_s: float | None = None
    others: tuple[str, ...] = ()

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any], array: str) -> StreamSnapshot:
        """From the scheduler extension's ``deisa_stats`` reply."""
        stream = stats.get("streams", {}).get(array) or {}
        silent = stats.get("contracts", {}).get("silent_s", {}).get(array)
        return cls(
            opened=stream.get("run") is not None,
            closed=bool(stream.get("closed")),
            published=int(stream.get("published", 0)),
            silent_s=None if silent is None else float(silent),
            others=tuple(sorted(name for name in stats.get("totals", {}) if name != array)),
        )


def verdict(
    array: str,
    step: int,
    waited_s: float,
    state: StreamSnapshot | None,
    *,
    exit_status: int | None = None,
    visible: bool = False,
    step_timeout: float | None = None,
) -> str | None:
    """Why the wait for ``step`` of ``array`` must end, or ``None``: wait on.

    Parameters
    ----------
    array, step
        What is awaited.
    waited_s
        Seconds since the last step arrived (or since the wait began).
    state
        The stream as the scheduler last told it; ``None``: unknown.
    exit_status
        The simulation's, once it has exited; ``None`` while it runs, or where unseen.
    visible
        Whether the simulation's processes are seen (then its exit status, not rank 0's
        heartbeat, says whether it lives).
    step_timeout
        Seconds without a step after which to give up however alive the simulation is;
        ``None``: no such bound.
    """
    if step_timeout is not None and waited_s > step_timeout:
        return (
            f"no step of {array!r} for {waited_s:.0f} s (waiting for step {step}; "
            f"--step-timeout {step_timeout:g})"
        )
    if state is None or state.closed:  # unknown, or the end of the stream is queued
        return None
    if exit_status is not None:
        if state.opened:
            return (
                f"the simulation exited (status {exit_status}) without closing {array!r}, "
                f"after publishing {state.published} step(s) (waiting for step {step})"
            )
        published = ", ".join(repr(name) for name in state.others) or "no array"
        return (
            f"the simulation exited (status {exit_status}) without opening {array!r}; it "
            f"published {published} (--array names the array to analyse)"
        )
    if visible or not state.opened or state.silent_s is None or state.silent_s <= SILENT_AFTER:
        return None
    return (
        f"rank 0 of the simulation has not been heard for {state.silent_s:.0f} s while "
        f"{array!r} is open (waiting for step {step}; its Bridge asks the scheduler every "
        f"{WATCH_SECONDS:g} s while it runs): it died, stopped without closing, or its node "
        "is unreachable"
    )


def scheduler_state(client: Any, array: str) -> StreamSnapshot | None:
    """``array``'s :class:`StreamSnapshot`, asked of the scheduler; ``None`` if it does not
    answer (the launcher or the next ``deisa_get`` reports a scheduler that is gone)."""
    try:
        stats = client.sync(getattr(client.scheduler, Route.STATS))
    except Exception:
        logger.debug("no deisa_stats", exc_info=True)
        return None
    return StreamSnapshot.from_stats(stats, array)


class StepWatch:
    """Decides, while the analytics waits for a step, whether the wait must end.

    Parameters
    ----------
    array
        The array awaited.
    client
        A client of the run's scheduler, to ask it (:func:`scheduler_state`); or give ``state``.
    step_timeout
        Seconds without a step after which to give up however alive the simulation is
        (``--step-timeout``); ``None``: as long as it lives.
    exit_status
        The simulation's exit status, ``None`` while it runs (``Popen.poll``), where the
        launcher sees its processes; ``None`` (not given): unseen, rank 0's heartbeat tells.
    log
        The simulation's log, whose tail a verdict on its exit shows.
    state
        Asks the scheduler for the stream's state (default: :func:`scheduler_state`).
    clock
        Monotonic seconds.
    """

    def __init__(
        self,
        array: str,
        client: Any = None,
        *,
        step_timeout: float | None = None,
        exit_status: Callable[[], int | None] | None = None,
        log: Path | None = None,
        state: Callable[[], StreamSnapshot | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.array = array
        self.step_timeout = step_timeout
        self._exit_status = exit_status
        self._log = log
        self._state = state if state is not None else lambda: scheduler_state(client, array)
        self._clock = clock
        self._since = clock()
        self._asked_at: float | None = None
        self._known: StreamSnapshot | None = None

    def arrived(self) -> None:
        """A step arrived: the wait for the next one starts now."""
        self._since = self._clock()

    def check(self, step: int) -> str | None:
        """Why the wait for ``step`` must end (see :func:`verdict`), or ``None``: wait on."""
        now = self._clock()
        status = self._exit_status() if self._exit_status is not None else None
        unseen = self._exit_status is None
        due = self._asked_at is None or now - self._asked_at >= ASK_EVERY
        if status is not None or (unseen and due):
            self._known, self._asked_at = self._state(), now
        reason = verdict(
            self.array,
            step,
            now - self._since,
            self._known,
            exit_status=status,
            visible=not unseen,
            step_timeout=self.step_timeout,
        )
        if reason is not None and status is not None and self._log is not None:
            reason += f"; log {self._log}:\n{tail(self._log)}"
        return reason
