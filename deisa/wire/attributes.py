"""An array's attributes (its metadata: units, spacing, the time of a step) as they travel:
plain values, which array each of an ADIOS2 io's attributes belongs to, what changed, and the
record names of an openPMD io's variables.

Attributes travel plainly, never pickled: a value is a number (``int``, ``float``, ``bool``),
a string, or a list of them (numpy scalars and 1-D arrays become those, exactly: a float32 is
widened to the same float64 value). The Bridge sends an array's static attributes in its open
metadata and, with a step's one ``deisa_publish``, the attributes new or changed since the
array's previous step; the analytics merges them (:meth:`deisa.analysis.adapter.
ArrayDescriptor.attrs_of`). An attribute once set is never removed.

ADIOS2 names an io's attributes flatly: ``units`` (global), ``T/units`` (variable ``T``'s,
``DefineAttribute(name, value, "T")``), openPMD's ``/data/meshes/E/x/unitSI``,
``/data/meshes/E/gridSpacing``, ``/data/time``, ``/openPMD``. :func:`of_array` gives an array
the attributes of its own path and of the paths above it, nearest first (openPMD's rule: a
record component inherits its record's attributes, a record its iteration's, an iteration the
file's): the engine (on the simulation's rank 0) and ``Replay`` of a .bp file use it alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "AttributeIndex",
    "AttrsError",
    "changes",
    "is_openpmd",
    "of_array",
    "openpmd_record",
    "plain",
    "plain_attrs",
]

Plain = int | float | bool | str | list[Any]


class AttrsError(TypeError):
    """An attribute whose value is not plain (a number, a string, or a list of them)."""


def plain(value: Any, what: str = "attribute") -> Plain:
    """``value`` as a plain value: Python numbers and strings as they are, numpy scalars as the
    Python number of the same value, sequences and 1-D numpy arrays as lists of those.

    Raises
    ------
    AttrsError
        Anything else (a dict, an object, an n-D array, a list of lists); ``what`` names it.
    """
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        item = value.item()
        if isinstance(item, (bool, int, float, str)):
            return item
    if isinstance(value, np.ndarray) and value.ndim <= 1:
        return plain(value.item(), what) if value.ndim == 0 else [plain(v, what) for v in value]
    if isinstance(value, (list, tuple)):
        items = [plain(v, what) for v in value]
        if all(not isinstance(v, list) for v in items):
            return items
    raise AttrsError(
        f"{what}={value!r:.100} is not a plain value (a number, a string, or a list of them): "
        "attributes travel plainly, never pickled"
    )


def plain_attrs(attrs: Mapping[str, Any] | None, what: str = "attrs") -> dict[str, Plain]:
    """``attrs`` checked: string keys, plain values (:func:`plain`); ``None``: ``{}``.

    Raises
    ------
    AttrsError
        ``attrs`` is not a mapping, a key is not a string, or a value is not plain; the message
        names it (``what[key]``).
    """
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise AttrsError(f"{what}={attrs!r:.100} must be a dict of attribute values")
    checked: dict[str, Plain] = {}
    for key, value in attrs.items():
        if not isinstance(key, str):
            raise AttrsError(f"{what}: key {key!r} is not a string")
        checked[key] = plain(value, f"{what}[{key!r}]")
    return checked


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types (``1 != 1.0``, ``NaN == NaN``: a value sent once)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes of ``now`` that ``before`` lacks or holds another value of."""
    missing = object()
    return {k: v for k, v in now.items() if not _same(before.get(k, missing), v)}


