"""The scheduler's side of steering values: their store and routes.

See :mod:`deisa.analysis.steering` for what steering values are. The store holds each value in
the plain form of :func:`deisa.wire.encode_value` and checks it on arrival
(:func:`deisa.wire.value_problem`): anything else, a pickle among them, is refused with an error
reply, whoever sends it; nothing here unpickles or builds a value.

Runs in the Dask scheduler process, on its event loop. Imports :mod:`deisa.wire` only.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..wire import Reply, Route, error, ok, value_name_problem, value_problem

logger = logging.getLogger(__name__)


@dataclass
class _Entry:
    value: dict[str, Any] | None = None  # the plain form (deisa.wire.encode_value)
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

    def set_value(self, name: str, value: Any) -> Reply:
        self.calls["set"] += 1
        problem = value_name_problem(name)
        if problem is None and value is not None:
            problem = value_problem(name, value)
        if problem is not None:
            logger.warning("deisa: steering value refused: %s", problem)
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
