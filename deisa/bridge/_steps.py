"""What one rank's Bridge counts of the steps it published: :class:`StepBook`, :class:`Timings`.

The main thread counts publications and timings; rank 0's loop thread counts the steps
queued on the scheduler (:meth:`StepBook.queued`).

Runs in a simulation rank, on its main thread and rank 0's event-loop thread. Imports
:mod:`._publisher` and :mod:`deisa.wire.attributes` only.
"""

from __future__ import annotations

from typing import Any

from ..wire.attributes import changes
from ._publisher import PublishTiming


class StepBook:
    """The publications of each ``(array, step)`` on this rank, and rank 0's steps queued.

    Publications are counted on every rank, on the main thread, whatever happens to them next
    (the same count on every rank: a step published again is a new revision of it). Rank 0
    counts the distinct steps of each array queued on the scheduler (its registrar, on the
    event-loop thread in ``mode="async"``), which the end of each stream reports.
    """

    def __init__(self) -> None:
        self._revisions: dict[tuple[str, int], int] = {}
        self._queued: dict[str, int] = {}
        # attributes set for each array's next publication, then those of each publication
        # until rank 0 registers it (deisa.wire.attributes: plain values)
        self._attrs_next: dict[str, dict[str, Any]] = {}
        self._attrs_of: dict[tuple[str, int, int], dict[str, Any]] = {}
        self._attrs_sent: dict[str, dict[str, Any]] = {}  # each array's, as the analytics has them

    def publication(self, name: str, step: int) -> int:
        """Count one more publication of ``step`` of ``name``; its revision (0 the first)."""
        revision = self._revisions.get((name, step), 0)
        self._revisions[name, step] = revision + 1
        return revision

    def set_attrs(self, name: str, attrs: dict[str, Any]) -> None:
        """Attributes (checked plain) for the next publication of ``name``; merged with those
        set before it."""
        self._attrs_next.setdefault(name, {}).update(attrs)

    def attach_attrs(
        self, name: str, step: int, revision: int, static: dict[str, Any] | None = None
    ) -> None:
        """Rank 0, main thread: the attributes set for ``name`` since its previous publication
        go with this one, those new or changed only (against its ``static`` ones and those
        sent before)."""
        attrs = self._attrs_next.pop(name, None)
        if not attrs:
            return
        sent = self._attrs_sent.setdefault(name, dict(static or {}))
        news = changes(sent, attrs)
        if news:
            sent.update(news)
            self._attrs_of[name, step, revision] = news

    def attrs_of(self, name: str, step: int, revision: int) -> dict[str, Any] | None:
        """Rank 0, registering a publication: its attributes (once), or ``None``."""
        return self._attrs_of.pop((name, step, revision), None)

    def last(self) -> tuple[str, int]:
        """The array and step of the last publication counted; ``("", -1)`` before any."""
        return list(self._revisions)[-1] if self._revisions else ("", -1)

    def queued(self, name: str) -> None:
        """Rank 0: one more distinct step of ``name`` queued on the scheduler."""
        self._queued[name] = self._queued.get(name, 0) + 1

    def queued_steps(self) -> dict[str, int]:
        """Rank 0: the distinct steps queued on the scheduler so far, per array."""
        return dict(self._queued)


class Timings:
    """One :class:`PublishTiming` per publish on this rank, in order (main thread)."""

    def __init__(self) -> None:
        self._all: list[PublishTiming] = []

    def add(self, timing: PublishTiming) -> None:
        """Record the cost of one more publish."""
        self._all.append(timing)

    @property
    def all(self) -> list[PublishTiming]:
        """Every publish's timing so far (the Bridge's ``timings``)."""
        return self._all

    def held_s(self, name: str) -> float:
        """Seconds flow control held the publishes of ``name`` (:attr:`PublishTiming.held_s`)."""
        return sum(t.held_s for t in self._all if t.name == name)
