"""Steering values: small named values the analytics sets and the simulation reads.

The analytics answers the simulation through named values held by the scheduler: it sets them
with :meth:`deisa.Adapter.set` (or set_value), the simulation reads them collectively
with :meth:`deisa.Bridge.get` (rank 0 asks the scheduler, one message, and broadcasts, so every
rank sees the same value at the same step), or from a C code through the PDI plugin's ``read``
section (see ``docs/steering.md``).

Semantics:

- **Latest value wins**, per name: a value set twice before the simulation reads it is read
  once, with its second value; reading does not consume it, so every later read sees it too,
  until the analytics sets it again. A stop flag or a parameter is a state, not a message.
- Setting ``None`` clears the name: readers get their default again.
- Values are plain data, never pickled: ``None``, ``bool``, ``int`` (64 bits), ``float``,
  ``complex``, ``str``, and numpy arrays and scalars of booleans, numbers, datetimes,
  timedeltas, bytes or str (:data:`deisa.wire.ACCEPTED_VALUES`), at most
  :data:`~deisa.wire.MAX_VALUE_BYTES` (1 MiB) each; the simulation reads them back as the same
  type (an array with its dtype, byte order and shape). Anything else (a list: send
  ``np.asarray(value)``; an object, an array of objects) raises :class:`~deisa.wire.SteeringError`
  here. They travel as ``{"type", "value"}`` or ``{"type", "dtype", "shape", "data"}``
  (:func:`deisa.wire.encode_value`); the scheduler refuses anything not in that form, whoever
  sends it, and the simulation's rank 0 builds the value from it without unpickling anything.
- Values live on the scheduler until set again, whatever the simulation run: a new run on the
  same scheduler sees the values set for the previous one unless they were cleared.

Routes (RPC handlers on the scheduler, registered with the :class:`~deisa.scheduler.extension.
StreamExtension`):

- ``deisa_set_value(name, value)``: store ``value`` (the plain form of
  :func:`deisa.wire.encode_value`, or ``None`` to clear); an error reply for anything else.
- ``deisa_get_value(name)``: ``ok(value=dict | None, version=int)``;
  ``version`` counts the times ``name`` was set (0: never).

Examples
--------
>>> adapter = Adapter(client)  # doctest: +SKIP
>>> adapter.set("stop", True)  # analytics side  # doctest: +SKIP
>>> if bridge.get("stop", False):  # simulation side, collective  # doctest: +SKIP
...     break
"""

from __future__ import annotations

from typing import Any

from ..wire import Route, SteeringError, decode_value, encode_value, is_ok


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
        A bad name, a value of a type not accepted (see the module docstring), or too large.
    """
    reply: dict[str, Any] = client.sync(
        getattr(client.scheduler, Route.SET_VALUE), name=name, value=encode_value(name, value)
    )
    if not is_ok(reply):
        raise SteeringError(reply["message"])
    version: int = reply["version"]
    return version


def get_value(client: Any, name: str, default: Any = None) -> Any:
    """The current steering value ``name`` as a Dask ``client`` sees it, or ``default``."""
    reply = client.sync(getattr(client.scheduler, Route.GET_VALUE), name=name)
    return decode_value(name, reply, default)
