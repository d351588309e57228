"""The scheduler's side of contracts: one slot per array name, and the contract routes.

See :mod:`deisa.contract` for what a contract is; the routes are listed there.

The watch doubles as the simulation's heartbeat: rank 0 of a Bridge keeps
``deisa_watch_contracts`` open for its arrays from its connection to its ``close`` (asking again
at least every :data:`~deisa.wire.WATCH_SECONDS`, whatever the simulation's steps), so the store
notes, per array, when a run opened it or its rank 0 last asked or was answered
(``deisa_stats()["contracts"]["silent_s"]``: seconds since). The analytics of ``deisa-run``
tells a slow simulation from a gone one by it where it cannot see the ranks' processes
(:mod:`deisa.pca_app.stall`). It costs no message: the watch is there for contracts anyway.

Runs in the Dask scheduler process, on its event loop. Imports :mod:`deisa.contract` and
:mod:`deisa.wire` only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..contract import Contract, ContractError
from ..wire import WATCH_SECONDS, Reply, Route, error, ok

logger = logging.getLogger(__name__)


@dataclass
class _ContractSlot:
    contract: Contract | None = None
    version: int = 0
    checked: bool = True  # False: waits for the array to open
    error: str | None = None  # why the last contract was refused when the array opened


@dataclass
class ContractStore:
    """The scheduler-side contracts, one slot per array name; see the module docstring.

    ``meta_of(name)`` gives an array's metadata (``{"shape": ...}``) while a run has it open,
    else ``None``. ``heard[name]`` is when (:func:`time.monotonic`) a run opened the array or
    rank 0 of its Bridge last called or was answered by ``deisa_watch_contracts`` for it.
    """

    meta_of: Callable[[str], dict[str, Any] | None]
    slots: dict[str, _ContractSlot] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    heard: dict[str, float] = field(default_factory=dict)
    _changed: asyncio.Event | None = None

    def handlers(self) -> dict[str, Callable[..., Any]]:
        return {
            Route.SET_CONTRACT.value: self.set_contract,
            Route.GET_CONTRACT.value: self.get_contract,
            Route.WATCH_CONTRACTS.value: self.watch_contracts,
        }

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def served(self, name: str) -> dict[str, Any]:
        """``{"version", "contract"}`` as a Bridge receives it (a contract not checked yet:
        none)."""
        slot = self.slots.get(name, _ContractSlot())
        wire = slot.contract.to_wire() if slot.contract is not None and slot.checked else None
        return {"version": slot.version, "contract": wire}

    def opened(self, name: str, meta: dict[str, Any]) -> dict[str, Any]:
        """A run opened ``name``: check its contract against it. Returns what ``deisa_open``
        adds to its reply: ``{"contract": {"version", "contract"}}``, or nothing if the array
        never had a contract."""
        self.heard[name] = time.monotonic()  # the run's heartbeat starts with it
        slot = self.slots.get(name)
        if slot is not None and slot.contract is not None:
            try:
                contract = resolved(slot.contract, meta, name)
            except ContractError as exc:
                logger.error("deisa: contract of %r dropped: %s", name, exc)
                self.slots[name] = _ContractSlot(None, slot.version + 1, True, str(exc))
            else:
                slot.contract, slot.checked, slot.error = contract, True, None
            self._notify()
        return {"contract": self.served(name)} if name in self.slots else {}

    async def set_contract(
        self, name: str, contract: dict[str, Any] | None, timeout: float | None = None
    ) -> Reply:
        self.calls["set"] += 1
        if not isinstance(name, str) or not name:
            return error(f"array name {name!r} must be a string")
        try:
            parsed = None if contract is None else Contract.from_wire(contract)
        except ContractError as exc:
            return error(str(exc))
        slot = self.slots.setdefault(name, _ContractSlot())
        meta = self.meta_of(name)
        if parsed is not None and meta is not None:
            try:
                parsed = resolved(parsed, meta, name)
            except ContractError as exc:
                return error(str(exc))
        version = slot.version + 1
        checked = parsed is None or meta is not None
        self.slots[name] = slot = _ContractSlot(
            None if parsed is None else parsed.with_version(version), version, checked
        )
        self._notify()
        logger.info(
            "deisa: contract of %r version %d: %s%s",
            name,
            version,
            "dropped" if parsed is None else parsed.describe(),
            "" if checked else " (checked when a simulation opens the array)",
        )
        if not checked:
            done = await self._wait(lambda: self.slots[name].version != version
                                    or self.slots[name].checked, timeout)  # fmt: skip
            slot = self.slots[name]
            if slot.version == version + 1 and slot.error is not None:
                return error(slot.error)
            if not done and slot.version == version:
                self.slots[name] = _ContractSlot(None, version + 1)  # withdrawn: never served
                self._notify()
                return error(
                    f"unknown array {name!r}: no simulation opened it within {timeout} s, so "
                    "its contract could not be checked and was withdrawn"
                )
        return ok(**self.served(name))

    async def _wait(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not ready():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            try:
                await asyncio.wait_for(self._event().wait(), left)
            except asyncio.TimeoutError:
                return ready()
        return True

    def get_contract(self, name: str) -> Reply:
        self.calls["get"] += 1
        slot = self.slots.get(name, _ContractSlot())
        return ok(**self.served(name), error=slot.error)

    async def watch_contracts(
        self, names: list[str], versions: dict[str, int], timeout: float | None = WATCH_SECONDS
    ) -> Reply:
        self.calls["watch"] += 1
        self._beat(names)

        def changed() -> dict[str, Any]:
            return {
                name: self.served(name)
                for name in names
                if self.slots.get(name, _ContractSlot()).version != versions.get(name, 0)
                and self.slots.get(name, _ContractSlot()).checked
            }

        await self._wait(lambda: bool(changed()), timeout)
        self._beat(names)
        return ok(contracts=changed())

    def _beat(self, names: list[str]) -> None:
        now = time.monotonic()
        self.heard.update(dict.fromkeys(names, now))

    def stats(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "calls": dict(self.calls),
            "silent_s": {name: round(now - at, 3) for name, at in self.heard.items()},
            "contracts": {
                name: {
                    "version": s.version,
                    "contract": None if s.contract is None else s.contract.describe(),
                    "checked": s.checked,
                    "error": s.error,
                }
                for name, s in self.slots.items()
            },
        }


def resolved(contract: Contract, meta: dict[str, Any], name: str) -> Contract:
    """``contract`` checked against the array ``meta`` describes (:meth:`Contract.resolved`).

    Raises
    ------
    ContractError
        As :meth:`Contract.resolved`; or a region on a moving array (whose shape changes from
        step to step: not supported yet).
    """
    if contract.region is None:  # steps only: any array, a moving one too
        return contract
    if meta.get("moving"):
        raise ContractError(
            f"array {name!r} is moving (its shape changes from step to step): a contract's "
            "region is not supported on moving arrays yet; a contract of steps only "
            "(require(steps=...)) is"
        )
    return contract.resolved(meta["shape"], name)
