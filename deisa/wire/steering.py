"""Steering values on the wire: their plain form, checked on every side, never unpickled.

Shared by every process (imports :mod:`.routes` only, for the reply it reads).
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

import numpy as np

from .routes import Reply, is_ok

# -- steering values ------------------------------------------------------------------------
#
# A steering value crosses the scheduler in a plain form that msgpack carries as it is, and that
# nothing ever unpickles: Python scalars as {"type": ..., "value": ...}, numpy arrays and scalars
# as {"type": "ndarray" | "numpy_scalar", "dtype": dtype.str, "shape": [...], "data": bytes}.
# The scheduler checks that form (value_problem) before storing it, and rank 0 again before
# reading it, so what a client sends another way than encode_value is refused, not run.

MAX_VALUE_BYTES = 1 << 20
"""Largest steering value accepted (1 MiB: an array's data, a string's UTF-8): values are control
data, not arrays to ship."""

ACCEPTED_VALUES = (
    "None, bool, int (64 bits), float, complex, str, or a numpy array or scalar of booleans, "
    "numbers, datetimes, timedeltas, bytes or str"
)
"""What a steering value may be, as errors say it."""

_INT_RANGE = range(-(1 << 63), 1 << 64)  # what msgpack carries
_DTYPE_KINDS = "biufcmMSU"  # no object ("O") nor void/structured ("V") dtype
_MAX_DIMS = 32
_MAX_INTP = int(np.iinfo(np.intp).max)  # numpy refuses a shape whose size overflows it
_SCALARS: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "float": (float,),
    "complex": (list, tuple),  # [real, imag]
    "str": (str,),
}
_ARRAYS = ("ndarray", "numpy_scalar")


class SteeringError(ValueError):
    """A steering value that cannot be stored or read: a bad name, a value of a type not
    accepted (:data:`ACCEPTED_VALUES`), too large, or not in the plain form on the wire."""


def encode_value(name: str, value: Any) -> dict[str, Any] | None:
    """``value`` in the plain form of ``deisa_set_value`` (``None`` stays ``None``: it clears
    ``name``).

    Accepted: ``None``, ``bool``, ``int`` (64 bits), ``float``, ``complex``, ``str``, and numpy
    arrays and scalars of booleans, numbers, datetimes, timedeltas, bytes or str, whatever their
    byte order, shape or strides (a subclass of ``ndarray`` is sent as a plain array). They come
    back as the same type (:func:`decode_value`). Lists and tuples are refused: an array says
    its dtype and shape, a list would have to guess them; send ``np.asarray(value)``.

    Raises
    ------
    SteeringError
        ``name`` is not a non-empty string, ``value`` is of another type (or an array of
        objects or of a structured dtype), or larger than :data:`MAX_VALUE_BYTES`.
    """
    problem = value_name_problem(name)
    if problem is not None:
        raise SteeringError(problem)
    if value is None:
        return None
    encoded: dict[str, Any]
    if isinstance(value, (np.ndarray, np.generic)):  # before float: np.float64 is a float
        array = np.asarray(value)
        problem = _dtype_problem(name, array.dtype) or _size_problem(name, array.nbytes)
        if problem is not None:
            raise SteeringError(problem)
        encoded = {
            "type": "ndarray" if isinstance(value, np.ndarray) else "numpy_scalar",
            "dtype": array.dtype.str,
            "shape": list(array.shape),
            "data": array.tobytes(),
        }
    elif isinstance(value, bool):  # before int: a bool is an int
        encoded = {"type": "bool", "value": bool(value)}
    elif isinstance(value, int):
        encoded = {"type": "int", "value": int(value)}
    elif isinstance(value, float):
        encoded = {"type": "float", "value": float(value)}
    elif isinstance(value, complex):
        encoded = {"type": "complex", "value": [value.real, value.imag]}
    elif isinstance(value, str):
        encoded = {"type": "str", "value": str(value)}
    else:
        hint = "; send np.asarray(value)" if isinstance(value, (list, tuple)) else ""
        raise SteeringError(
            f"steering value {name!r} is a {type(value).__module__}.{type(value).__qualname__}: "
            f"accepted are {ACCEPTED_VALUES}{hint}"
        )
    problem = value_problem(name, encoded)  # the int range, a str's size and encoding
    if problem is not None:
        raise SteeringError(problem)
    return encoded


def decode_value(name: str, reply: Reply, default: Any) -> Any:
    """The value of a ``deisa_get_value`` reply for ``name``, or ``default`` if it holds none.

    Builds the value from its plain form (:func:`encode_value`), never unpickling anything; an
    array comes back writable, in the byte order it was sent with.

    Raises
    ------
    SteeringError
        The reply is an error, or its value is not in the plain form (:func:`value_problem`).
    """
    if not is_ok(reply):
        raise SteeringError(reply["message"])
    encoded = reply["value"]
    if encoded is None:
        return default
    problem = value_problem(name, encoded)
    if problem is not None:
        raise SteeringError(problem)
    kind = encoded["type"]
    if kind == "complex":
        return complex(*encoded["value"])
    if kind not in _ARRAYS:
        return encoded["value"]
    array = np.frombuffer(encoded["data"], dtype=np.dtype(encoded["dtype"]))
    if kind == "numpy_scalar":
        return array[0]
    return array.reshape(tuple(encoded["shape"])).copy()


def value_problem(name: str, encoded: Any) -> str | None:
    """Why ``encoded`` is not a steering value in the plain form of :func:`encode_value`, or
    ``None``: the scheduler's check of what any client sends, and rank 0's of what it reads."""
    kind = encoded.get("type") if isinstance(encoded, dict) else None
    if not isinstance(kind, str):
        kind = None
    if kind in _SCALARS:
        fields = {"type", "value"}
    elif kind in _ARRAYS:
        fields = {"type", "dtype", "shape", "data"}
    else:
        return (
            f"steering value {name!r} is not in the plain form of deisa.wire.encode_value "
            f"(got a {type(encoded).__name__}{f' of type {kind!r}' if kind else ''}); accepted "
            f"are {ACCEPTED_VALUES}"
        )
    if set(encoded) != fields:
        return f"steering value {name!r} of type {kind!r} has the fields {sorted(fields)}"
    if kind in _ARRAYS:
        return _array_problem(name, kind, encoded["dtype"], encoded["shape"], encoded["data"])
    value = encoded["value"]
    typed = isinstance(value, _SCALARS[kind])  # a flag: value stays Any for what follows
    if not typed or (isinstance(value, bool) and kind != "bool"):
        return f"steering value {name!r} of type {kind!r} holds a {type(value).__name__}"
    if kind == "int" and value not in _INT_RANGE:
        return (
            f"steering value {name!r} = {reprlib.repr(value)} does not fit 64 bits; send a "
            "float or a str"
        )
    if kind == "complex" and (len(value) != 2 or not all(type(v) is float for v in value)):
        return (
            f"steering value {name!r} of type 'complex' holds {reprlib.repr(value)}, not "
            "[real, imag]"
        )
    if kind == "str":
        try:
            nbytes = len(value.encode())
        except UnicodeEncodeError as exc:
            return f"steering value {name!r} is a str that UTF-8 cannot encode: {exc}"
        return _size_problem(name, nbytes)
    return None


def _array_problem(name: str, kind: str, dtype: Any, shape: Any, data: Any) -> str | None:
    try:
        parsed = np.dtype(dtype) if isinstance(dtype, str) and len(dtype) <= 32 else None
    except (TypeError, ValueError, OverflowError):
        parsed = None
    if parsed is None or parsed.str != dtype:
        return (
            f"steering value {name!r}: {reprlib.repr(dtype)} is not a numpy dtype string "
            "(dtype.str)"
        )
    problem = _dtype_problem(name, parsed)
    if problem is not None:
        return problem
    if (
        not isinstance(shape, (list, tuple))
        or len(shape) > (0 if kind == "numpy_scalar" else _MAX_DIMS)
        or not all(type(n) is int and n >= 0 for n in shape)
    ):
        return f"steering value {name!r} of type {kind!r} has the shape {reprlib.repr(shape)}"
    if math.prod(max(n, 1) for n in shape) * parsed.itemsize > _MAX_INTP:  # even if empty
        return (
            f"steering value {name!r} of type {kind!r} has the shape {reprlib.repr(shape)}, "
            "larger than numpy's largest array"
        )
    if not isinstance(data, bytes):
        return f"steering value {name!r}: its data is a {type(data).__name__}, not bytes"
    expected = math.prod(shape) * parsed.itemsize
    if len(data) != expected:
        return (
            f"steering value {name!r}: {len(data)} bytes of data for {len(shape)}-d shape "
            f"{tuple(shape)} of {dtype} ({expected} bytes)"
        )
    return _size_problem(name, len(data))


def _dtype_problem(name: str, dtype: np.dtype[Any]) -> str | None:
    if dtype.kind not in _DTYPE_KINDS or dtype.hasobject or dtype.names is not None:
        return (
            f"steering value {name!r} is an array of dtype {dtype}: accepted are "
            f"{ACCEPTED_VALUES} (no objects, no structured dtypes)"
        )
    if dtype.itemsize == 0:
        return f"steering value {name!r} has the empty dtype {dtype.str}"
    return None


def _size_problem(name: str, nbytes: int) -> str | None:
    if nbytes <= MAX_VALUE_BYTES:
        return None
    return (
        f"steering value {name!r} is {nbytes} bytes, more than the {MAX_VALUE_BYTES} allowed: "
        "steering values are small control data; publish arrays through the Bridge"
    )


def value_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a steering value, or ``None``."""
    if not isinstance(name, str) or not name:
        return f"a steering value's name must be a non-empty string, got {name!r}"
    return None
