"""The Adapter's side of steering values (deisa.analysis.steering, ``Adapter.set``), against a
real scheduler in process; the routes are tested in ``scheduler/test_scheduler_steering.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from distributed import Client
from distributed.utils_test import gen_cluster

from deisa import wire
from deisa.analysis import steering


@gen_cluster(client=True)
async def test_adapter_set_reaches_the_scheduler(c, s, a, b) -> None:
    # Adapter.set is synchronous: drive it from a synchronous client in a thread
    def analytics() -> tuple[int, Any]:
        from deisa import Adapter

        with Client(s.address, timeout=30) as client:
            adapter = Adapter(client)
            adapter.set("stop", False)
            version = adapter.set("stop", True)
            with pytest.raises(wire.SteeringError, match="non-empty string"):
                adapter.set("", 1)
            with pytest.raises(wire.SteeringError, match=r"'dt' is a builtins.list: accepted"):
                adapter.set("dt", [0.1, 0.2])  # refused before anything is sent
            adapter.set("dt", np.array([0.1, 0.2], dtype=">f4"))
            return version, steering.get_value(client, "stop")

    version, value = await asyncio.get_running_loop().run_in_executor(None, analytics)
    assert (version, value) == (2, True)
    assert wire.decode_value("stop", await c.scheduler.deisa_get_value(name="stop"), None) is True
    reply = await c.scheduler.deisa_get_value(name="dt")
    assert reply["version"] == 1  # the list never reached the scheduler
    dt = wire.decode_value("dt", reply, None)
    assert dt.dtype.str == ">f4"
    np.testing.assert_array_equal(dt, np.array([0.1, 0.2], dtype=">f4"))
