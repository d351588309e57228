"""The scheduler's side of steering values: their store and routes.

See :mod:`deisa.analysis.steering` for what steering values are.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..wire import MAX_VALUE_BYTES, Reply, Route, error, ok, too_large_value, value_name_problem

logger = logging.getLogger(__name__)


@dataclass
class _Entry:
    value: bytes | None = None
    version: int = 0


class SteeringValues:
    """The scheduler-side store of steering values; see the module docstring.

    Attributes
    ----------
    calls : Counter
        Calls per route (``set``, ``get``), as :meth:`deisa.Adapter.stats` reports them.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self.calls: Counter[str] = Counter()

    def handlers(self) -> dict[str, Callable[..., Any]]:
        """The routes, by name, for ``scheduler.handlers``."""
        return {Route.SET_VALUE.value: self.set_value, Route.GET_VALUE.value: self.get_value}

    def set_value(self, name: str, value: bytes | None) -> Reply:
        self.calls["set"] += 1
        problem = value_name_problem(name)
        if problem is None and value is not None and not isinstance(value, bytes):
            problem = f"steering value {name!r} must arrive pickled (bytes), got {type(value)}"
        if problem is None and value is not None and len(value) > MAX_VALUE_BYTES:
            problem = too_large_value(name, len(value))
        if problem is not None:
            return error(problem)
        entry = self._entries.setdefault(name, _Entry())
        entry.value = value
        entry.version += 1
        logger.info(
            "deisa: steering value %r %s (version %d)",
            name,
            "cleared" if value is None else "set",
            entry.version,
        )
        return ok(version=entry.version)

    def get_value(self, name: str) -> Reply:
        self.calls["get"] += 1
        problem = value_name_problem(name)
        if problem is not None:
            return error(problem)
        entry = self._entries.get(name, _Entry())
        return ok(value=entry.value, version=entry.version)

    def stats(self) -> dict[str, Any]:
        """Calls per route and, per name, its version and whether it holds a value."""
        return {
            "calls": dict(self.calls),
            "values": {
                name: {"version": e.version, "set": e.value is not None}
                for name, e in self._entries.items()
            },
        }


def install(scheduler: Any) -> SteeringValues:
    """Register the steering routes on ``scheduler``; returns their (empty) store."""
    values = SteeringValues()
    scheduler.handlers.update(values.handlers())
    return values
