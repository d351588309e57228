"""The scheduler's contract routes (deisa.scheduler.contracts), in process: a real scheduler
with two workers (``gen_cluster``)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from conftest import STARTUP
from distributed import Client
from distributed.utils_test import async_poll_for, gen_cluster

from deisa.contract import Contract
from deisa.scheduler.extension import StreamExtension
from deisa.wire import EXTENSION_NAME, PROTOCOL, Status, is_ok, ok, status

META = {"dtype": "<f8", "shape": [8, 6], "chunks": [[4, 4], [3, 3]], "run": "r1"}


# -- the scheduler's routes -------------------------------------------------------------------


def _region(wire: Any) -> Any:
    return Contract.from_wire(wire).region


async def _require(c: Client, name: str, contract: Contract | None, timeout: float = 5) -> Any:
    wire = None if contract is None else contract.to_wire()
    return await c.scheduler.deisa_set_contract(name=name, contract=wire, timeout=timeout)


async def _open(c: Client, name: str = "u", run: str = "r1", shape: Any = (8, 6)) -> Any:
    meta = {**META, "shape": list(shape), "run": run}
    return await c.scheduler.deisa_open(name=name, run=run, meta=meta, buffer_nb=None)


@gen_cluster(client=True)
async def test_contract_set_before_the_array_opens_is_checked_and_served_at_opening(
    c, s, a, b
) -> None:
    await c.register_plugin(StreamExtension())
    wanted = Contract.build((slice(4, None), slice(0, 3)), 5)
    pending = asyncio.ensure_future(_require(c, "u", wanted, timeout=30))
    await asyncio.sleep(0.05)
    assert not pending.done()  # waits for the array to be checked
    opened = await _open(c)
    assert opened["contract"]["version"] == 1
    assert Contract.from_wire(opened["contract"]["contract"]).region == ((4, 8), (0, 3))
    reply = await pending
    assert is_ok(reply) and _region(reply["contract"]) == ((4, 8), (0, 3))
    stats = s.plugins[EXTENSION_NAME].stats()["contracts"]
    assert stats["contracts"]["u"]["version"] == 1 and stats["contracts"]["u"]["checked"]


@gen_cluster(client=True)
async def test_contract_that_does_not_fit_the_array_opened_is_refused_and_never_served(
    c, s, a, b
) -> None:
    await c.register_plugin(StreamExtension())
    pending = asyncio.ensure_future(
        _require(c, "u", Contract.build((slice(0, 20), slice(0, 2))), timeout=30)
    )
    await asyncio.sleep(0.05)
    opened = await _open(c)
    assert opened["contract"]["contract"] is None  # the simulation sends everything
    reply = await pending
    assert status(reply) is Status.ERROR
    assert "region [0:20] on axis 0 is outside array 'u'" in reply["message"]
    got = await c.scheduler.deisa_get_contract(name="u")
    assert got["contract"] is None and "outside array" in got["error"]
    # the array is open now: a bad contract is refused at once, a good one checked at once
    bad = await _require(c, "u", Contract.build((slice(0, 2), slice(6, 7))))
    assert status(bad) is Status.ERROR and "axis 1 is outside array 'u'" in bad["message"]
    good = await _require(c, "u", Contract.build((slice(0, 2), slice(5, None))))
    assert is_ok(good) and _region(good["contract"]) == ((0, 2), (5, 6))


@gen_cluster(client=True)
async def test_a_region_waiting_for_a_moving_array_is_refused_when_it_opens_steps_are_kept(
    c, s, a, b
) -> None:
    """A moving array has no shape to check a region against (issue 56): refused, saying so,
    without failing the opening; a contract of steps only is served."""
    await c.register_plugin(StreamExtension())
    pending = asyncio.ensure_future(_require(c, "m", Contract.build((slice(0, 4),)), timeout=30))
    await asyncio.sleep(0.05)
    meta = {"dtype": "<f8", "moving": True, "ndim": 1, "joined_axis": 0, "run": "r1"}
    opened = await c.scheduler.deisa_open(name="m", run="r1", meta=meta, buffer_nb=None)
    assert opened["status"] == "OK" and opened["contract"]["contract"] is None
    reply = await pending
    assert status(reply) is Status.ERROR
    assert "array 'm' is moving" in reply["message"]
    assert "region is not supported on moving arrays yet" in reply["message"]
    steps = await _require(c, "m", Contract.build(None, 3))
    assert is_ok(steps) and Contract.from_wire(steps["contract"]).stride == 3


@gen_cluster(client=True)
async def test_contract_of_an_array_nobody_opens_is_an_unknown_array_error(c, s, a, b) -> None:
    await c.register_plugin(StreamExtension())
    reply = await _require(c, "nosuch", Contract.build(None, 2), timeout=0.2)
    assert status(reply) is Status.ERROR
    assert "unknown array 'nosuch': no simulation opened it within 0.2 s" in reply["message"]
    opened = await _open(c, "nosuch")  # withdrawn: never served
    assert opened["contract"]["contract"] is None
    malformed = await c.scheduler.deisa_set_contract(name="u", contract={"x": 1}, timeout=1)
    assert status(malformed) is Status.ERROR and "must be a dict" in malformed["message"]


@gen_cluster(client=True)
async def test_watch_returns_when_a_contract_changes_and_the_record_carries_it(c, s, a, b) -> None:
    await c.register_plugin(StreamExtension())
    assert await _open(c) == ok(protocol=PROTOCOL)  # never a contract: no contract in it
    idle = await c.scheduler.deisa_watch_contracts(names=["u"], versions={}, timeout=0.05)
    assert idle == ok(contracts={})
    watch = asyncio.ensure_future(
        c.scheduler.deisa_watch_contracts(names=["u"], versions={}, timeout=30)
    )
    await asyncio.sleep(0.05)
    assert not watch.done()
    await _require(c, "u", Contract.build((slice(0, 4), slice(0, 6)), 2))
    changed = (await watch)["contracts"]["u"]
    assert changed["version"] == 1 and _region(changed["contract"]) == ((0, 4), (0, 6))
    again = await c.scheduler.deisa_watch_contracts(names=["u"], versions={"u": 1}, timeout=0.05)
    assert again["contracts"] == {}
    # a step registered with the contract it followed hands it to the reader
    [future] = await c.scatter([np.zeros((4, 3))], workers=[a.address])
    followed = Contract.build((slice(0, 4), slice(0, 3))).resolved((8, 6)).to_wire()
    published = await c.scheduler.deisa_publish(
        name="u", run="r1", step=0, blocks=[(future.key, a.address, 96)], contract=followed
    )
    assert is_ok(published)
    reply = await c.scheduler.deisa_get(name="u", client=c.id, timeout=5)
    assert is_ok(reply)
    assert Contract.from_wire(reply["contract"]) == Contract.from_wire(followed)


@gen_cluster(client=True, timeout=STARTUP)
async def test_rank0s_contract_watch_is_the_arrays_heartbeat(c, s, a, b) -> None:
    """The opening and each ``deisa_watch_contracts`` call (when it comes and when it is
    answered) note when rank 0 was last heard of for its arrays; ``deisa_stats`` says since
    when (deisa.pca_app.stall tells a gone simulation by it)."""
    await c.register_plugin(StreamExtension())
    store = s.plugins[EXTENSION_NAME].contracts
    assert store.stats()["silent_s"] == {}
    await _open(c)
    opened = store.heard["u"]
    await asyncio.sleep(0.2)
    assert s.plugins[EXTENSION_NAME].stats()["contracts"]["silent_s"]["u"] >= 0.2
    watch = asyncio.ensure_future(
        c.scheduler.deisa_watch_contracts(names=["u", "v"], versions={}, timeout=30)
    )
    # heard when it came, while it waits
    await async_poll_for(lambda: store.heard.get("v") is not None, STARTUP, period=0.01)
    came = store.heard["u"]
    assert came > opened and store.heard["v"] == came
    await asyncio.sleep(0.01)
    await _require(c, "u", Contract.build((slice(0, 4), slice(0, 6)), 2))
    await watch
    assert store.heard["u"] > came  # and when it was answered
