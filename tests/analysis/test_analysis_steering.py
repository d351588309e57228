"""The Adapter's side of steering values (deisa.analysis.steering, ``Adapter.set``), against a
real scheduler in process; the routes are tested in ``scheduler/test_scheduler_steering.py``."""

from __future__ import annotations

import asyncio
from typing import Any

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
            return version, steering.get_value(client, "stop")

    version, value = await asyncio.get_running_loop().run_in_executor(None, analytics)
    assert (version, value) == (2, True)
    assert wire.decode_value(await c.scheduler.deisa_get_value(name="stop"), None) is True
