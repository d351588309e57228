"""Bookkeeping of the publish, identical on every rank (no MPI, no Dask here).

:class:`PublishTiming` records what one publish cost, in either mode.

In ``mode="async"`` every :meth:`~deisa.Bridge.publish` posts one small non-blocking
``allgather`` of a :class:`RankReport` per rank, the *exchange* (:mod:`._exchange`), and the
next call of the Bridge (``publish``, ``flush``, ``close``, ``get``) completes it before doing
anything else. Each rank feeds the gathered list to its :class:`Ledger`; since every rank feeds
the same list in the same order, at the same call, every rank takes the same decisions (wait
for room, raise which error, which steps rank 0 registers next) and so makes the same number of
collective calls. That is the whole trick that keeps MPI on the main thread and the ranks in
step without a second round of messages. The decisions of a publish rest on the exchange of the
previous call: they lag one publish behind the ranks' news (a step registered since shows up
one publish later), and a wrong call (a bad block, ranks calling with different arrays or
steps) is raised on every rank by the next call.

A rank reports what its background sends did since the last exchange; rank 0 adds a
:class:`RootReport`: the connection once it is made, the steps registered so far on the
scheduler, a background failure, and any ``fields`` (named values rank 0 passes to every rank
at a step boundary: steering values, contracts).

Runs in a simulation rank, on its main thread. Imports :mod:`deisa.wire`'s status codes only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..wire import Status, status

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublishTiming:
    """Cost of one :meth:`Bridge.publish` on this rank.

    ``mode="sync"``: ``send_s`` is the transfer of the block to its worker; ``sync_s`` the MPI
    gather, the scheduler call of rank 0 (including any flow-control wait) and the broadcast.

    ``mode="async"``: ``send_s`` is what ``publish`` spent on the block itself, the copy into
    the Bridge's buffer (also ``copy_s``; the transfer overlaps the caller's next compute);
    ``sync_s`` the exchanges, of which ``wait_s`` waiting for room (``max_in_flight`` blocks
    in flight: the transfers, the registrations and flow control show up there).
    """

    name: str
    step: int
    nbytes: int
    send_s: float
    sync_s: float
    copy_s: float = 0.0
    wait_s: float = 0.0
    mode: str = "sync"

    @property
    def held_s(self) -> float:
        """What flow control cost this publish: the wait for room (``mode="async"``), or the
        whole registration round, flow-control wait included (``mode="sync"``)."""
        return self.wait_s if self.mode == "async" else self.sync_s


@dataclass(frozen=True)
class Connection:
    """What rank 0's connection found: every rank needs it to name keys and place blocks."""

    address: str
    run: str
    workers: tuple[str, ...]
    notices: str | None = (
        None  # rank 0's listener for "block sent" notices (deisa.bridge.registration.notices)
    )
    token: str = ""  # what a notice must carry
    notices_tls: tuple[str, str, str | None] | None = None  # its client files: CA, cert, key


@dataclass
class RootReport:
    """Rank 0's part of an exchange."""

    connection: Connection | None = None  # sent once, in the first exchange after it is made
    connect_error: str | None = None
    registered: int = 0  # publications (sequence numbers) below this are on the scheduler
    error: str | None = None  # a registration failed; names the step
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankReport:
    """One rank's part of an exchange."""

    call: tuple[Any, Any] | None = None  # (name, step) of the publish making it; None: a wait
    problem: str | None = None  # this rank's block or call is wrong
    # (seq, nbytes, worker) of sends done since the last exchange, (seq, nbytes, worker,
    # geometry) for a parcel of boxes (deisa.bridge.arrays.boxes); a block whose worker left with no
    # other to take it comes with that worker, so that the scheduler reports it lost
    sent: tuple[tuple[Any, ...], ...] = ()
    failed: tuple[tuple[int, str], ...] = ()  # (seq, message) of sends failed since then
    root: RootReport | None = None


@dataclass(frozen=True)
class Entry:
    """One publication of a step of an array, numbered in publication order (``seq``)."""

    seq: int
    name: str
    step: int
    revision: int
    senders: tuple[int, ...] | None = None  # the ranks sending a block (None: all; contracts)
    plan: Any = None  # the Bridge's deisa.contract.Plan of the step


Sent = tuple[Any, ...]
"""Where a rank's block of a publication went: ``(nbytes, worker)``; ``(0, "")`` for a rank
that sends none (contracts); ``(nbytes, worker, geometry)`` for a rank's boxes of a step
(:data:`deisa.bridge.arrays.boxes.Geometry`; ``(0, "", geometry)``: it holds no element this
step)."""


def geometry_of(sent: Sent) -> Any:
    """The geometry of a :data:`Sent` (``None``: a block published plain, or none)."""
    return sent[2] if len(sent) > 2 else None


@dataclass
class Exchanged:
    """What an exchange decided, the same on every rank."""

    problem: str | None = None  # a rank's call was wrong: the Ledger's failure from now on
    connection: Connection | None = None  # known from this exchange on
    ready: list[tuple[Entry, list[Sent]]] = field(default_factory=list)  # (entry, per rank)
    fields: dict[str, Any] = field(default_factory=dict)