def _segments(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def of_array(attributes: Mapping[str, Any], variable: str) -> dict[str, Any]:
    """The attributes of an io (ADIOS2's flat names) that belong to ``variable``, by their own
    names: the variable's own (``variable/key``, where ``key`` may hold ``/``), then those of
    each path above it (``parent/key``, ``key`` without ``/``), up to the global ones (``key``
    or ``/key``); the nearest wins a name given at several levels.

    >>> io = {"/openPMD": "1.1.0", "/data/time": 0.5, "/data/meshes/E/gridSpacing": [1.0, 2.0],
    ...       "/data/meshes/E/x/unitSI": 2.0, "/data/meshes/E/y/unitSI": 3.0, "units": "K"}
    >>> of_array(io, "/data/meshes/E/x")  # doctest: +NORMALIZE_WHITESPACE
    {'openPMD': '1.1.0', 'units': 'K', 'time': 0.5, 'gridSpacing': [1.0, 2.0], 'unitSI': 2.0}
    """
    return AttributeIndex(attributes).of_array(variable)


class AttributeIndex:
    """An io's attributes indexed by path once (a step's), so that each array's
    (:func:`of_array`'s rule) costs the depth of its name, not the number of attributes."""

    def __init__(self, attributes: Mapping[str, Any]) -> None:
        # the attributes right under each path, and those anywhere below it (by the rest)
        self._at: dict[str, list[tuple[str, Any]]] = {}
        self._below: dict[str, list[tuple[str, Any]]] = {}
        for name, value in attributes.items():
            segments = _segments(name)
            if not segments or segments[0].startswith("__openPMD"):  # openPMD-api's bookkeeping
                continue
            self._at.setdefault("/".join(segments[:-1]), []).append((segments[-1], value))
            for depth in range(1, len(segments)):
                rest = "/".join(segments[depth:])
                self._below.setdefault("/".join(segments[:depth]), []).append((rest, value))

    def of_array(self, variable: str) -> dict[str, Any]:
        """The attributes of ``variable``, by :func:`of_array`'s rule."""
        parts = _segments(variable)
        found: dict[str, Any] = {}
        for depth in range(len(parts)):  # the global ones first, the nearest last: it wins
            found.update(self._at.get("/".join(parts[:depth]), ()))
        if parts:
            found.update(self._below.get("/".join(parts), ()))
        return found


# -- openPMD: record names ------------------------------------------------------------------

_OPENPMD_DEFAULTS = {
    "basePath": "/data/%T/",
    "meshesPath": "meshes/",
    "particlesPath": "particles/",
}


def _text(attributes: Mapping[str, Any], key: str) -> str:
    value = attributes.get("/" + key, attributes.get(key, _OPENPMD_DEFAULTS[key]))
    return value if isinstance(value, str) else _OPENPMD_DEFAULTS[key]


def is_openpmd(attributes: Mapping[str, Any]) -> bool:
    """Whether an io's attributes are an openPMD file's (its ``/openPMD`` version attribute)."""
    return "/openPMD" in attributes or "openPMD" in attributes


def openpmd_record(variable: str, attributes: Mapping[str, Any] | None = None) -> str | None:
    """The record name of an openPMD io's variable (``attributes``: the io's; ``None``:
    openPMD's default paths): a mesh's ``E/x`` (``rho`` for a scalar mesh) from
    ``/data/meshes/E/x`` (variable-based encoding, ``basePath`` ``/data/``) or
    ``/data/100/meshes/E/x`` (``/data/%T/``), a particle record's ``electrons/position/x``;
    ``None`` for a variable outside the meshes and particles (openPMD-api's own bookkeeping).

    >>> openpmd_record("/data/meshes/E/x"), openpmd_record("/data/7/particles/e/position/x")
    ('E/x', 'e/position/x')
    >>> openpmd_record("/data/snapshot") is None
    True
    """
    attributes = {} if attributes is None else attributes
    base = _segments(_text(attributes, "basePath"))
    parts = _segments(variable)
    rest: list[str] | None = None
    if base and base[-1] == "%T":  # /data/%T/: the iteration's number, or none (variable-based)
        stem = base[:-1]
        if parts[: len(stem)] == stem:
            tail = parts[len(stem) :]
            rest = tail[1:] if tail and re.fullmatch(r"\d+", tail[0]) else tail
    elif parts[: len(base)] == base:
        rest = parts[len(base) :]
    if not rest:
        return None
    for key in ("meshesPath", "particlesPath"):
        prefix = _segments(_text(attributes, key))
        if prefix and rest[: len(prefix)] == prefix and len(rest) > len(prefix):
            return "/".join(rest[len(prefix) :])
    return None
