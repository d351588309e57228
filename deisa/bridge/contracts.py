"""The Bridge's side of contracts: the contracts in force, the same on every rank.

See :mod:`deisa.contract` for what a contract is and how it reaches the simulation.

Runs in a simulation rank: its main thread reads the contracts in force (``plan``, at each
``publish``); rank 0's loop thread watches the scheduler for new ones, which reach the other
ranks through the exchange. Imports :mod:`deisa.contract` and :mod:`deisa.wire` only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..contract import FULL, Contract, Plan, plan
from ..wire import WATCH_SECONDS

logger = logging.getLogger(__name__)


class ContractBook:
    """The contracts in force on one Bridge, the same on every rank (see the module docstring).

    Rank 0's event loop records what the scheduler serves (:meth:`served`, from the reply of
    ``deisa_open`` and from :meth:`watch`); the Bridge's exchange carries the changes to every
    rank (:meth:`to_spread` on rank 0, :meth:`receive` on every rank), which then plan their
    steps with :meth:`plan`.
    """

    def __init__(self) -> None:
        self.active: dict[str, Contract | None] = {}
        self.versions: dict[str, int] = {}  # the versions in force (every rank)
        self._latest: dict[str, tuple[int, dict[str, Any] | None]] = {}  # rank 0, loop thread
        self._lock = threading.Lock()
        self._plans: dict[tuple[str, int, int], Plan] = {}

    def served(self, name: str, reply: dict[str, Any] | None) -> None:
        """Rank 0: the scheduler's ``{"version", "contract"}`` for ``name`` (any thread)."""
        if not reply:
            return
        with self._lock:
            version = int(reply.get("version", 0))
            if version > self._latest.get(name, (0, None))[0]:
                self._latest[name] = (version, reply.get("contract"))

    def known_versions(self) -> dict[str, int]:
        with self._lock:
            return {name: version for name, (version, _) in self._latest.items()}

    def to_spread(self) -> dict[str, Any] | None:
        """Rank 0, at each exchange: the changes not in force yet, or ``None``."""
        with self._lock:
            changes = {
                name: {"version": version, "contract": wire}
                for name, (version, wire) in self._latest.items()
                if version != self.versions.get(name, 0)
            }
        return changes or None

    def receive(self, changes: dict[str, Any]) -> None:
        """Every rank, at the same exchange: put ``changes`` in force from the next step."""
        for name, change in changes.items():
            wire = change["contract"]
            contract = None if wire is None else Contract.from_wire(wire)
            self.active[name] = contract
            self.versions[name] = int(change["version"])
            logger.info(
                "deisa bridge: contract of %r version %d in force: %s",
                name,
                change["version"],
                "none (everything sent)" if contract is None else contract.describe(),
            )

    def plan(self, name: str, step: int, chunks: Sequence[Sequence[int]],
             block_index: Sequence[Sequence[int]]) -> Plan:  # fmt: skip
        contract = self.active.get(name)
        if contract is None:
            return FULL
        if not contract.wants(step):
            return Plan(send=False, contract=contract)
        key = (name, self.versions.get(name, 0), 0)
        if key not in self._plans:
            self._plans[key] = plan(contract, step, chunks, block_index)
        return self._plans[key]

    async def watch(
        self,
        call: Callable[..., Awaitable[dict[str, Any]]],
        names: Sequence[str],
        on_change: Callable[[], None],
    ) -> None:
        """Rank 0's event loop: keep ``deisa_watch_contracts`` open until cancelled.

        ``call(names=, versions=, timeout=)`` is the scheduler's route; ``on_change`` wakes the
        Bridge's waits (a change is spread at the next exchange).
        """
        failures = 0
        while True:
            try:
                reply = await call(
                    names=list(names), versions=self.known_versions(), timeout=WATCH_SECONDS
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the scheduler is gone or busy: the Bridge reports that
                failures += 1
                logger.debug("deisa bridge: watching contracts failed: %r", exc)
                await asyncio.sleep(min(10.0, 0.5 * failures))
                continue
            failures = 0
            for name, served in (reply.get("contracts") or {}).items():
                self.served(name, served)
            if reply.get("contracts"):
                on_change()
