"""Steering values: small named values the analytics sets and the simulation reads.

The analytics answers the simulation through named values held by the scheduler: it sets them
with :meth:`deisa.Adapter.set` (or :func:`set_value`), the simulation reads them collectively
with :meth:`deisa.Bridge.get` (rank 0 asks the scheduler, one message, and broadcasts, so every
rank sees the same value at the same step), or from a C code through the PDI plugin's ``read``
section (see ``docs/steering.md``).

Semantics:

- **Latest value wins**, per name: a value set twice before the simulation reads it is read
  once, with its second value; reading does not consume it, so every later read sees it too,
  until the analytics sets it again. A stop flag or a parameter is a state, not a message.
- Setting ``None`` clears the name: readers get their default again.
- Values are pickled by the analytics and unpickled by the simulation's rank 0; the scheduler
  only stores the bytes (at most :data:`MAX_VALUE_BYTES` pickled per value). Use scalars,
  strings, small numpy arrays.
- Values live on the scheduler until set again, whatever the simulation run: a new run on the
  same scheduler sees the values set for the previous one unless they were cleared.

Routes (RPC handlers on the scheduler, registered with the :class:`~deisa.extension.
StreamExtension` by :func:`install`):

- ``deisa_set_value(name, value)``: store ``value`` (pickled bytes, or ``None`` to clear).
- ``deisa_get_value(name)``: ``{"status": "OK", "value": bytes | None, "version": int}``;
  ``version`` counts the times ``name`` was set (0: never).

Examples
--------
>>> adapter = Adapter(client)  # doctest: +SKIP
>>> adapter.set("stop", True)  # analytics side  # doctest: +SKIP
>>> if bridge.get("stop", False):  # simulation side, collective  # doctest: +SKIP
...     break
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distributed.protocol.pickle import dumps, loads

logger = logging.getLogger(__name__)

MAX_VALUE_BYTES = 1 << 20
"""Largest pickled steering value accepted (1 MiB): values are control data, not arrays to ship."""


class SteeringError(ValueError):
    """A steering value that cannot be stored: bad name, unpicklable or too large."""


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
        return {"deisa_set_value": self.set_value, "deisa_get_value": self.get_value}

    def set_value(self, name: str, value: bytes | None) -> dict[str, Any]:
        self.calls["set"] += 1
        problem = _name_problem(name)
        if problem is None and value is not None and not isinstance(value, bytes):
            problem = f"steering value {name!r} must arrive pickled (bytes), got {type(value)}"
        if problem is None and value is not None and len(value) > MAX_VALUE_BYTES:
            problem = _too_large(name, len(value))
        if problem is not None:
            return {"status": "error", "message": problem}
        entry = self._entries.setdefault(name, _Entry())
        entry.value = value
        entry.version += 1
        logger.info(
            "deisa: steering value %r %s (version %d)",
            name,
            "cleared" if value is None else "set",
            entry.version,
        )
        return {"status": "OK", "version": entry.version}

    def get_value(self, name: str) -> dict[str, Any]:
        self.calls["get"] += 1
        problem = _name_problem(name)
        if problem is not None:
            return {"status": "error", "message": problem}
        entry = self._entries.get(name, _Entry())
        return {"status": "OK", "value": entry.value, "version": entry.version}

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


# -- client side ----------------------------------------------------------------------------


def encode(name: str, value: Any) -> bytes | None:
    """``value`` pickled for :func:`set_value` (``None`` stays ``None``: it clears ``name``).

    Raises
    ------
    SteeringError
        ``name`` is not a non-empty string, or ``value`` cannot be pickled or is larger than
        :data:`MAX_VALUE_BYTES` pickled.
    """
    problem = _name_problem(name)
    if problem is not None:
        raise SteeringError(problem)
    if value is None:
        return None
    try:
        payload: bytes = dumps(value)
    except Exception as exc:
        raise SteeringError(
            f"steering value {name!r} cannot be pickled: {type(exc).__name__}: {exc}"
        ) from exc
    if len(payload) > MAX_VALUE_BYTES:
        raise SteeringError(_too_large(name, len(payload)))
    return payload


def decode(reply: dict[str, Any], default: Any) -> Any:
    """The value of a ``deisa_get_value`` reply, or ``default`` if the name holds none."""
    _check_reply(reply)
    if reply["status"] != "OK":
        raise SteeringError(reply["message"])
    return default if reply["value"] is None else loads(reply["value"])


def set_value(client: Any, name: str, value: Any) -> int:
    """Set steering value ``name`` to ``value`` from a synchronous Dask ``client``.

    The latest value wins; ``None`` clears the name. See the module docstring.

    Returns
    -------
    int
        The name's version: how many times it was set (cleared included).

    Raises
    ------
    SteeringError
        A bad name, or a value that cannot be pickled or is too large.
    """
    reply: dict[str, Any] = client.sync(
        client.scheduler.deisa_set_value, name=name, value=encode(name, value)
    )
    _check_reply(reply)
    if reply["status"] != "OK":
        raise SteeringError(reply["message"])
    version: int = reply["version"]
    return version


def get_value(client: Any, name: str, default: Any = None) -> Any:
    """The current steering value ``name`` as a Dask ``client`` sees it, or ``default``."""
    return decode(client.sync(client.scheduler.deisa_get_value, name=name), default)


def _check_reply(reply: Any) -> None:
    if not isinstance(reply, dict):
        raise SteeringError(
            f"the scheduler answered {reply!r}: its deisa extension has no steering routes "
            "(deisa_set_value, deisa_get_value); is it running an older deisa?"
        )


def _name_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return f"a steering value's name must be a non-empty string, got {name!r}"
    return None


def _too_large(name: str, nbytes: int) -> str:
    return (
        f"steering value {name!r} is {nbytes} bytes pickled, more than the "
        f"{MAX_VALUE_BYTES} allowed: steering values are small control data; publish arrays "
        "through the Bridge"
    )