class Ledger:
    """Publications not yet registered, as every rank knows them after each exchange.

    Parameters
    ----------
    nranks
        Ranks taking part in the exchanges.

    Attributes
    ----------
    failure : str or None
        The first failure seen (a send, the connection, a registration, a wrong call); once
        set it stays, and the Bridge raises it on every rank.
    registered : int
        Publications numbered below this are registered on the scheduler.
    connection : Connection or None
        Known once rank 0 has reported it.
    """

    def __init__(self, nranks: int) -> None:
        self.nranks = nranks
        self.next_seq = 0
        self.registered = 0
        self.connection: Connection | None = None
        self.failure: str | None = None
        self.entries: dict[int, Entry] = {}  # not known registered, by seq
        self._in_flight: dict[str, int] = {}  # the entries of each array
        self._ready = 0  # publications below were handed to rank 0 for registration
        self._sent: dict[int, list[Sent | None]] = {}

    def fail(self, message: str) -> None:
        """A failure decided at the same call on every rank (the connection's placement, a
        worker lost); the first failure stays."""
        if self.failure is None:
            self.failure = message

    def add(
        self,
        name: str,
        step: int,
        revision: int,
        senders: tuple[int, ...] | None = None,
        plan: Any = None,
    ) -> Entry:
        """Number a new publication (every rank calls it after the same exchange).

        ``senders``: the ranks that send a block of it (``None``: every rank); the others count
        as sent, with 0 bytes.
        """
        entry = Entry(self.next_seq, name, step, revision, senders, plan)
        self.entries[entry.seq] = entry
        self._in_flight[name] = self._in_flight.get(name, 0) + 1
        self._sent[entry.seq] = [
            None if senders is None or rank in senders else (0, "") for rank in range(self.nranks)
        ]
        self.next_seq += 1
        return entry

    def in_flight(self, name: str) -> int:
        """Publications of ``name`` not known to be registered."""
        return self._in_flight.get(name, 0)

    @property
    def flushed(self) -> bool:
        """Connected and every publication registered."""
        return self.connection is not None and self.registered >= self.next_seq

    def absorb(self, reports: list[RankReport]) -> Exchanged:
        """Take in one exchange (every rank's report, in rank order)."""
        if len(reports) != self.nranks:
            raise ValueError(f"{len(reports)} reports for {self.nranks} ranks")
        out = Exchanged()
        root = reports[0].root or RootReport()
        out.fields = dict(root.fields)
        failures: list[str] = []
        if root.connect_error:
            failures.append(root.connect_error)
        if root.connection is not None and self.connection is None:
            self.connection = out.connection = root.connection
        send_failures: list[tuple[int, int, str]] = []
        for rank, report in enumerate(reports):
            for seq, *where in report.sent:
                if seq in self._sent:
                    self._sent[seq][rank] = tuple(where)
            send_failures += [(seq, rank, message) for seq, message in report.failed]
        failures += [f"rank {rank}: {message}" for _, rank, message in sorted(send_failures)]
        if root.error:
            failures.append(root.error)
        out.problem = _call_problem(reports)
        if out.problem:  # a wrong call: the Bridge stops, as after a background failure
            failures.append(out.problem)
        if failures and self.failure is None:
            self.failure = failures[0]
        if root.registered > self.registered:
            for seq in range(self.registered, root.registered):
                entry = self.entries.pop(seq, None)
                if entry is not None:
                    self._in_flight[entry.name] -= 1
                self._sent.pop(seq, None)
            self.registered = root.registered
            self._ready = max(self._ready, self.registered)
        while self.failure is None and self._ready < self.next_seq:
            sent = self._sent[self._ready]
            if any(s is None for s in sent):
                break
            out.ready.append((self.entries[self._ready], [s or (0, "") for s in sent]))
            self._ready += 1
        return out


def _call_problem(reports: list[RankReport]) -> str | None:
    """The same message on every rank for a call that some rank got wrong."""
    first = reports[0].call
    for rank, report in enumerate(reports):
        if report.call != first and report.call is not None and first is not None:
            (name, step), (rname, rstep) = first, report.call
            return (
                f"rank {rank}: called publish({rname!r}, step={rstep}) while rank 0 called "
                f"publish({name!r}, step={step})"
            )
        if report.call != first:
            return f"rank {rank} called publish() while rank 0 was in another collective call"
    for rank, report in enumerate(reports):
        if report.problem:
            if report.call is None:
                return f"rank {rank}: {report.problem}"
            name, step = report.call
            return f"rank {rank}: publish({name!r}, step={step}) refused: {report.problem}"
    return None


def registration(
    outcome: dict[str, Any], name: str, step: int, on_worker_loss: str
) -> tuple[str, str | None]:
    """What rank 0's ``deisa_publish`` of step ``step`` of ``name`` came to, in either mode:
    ``"queued"`` (a new step), ``"replaced"`` (a step published again, in place of the one
    waiting), ``"dropped"`` (a step the analytics has passed: a warning, no failure),
    ``"lost"`` (its blocks died with a worker, ``on_worker_loss="continue"``: a warning) or
    ``"error"``, with the message the Bridge raises on every rank."""
    kind = status(outcome)
    if kind is Status.DROPPED:
        logger.warning("deisa bridge: %s", outcome["message"])
        return "dropped", None
    if kind is Status.LOST and on_worker_loss == "continue":
        logger.warning(
            "deisa bridge: step %d of %r lost with worker(s) %s: %s",
            step, name, ", ".join(outcome.get("workers") or ()), outcome["message"],
        )  # fmt: skip
        return "lost", None
    if kind is not Status.OK:
        return "error", str(outcome["message"])
    return ("replaced" if outcome.get("replaced") else "queued"), None
