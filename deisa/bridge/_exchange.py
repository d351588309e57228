"""The exchange's transport: every rank's :class:`RankReport` to every rank, overlapped with
the caller's compute.

:meth:`Exchanger.post` starts a non-blocking ``Iallgather`` of a fixed-size slot per rank
(``SLOT_BYTES``): the report, pickled in a compact form (a worker named by its index in the
worker list), behind a 2-byte length. :meth:`Exchanger.complete` waits for it and decodes every
rank's slot. A report that does not fit its slot (rank 0's connection, a worker list, a
failure's message, a bad call's problem: rare) is flagged ``OVERFLOW`` in its slot; every rank
sees the same flags, so every rank then makes the same blocking ``allgather`` of the full
reports of the ranks flagged, right after the wait. One exchange at most is in flight.

The Bridge posts its exchange at the end of each ``publish`` and completes it at the start of
the next call (``publish``, ``flush``, ``close``, ``get``), so that the exchange costs the
caller a post and a wait that finds the other ranks' slots already there, instead of a
collective that waits for the slowest rank. That needs the MPI to deliver a small slot without
the sender calling MPI again: Open MPI 4.1 does (``coll/libnbc``'s linear ``Iallgather``; the
shared-memory transport sends at most 256 bytes inline), hence the small slot; an MPI whose
algorithm needs more rounds still works, the wait then lasting until every rank calls MPI.

A rank that waits for the others (the slowest rank still computing, rank 0 still connecting)
polls its request with short sleeps rather than in ``MPI_Wait``, where Open MPI spins a core:
on a node with more ranks than cores that core is another rank's, and a rank that only sends
would spend most of its start-up CPU waiting for rank 0's connection.

Main thread only, like every MPI call of the Bridge.

Runs in a simulation rank, on its main thread. Imports :mod:`._publisher`'s reports and numpy; MPI
comes from the communicator it is given.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._publisher import Connection, RankReport, RootReport

SLOT_BYTES = 192
"""Bytes per rank of a posted exchange (Open MPI's shared-memory transport sends a message of
at most 256 bytes, header included, without the sender's help)."""
_HEADER = 2
OVERFLOW = 0xFFFF
"""The length of a slot whose report did not fit (sent by the blocking ``allgather``)."""
TEST_SLEEPS_S = (50e-6, 2e-3)
"""The first and the longest sleep between two tests of an exchange not yet complete (a
waiting rank then takes at most this much longer to see it complete)."""


@dataclass
class _Posted:
    """One exchange in flight: the request and the buffers it writes (kept alive until done)."""

    request: Any
    send: np.ndarray
    recv: np.ndarray
    report: RankReport
    workers: tuple[str, ...]  # the worker list the slots index (the same on every rank)


class Exchanger:
    """Post and complete the exchanges of one Bridge over ``comm`` (see the module docstring).

    Attributes
    ----------
    completed : int
        Exchanges completed so far.
    overflows : int
        Exchanges that needed the blocking ``allgather`` of full reports.
    """

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.size: int = comm.Get_size()
        self.completed = 0
        self.overflows = 0
        self._posted: _Posted | None = None

    @property
    def pending(self) -> bool:
        """Whether an exchange is posted and not completed."""
        return self._posted is not None

    def post(self, report: RankReport, workers: Sequence[str]) -> None:
        """Start the exchange of ``report`` (``workers``: the list a send's worker is named in,
        the same on every rank). The previous exchange must be completed."""
        if self._posted is not None:
            raise RuntimeError("an exchange is already in flight: complete() it first")
        workers = tuple(workers)
        payload = pickle.dumps(to_wire(report, workers), protocol=pickle.HIGHEST_PROTOCOL)
        send = np.zeros(SLOT_BYTES, dtype=np.uint8)
        if len(payload) <= SLOT_BYTES - _HEADER:
            send[:_HEADER] = np.frombuffer(len(payload).to_bytes(_HEADER, "little"), np.uint8)
            send[_HEADER : _HEADER + len(payload)] = np.frombuffer(payload, np.uint8)
        else:
            send[:_HEADER] = np.frombuffer(OVERFLOW.to_bytes(_HEADER, "little"), np.uint8)
        recv = np.empty(SLOT_BYTES * self.size, dtype=np.uint8)
        request = self.comm.Iallgather(send, recv)
        self._posted = _Posted(request, send, recv, report, workers)

    def complete(self) -> list[RankReport] | None:
        """Wait for the exchange in flight; every rank's report, in rank order (``None`` if no
        exchange was posted)."""
        posted = self._posted
        if posted is None:
            return None
        wait(posted.request)
        self._posted = None
        slots = posted.recv.reshape(self.size, SLOT_BYTES)
        lengths = [int.from_bytes(slot[:_HEADER].tobytes(), "little") for slot in slots]
        full: list[RankReport | None] = [None] * self.size
        if OVERFLOW in lengths:  # the same flags on every rank: every rank gathers here
            self.overflows += 1
            mine = posted.report if lengths[self.comm.Get_rank()] == OVERFLOW else None
            full = self.comm.allgather(mine)
        reports = []
        for rank, (slot, length) in enumerate(zip(slots, lengths, strict=True)):
            report = full[rank]
            if report is None:
                wire = pickle.loads(slot[_HEADER : _HEADER + length].tobytes())
                report = from_wire(wire, posted.workers)
            reports.append(report)
        self.completed += 1
        return reports

    def exchange(self, report: RankReport, workers: Sequence[str]) -> list[RankReport]:
        """A blocking exchange: :meth:`post` then :meth:`complete`."""
        self.post(report, workers)
        reports = self.complete()
        assert reports is not None
        return reports


def wait(request: Any) -> None:
    """Wait for the MPI ``request`` without spinning a core: test it, then sleep between tests,
    the sleep doubling up to :data:`TEST_SLEEPS_S`'s longest (see the module docstring)."""
    pause, longest = TEST_SLEEPS_S
    while not request.Test():
        time.sleep(pause)
        pause = min(2 * pause, longest)


Wire = tuple[Any, ...]


def to_wire(report: RankReport, workers: Sequence[str]) -> Wire:
    """``report`` as plain tuples, a send's worker as its index in ``workers`` where listed."""
    index = {worker: i for i, worker in enumerate(workers)}
    sent = tuple((seq, nbytes, index.get(worker, worker), *geometry)
                 for seq, nbytes, worker, *geometry in report.sent)  # fmt: skip
    root = report.root
    wire_root = None
    if root is not None:
        wire_root = (root.connection, root.connect_error, root.registered, root.error, root.fields)
    return (report.call, report.problem, sent, report.failed, wire_root)


def from_wire(wire: Wire, workers: Sequence[str]) -> RankReport:
    """The :class:`RankReport` that :func:`to_wire` encoded with the same ``workers``."""
    call, problem, sent, failed, wire_root = wire
    root = None
    if wire_root is not None:
        connection, connect_error, registered, error, fields = wire_root
        assert connection is None or isinstance(connection, Connection)
        root = RootReport(connection, connect_error, registered, error, fields)
    return RankReport(
        call=call,
        problem=problem,
        sent=tuple(
            (seq, nbytes, workers[w] if isinstance(w, int) else w, *geometry)
            for seq, nbytes, w, *geometry in sent
        ),
        failed=failed,
        root=root,
    )
