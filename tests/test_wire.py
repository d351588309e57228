"""deisa.wire: replies, route names, key names and steering value encoding, no cluster."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed.protocol.pickle import dumps

from deisa import wire
from deisa.wire import ProtocolError, Route, Status, error, is_ok, ok, status


def test_replies_carry_their_status_as_a_plain_string() -> None:
    assert ok(step=3) == {"status": "OK", "step": 3}
    lost = error("step 3 was lost", Status.LOST, workers=["tcp://w:1"])
    assert lost == {"status": "lost", "message": "step 3 was lost", "workers": ["tcp://w:1"]}
    assert type(lost["status"]) is str  # what msgpack sends
    assert error("bad")["status"] == "error"


def test_status_reads_every_status_and_refuses_other_answers() -> None:
    for value in Status:
        reply = {"status": value.value}
        assert status(reply) is value
        assert is_ok(reply) is (value is Status.OK)
    for other in ({"status": "older"}, {"value": 1}, None, ["OK"]):
        with pytest.raises(ProtocolError, match="not a deisa reply"):
            status(other)  # type: ignore[arg-type]


def test_routes_are_the_handler_names_on_the_scheduler() -> None:
    assert str(Route.GET) == Route.GET.value == "deisa_get"
    assert str(Route.WATCH_WORKERS) == "deisa_watch_workers"
    assert all(route.value.startswith("deisa_") for route in Route)
    assert len({route.value for route in Route}) == len(Route)


def test_step_key_names_differ_by_run_array_step_and_revision() -> None:
    assert wire.step_key_name("r1", "t", 3) == "deisa-r1-t-3"
    assert wire.step_key_name("r1", "t", 3, revision=2) == "deisa-r1-t-3-r2"
    names = {wire.step_key_name(r, n, s) for r in ("a", "b") for n in ("t", "u") for s in (1, 2)}
    assert len(names) == 8


def _round_trip(value: Any) -> Any:
    encoded = wire.encode_value("v", value)
    assert wire.value_problem("v", encoded) is None  # what the scheduler checks
    return wire.decode_value("v", ok(value=encoded, version=1), None)


@pytest.mark.parametrize(
    "value",
    [True, False, 0, -(2**63), 2**64 - 1, 1.5, float("inf"), -0.0, 2 - 3j, "", "stop ünïcode"],
)
def test_steering_python_scalars_come_back_as_they_were(value: Any) -> None:
    back = _round_trip(value)
    assert type(back) is type(value) and back == value
    assert str(back) == str(value)  # -0.0 stays negative


def test_steering_nan_comes_back() -> None:
    assert np.isnan(_round_trip(float("nan")))


ARRAYS = [
    np.arange(12.0).reshape(3, 4),
    np.arange(12, dtype=">i4").reshape(3, 4),  # big-endian
    np.arange(24, dtype=np.int16).reshape(2, 3, 4)[:, ::2, 1:],  # non-contiguous
    np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    np.array(3.5),  # 0-d
    np.zeros((0, 4), dtype=np.uint8),  # empty
    np.array([True, False]),
    np.array([1 + 2j, 3 - 4j], dtype=">c16"),
    np.array(["2024-01-01", "2025-06-30"], dtype="datetime64[D]"),
    np.array([1, 2], dtype="timedelta64[ms]"),
    np.array([b"ab", b"c"]),
    np.array(["stop", "gö"]),
]


@pytest.mark.parametrize("value", ARRAYS, ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_steering_arrays_keep_dtype_shape_and_values(value: np.ndarray) -> None:
    back = _round_trip(value)
    assert type(back) is np.ndarray and back.dtype == value.dtype and back.shape == value.shape
    assert back.dtype.str == value.dtype.str  # the byte order too
    np.testing.assert_array_equal(back, value)
    back[...] = back  # writable: not a view of the message's bytes
    assert back.flags.writeable


@pytest.mark.parametrize(
    "value",
    [np.float64(2.5), np.int8(-3), np.bool_(True), np.complex64(1j), np.str_("x"), np.uint64(7)],
)
def test_steering_numpy_scalars_stay_numpy_scalars(value: np.generic) -> None:
    back = _round_trip(value)
    assert type(back) is type(value) and back == value


class _Evil:
    """Unpickled, creates ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, 2], r"is a builtins.list: accepted are None, bool, .*; send np.asarray\(value\)"),
        ((0.1,), r"is a builtins.tuple: .*send np.asarray"),
        ({"a": 1}, r"is a builtins.dict: accepted are"),
        (b"raw", r"is a builtins.bytes: accepted are"),
        (2**64, r"'v' = 18446744073709551616 does not fit 64 bits"),
        (-(2**63) - 1, r"does not fit 64 bits"),
        ("\ud800", r"a str that UTF-8 cannot encode"),
        ("x" * (wire.MAX_VALUE_BYTES + 1), r"'v' is 1048577 bytes, more than the 1048576"),
        (np.zeros(wire.MAX_VALUE_BYTES // 8 + 1), r"'v' is 1048584 bytes, more than"),
        (np.array([1, "a"], dtype=object), r"array of dtype object: accepted are"),
        (np.zeros(2, dtype=[("a", "f8"), ("b", "i4")]), r"array of dtype .*no structured"),
        (np.zeros(2, dtype=[("o", "O")]), r"array of dtype .*no objects"),
        (np.zeros(2, dtype="V4"), r"array of dtype \|V4"),
        (np.void(b"ab"), r"array of dtype \|V2"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else None,
)
def test_steering_encode_refuses_what_is_not_plain_data(value: Any, message: str) -> None:
    with pytest.raises(wire.SteeringError, match=message):
        wire.encode_value("v", value)


def test_steering_encode_refuses_objects_without_running_them(tmp_path: Path) -> None:
    with pytest.raises(wire.SteeringError, match=r"'v' is a test_wire._Evil: accepted are"):
        wire.encode_value("v", _Evil(tmp_path / "marker"))
    with pytest.raises(wire.SteeringError, match="non-empty string, got 3"):
        wire.encode_value(3, True)  # type: ignore[arg-type]
    assert wire.encode_value("stop", None) is None


def _plain(**fields: Any) -> dict[str, Any]:
    return {"type": "ndarray", "dtype": "<f8", "shape": [2], "data": bytes(16), **fields}


@pytest.mark.parametrize(
    ("encoded", "message"),
    [
        ("pickle", r"not in the plain form .* \(got a bytes\)"),
        ([1, 2], r"not in the plain form .* \(got a list\)"),
        ({"type": "pickle", "value": b""}, r"\(got a dict of type 'pickle'\)"),
        ({"type": ["unhashable"]}, r"not in the plain form"),
        ({"type": "int"}, r"of type 'int' has the fields \['type', 'value'\]"),
        ({"type": "int", "value": 1, "more": 2}, r"has the fields"),
        ({"type": "int", "value": True}, r"of type 'int' holds a bool"),
        ({"type": "bool", "value": 1}, r"of type 'bool' holds a int"),
        ({"type": "float", "value": "1.0"}, r"of type 'float' holds a str"),
        ({"type": "str", "value": b"x"}, r"of type 'str' holds a bytes"),
        ({"type": "complex", "value": [1.0]}, r"holds \[1.0\], not \[real, imag\]"),
        ({"type": "complex", "value": ["1", 2.0]}, r"not \[real, imag\]"),
        (_plain(dtype="|O"), r"array of dtype object"),
        (_plain(dtype="O"), r"'O' is not a numpy dtype string"),
        (_plain(dtype="float64"), r"'float64' is not a numpy dtype string \(dtype.str\)"),
        (_plain(dtype="i4,f8"), r"is not a numpy dtype string"),
        (_plain(dtype="|V8"), r"array of dtype \|V8"),
        (_plain(dtype="<M8[bogus]"), r"is not a numpy dtype string"),
        (_plain(dtype=8), r"8 is not a numpy dtype string"),
        (_plain(shape=[-1]), r"has the shape \[-1\]"),
        (_plain(shape=[True, 2]), r"has the shape"),
        (_plain(shape="2"), r"has the shape '2'"),
        (_plain(shape=[1] * 33), r"has the shape"),
        (_plain(type="numpy_scalar"), r"of type 'numpy_scalar' has the shape \[2\]"),
        (_plain(data=bytes(15)), r"15 bytes of data for 1-d shape \(2,\) of <f8 \(16 bytes\)"),
        (_plain(data="x" * 16), r"its data is a str, not bytes"),
        (_plain(shape=[2**20, 2**20], data=b""), r"0 bytes of data for 2-d shape"),
        (_plain(shape=[0, 2**63], data=b""), r"larger than numpy's largest array"),
        (_plain(shape=[0, 2**62, 4], data=b""), r"larger than numpy's largest array"),
        (
            _plain(shape=[wire.MAX_VALUE_BYTES // 8 + 1], data=bytes(wire.MAX_VALUE_BYTES + 8)),
            r"is 1048584 bytes, more than",
        ),
    ],
)
def test_steering_plain_form_is_checked_field_by_field(encoded: Any, message: str) -> None:
    if encoded == "pickle":
        encoded = pickle.dumps(5)
    assert re.search(message, wire.value_problem("v", encoded) or "")
    with pytest.raises(wire.SteeringError, match=message):
        wire.decode_value("v", ok(value=encoded, version=1), None)


def test_steering_decode_never_unpickles(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    for payload in (
        pickle.dumps(_Evil(marker)),
        dumps(_Evil(marker)),  # distributed's pickle, as values were sent before
        {"type": "ndarray", "dtype": "|O", "shape": [1], "data": pickle.dumps(_Evil(marker))},
    ):
        with pytest.raises(wire.SteeringError, match="'v'"):
            wire.decode_value("v", ok(value=payload, version=1), None)
    assert not marker.exists()


def test_steering_decode_reads_errors_and_defaults() -> None:
    assert wire.decode_value("v", ok(value=None, version=0), "default") == "default"
    with pytest.raises(wire.SteeringError, match="no such thing"):
        wire.decode_value("v", error("no such thing"), None)
