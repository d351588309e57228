"""One of this rank's blocks on its way to its worker, in ``mode="async"``: :class:`Send`
(:mod:`._async` keeps one per publication of the rank, by sequence number), and what the sends
did since the last exchange (:func:`news_of`).

Runs in a simulation rank: the main thread owns them; the loop thread's send fills a send's
future. Imports :mod:`._publisher` and :mod:`.boxes` (a parcel's geometry) only.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._publisher import Entry
from .arrays.boxes import Geometry


@dataclass
class Send:
    """One of this rank's blocks on its way to its worker."""

    entry: Entry
    buffer: np.ndarray | None  # None once given back (the send succeeded, or failed reported)
    future: concurrent.futures.Future[dict[Any, int]] | None = None
    worker: str = ""
    reported: bool = False
    failed_at: float | None = None  # when a failure was first held back (its worker may leave)
    lost: bool = False  # its worker left and none is left to take it
    geometry: Geometry | None = None  # a parcel of boxes (arrays.boxes): their geometry
    empty: bool = False  # a parcel with no element: nothing sent, only its geometry reported


def news_of(
    sends: dict[int, Send],
    hold: float,
    may_leave: bool,
    workers: Collection[str],
    resend: Callable[[Send], None],
) -> tuple[list[tuple[Any, ...]], list[tuple[int, str]]]:
    """What ``sends`` did since the last report (each reported once): ``(seq, nbytes, worker,
    [geometry])`` of those done (a lost one with its departed worker and 0 bytes, an empty
    parcel with none), and ``(seq, message)`` of those failed. ``may_leave``
    (``on_worker_loss="continue"``): a send whose worker left, no longer in ``workers``, is
    sent again (``resend``), and a failure to a worker still listed is held back ``hold``
    seconds (until the scheduler says it left)."""
    sent: list[tuple[Any, ...]] = []
    failed: list[tuple[int, str]] = []
    for seq, send in sends.items():
        if send.reported:
            continue
        shape = () if send.geometry is None else (send.geometry,)  # a parcel's geometry
        if send.empty or send.lost:  # only the geometry / named with its departed worker
            send.reported = True
            sent.append((seq, 0, "" if send.empty else send.worker, *shape))
            continue
        future = send.future
        if future is None or not future.done() or future.cancelled():
            continue
        exc = future.exception()
        if exc is None:
            send.reported = True
            sent.append((seq, int(next(iter(future.result().values()))), send.worker, *shape))
            continue
        if may_leave and isinstance(exc, OSError):
            if send.worker not in workers:  # left already: send again
                resend(send)
                continue
            now = time.monotonic()
            send.failed_at = send.failed_at or now
            if now - send.failed_at < hold:  # until the scheduler says the worker left
                continue
        send.reported = True
        message = f"sending step {send.entry.step} of {send.entry.name!r} to worker {send.worker}"
        failed.append((seq, f"{message} failed: {exc!r}"))
    return sent, failed
