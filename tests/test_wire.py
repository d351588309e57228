"""deisa.wire: replies, route names, key names and steering value encoding, no cluster."""

from __future__ import annotations

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


def test_steering_value_round_trip_and_refusals() -> None:
    reply = ok(value=wire.encode_value("dt", np.arange(3.0)), version=1)
    np.testing.assert_array_equal(wire.decode_value(reply, None), [0.0, 1.0, 2.0])
    assert wire.decode_value(ok(value=None, version=0), "default") == "default"
    with pytest.raises(wire.SteeringError, match="no such thing"):
        wire.decode_value(error("no such thing"), None)
    assert wire.decode_value(ok(value=dumps(5), version=2), None) == 5


def test_steering_encode_checks_on_the_client_side() -> None:
    with pytest.raises(wire.SteeringError, match="non-empty string, got 3"):
        wire.encode_value(3, True)  # type: ignore[arg-type]
    with pytest.raises(wire.SteeringError, match="'f' cannot be pickled"):
        wire.encode_value("f", _Unpicklable())
    with pytest.raises(wire.SteeringError, match=r"'big' is .* bytes pickled, more than"):
        wire.encode_value("big", np.zeros(wire.MAX_VALUE_BYTES))
    assert wire.encode_value("stop", None) is None


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("no pickling here")
