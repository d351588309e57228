"""The scheduler's steering routes (deisa.scheduler.steering), in process: a real scheduler,
two workers, one client.

The routes are driven as :meth:`deisa.Adapter.set` and rank 0 of :meth:`deisa.Bridge.get` drive
them; the Adapter's side is in ``analysis/test_analysis_steering.py``, the encoding in
``test_wire.py``, and the real-process test (every rank of an mpirun sees the same value at the
same step) is ``test_steering_mpi.py``.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from distributed import Client
from distributed.utils_test import gen_cluster

from deisa import wire
from deisa.scheduler.extension import EXTENSION_NAME, StreamExtension


async def _set(c: Client, name: Any, value: Any) -> dict[str, Any]:
    return await c.scheduler.deisa_set_value(name=name, value=wire.encode_value(name, value))


async def _get(c: Client, name: str, default: Any = None) -> Any:
    return wire.decode_value(name, await c.scheduler.deisa_get_value(name=name), default)


@gen_cluster(client=True)
async def test_steering_latest_value_wins_when_set_twice_before_a_read(c, s, a, b) -> None:
    await c.register_plugin(StreamExtension())
    assert await _get(c, "stop", "unset") == "unset"
    assert (await _set(c, "stop", 1))["version"] == 1
    assert (await _set(c, "stop", 2))["version"] == 2  # set twice before the simulation reads
    assert await _get(c, "stop") == 2
    assert await _get(c, "stop") == 2  # a read does not consume it
    await _set(c, "dt", np.arange(3.0))
    np.testing.assert_array_equal(await _get(c, "dt"), [0.0, 1.0, 2.0])
    assert await _get(c, "stop") == 2  # names are independent
    stats = s.plugins[EXTENSION_NAME].stats()["steering"]
    assert stats["values"] == {
        "stop": {"version": 2, "set": True},
        "dt": {"version": 1, "set": True},
    }
    assert stats["calls"] == {"set": 3, "get": 5}


@gen_cluster(client=True)
async def test_steering_none_clears_the_value(c, s, a, b) -> None:
    await c.register_plugin(StreamExtension())
    await _set(c, "stop", True)
    reply = await _set(c, "stop", None)
    assert reply == wire.ok(version=2)
    assert await _get(c, "stop", False) is False
    assert s.plugins[EXTENSION_NAME].steering.stats()["values"]["stop"] == {
        "version": 2,
        "set": False,
    }


@gen_cluster(client=True)
async def test_steering_values_cross_the_scheduler_as_they_were_set(c, s, a, b) -> None:
    await c.register_plugin(StreamExtension())
    values = [
        True, 7, -2.5, 1 - 1j, "gö", np.float32(0.5),
        np.arange(6, dtype=">i2").reshape(2, 3)[:, 1:], np.array("2024-01-01", dtype="M8[s]"),
    ]  # fmt: skip
    for i, value in enumerate(values):
        await _set(c, f"v{i}", value)
    for i, value in enumerate(values):
        back = await _get(c, f"v{i}")  # through msgpack both ways (tuples for lists)
        assert type(back) is type(value)
        np.testing.assert_array_equal(back, value)
        assert np.asarray(back).dtype.str == np.asarray(value).dtype.str


@gen_cluster(client=True)
async def test_steering_routes_refuse_bad_names_and_payloads(c, s, a, b) -> None:
    await c.register_plugin(StreamExtension())
    plain = wire.encode_value("stop", np.zeros(2))
    refused = {
        "": (wire.encode_value("x", True), "non-empty string"),
        "stop": (3, "not in the plain form of deisa.wire.encode_value (got a int)"),
        "pickle": (pickle.dumps(5), "(got a bytes)"),
        "big": (b"x" * (wire.MAX_VALUE_BYTES + 1), "(got a bytes)"),
        "objects": ({**plain, "dtype": "|O"}, "array of dtype object"),
        "short": ({**plain, "data": bytes(15)}, "15 bytes of data for 1-d shape (2,) of <f8"),
        "huge": (
            {**plain, "shape": [wire.MAX_VALUE_BYTES], "data": bytes(8 * wire.MAX_VALUE_BYTES)},
            "'huge' is 8388608 bytes, more than the 1048576 allowed",
        ),
    }
    for name, (payload, message) in refused.items():
        reply = await c.scheduler.deisa_set_value(name=name, value=payload)
        assert wire.status(reply) is wire.Status.ERROR, name
        assert message in reply["message"], (name, reply["message"])
        assert await _get(c, name or "x", "unset") == "unset"  # nothing was stored
    reply = await c.scheduler.deisa_get_value(name=None)
    assert wire.status(reply) is wire.Status.ERROR
    with pytest.raises(wire.SteeringError, match="non-empty string"):
        wire.decode_value("x", reply, None)
    assert s.plugins[EXTENSION_NAME].steering.stats()["values"] == {}
