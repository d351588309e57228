"""Contracts (deisa.contract and its three sides), in process: the value object, the
geometry, the scheduler routes.

The scheduler side runs on a real scheduler with two workers (``gen_cluster``); a one-rank
Bridge (``MPI.COMM_SELF``, in a thread) and an Adapter check the whole path in both modes. The
real-process tests (4 ranks: bytes not sent, a contract changed mid-run) are in
``test_contracts_mpi.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Client
from distributed.utils_test import gen_cluster

from deisa import Adapter, ArraySpec, Bridge
from deisa.bridge.contracts import ContractBook
from deisa.contract import FULL, Contract, ContractError, block_box, local_slices, plan, sub_chunks
from deisa.scheduler.extension import StreamExtension
from deisa.wire import PLUGIN_NAME

META = {"dtype": "<f8", "shape": [8, 6], "chunks": [[4, 4], [3, 3]], "run": "r1"}
# 2 x 2 blocks of 4 x 3, rank r at grid position (r // 2, r % 2)
CHUNKS = ((4, 4), (3, 3))
BLOCKS = ((0, 0), (0, 1), (1, 0), (1, 1))


# -- the value object ----------------------------------------------------------------------


def test_contract_build_resolves_and_selects_steps() -> None:
    c = Contract.build((slice(2, None), slice(None, 3)), slice(10, 30, 5))
    assert [s for s in range(40) if c.wants(s)] == [10, 15, 20, 25]
    assert c.resolved((8, 6)).region == ((2, 8), (0, 3))
    assert Contract.build(None, 3).wants(6) and not Contract.build(None, 3).wants(7)
    window = Contract.build(None, range(4, 8))
    assert window.wants(7) and not window.wants(8)
    assert Contract.from_wire(c.to_wire()) == c
    assert c.describe() == "region [2:, 0:3], steps 10:30:5"


@pytest.mark.parametrize(
    ("region", "steps", "message"),
    [
        (None, 0, "stride=0 must be a positive integer"),
        (None, slice(0, None, -5), "stride=-5 must be a positive integer"),
        (None, range(5, 2), "stop=2 must be after start=5"),
        (None, "every", "must be None, a range, a slice or an int stride"),
        (None, slice(0.5, None), "start=0.5 must be an integer"),
        ((slice(0, 4, 2),), None, "has step 2; a region is a box"),
        ((slice(-4, None),), None, "bound -4 on axis 0 must be a non-negative integer"),
        ((slice(3, 3),), None, "slice [3:3] on axis 0 is empty"),
        ("rows", None, "must be None or a tuple of one slice per spatial axis"),
        ((slice(0, 2), "x"), None, "axis 1 is 'x', not a slice"),
    ],
)
def test_contract_build_refuses_bad_selections(region: Any, steps: Any, message: str) -> None:
    with pytest.raises(ContractError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Contract.build(region, steps)


def test_contract_resolved_refuses_a_region_outside_the_array() -> None:
    with pytest.raises(ContractError, match=r"region \[0:9\] on axis 0 is outside array 'u'"):
        Contract.build((slice(0, 9), slice(0, 2))).resolved((8, 6), "u")
    with pytest.raises(ContractError, match=r"region \[8:\] on axis 0 is outside"):
        Contract.build((slice(8, None), slice(0, 2))).resolved((8, 6), "u")
    with pytest.raises(ContractError, match="region has 1 axes, array 'u' has 2"):
        Contract.build((slice(0, 2),)).resolved((8, 6), "u")
    with pytest.raises(ContractError, match="must be a dict"):
        Contract.from_wire([1, 2])


# -- geometry ------------------------------------------------------------------------------


def test_block_box_sub_chunks_and_local_slices() -> None:
    box = ((2, 5), (3, 6))  # rows 2-4 cross both block rows; columns 3-5 are block column 1
    blocks = block_box(box, CHUNKS)
    assert blocks == ((0, 2), (1, 2))
    assert sub_chunks(blocks, CHUNKS) == ((4, 4), (3,))
    assert local_slices(box, blocks, CHUNKS) == (slice(2, 5), slice(0, 3))
    assert block_box(((0, 8), (0, 6)), CHUNKS) == ((0, 2), (0, 2))
    assert block_box(((4, 5), (2, 3)), CHUNKS) == ((1, 2), (0, 1))  # edges are exclusive


def test_plan_names_the_ranks_whose_block_intersects_the_region() -> None:
    c = Contract.build((slice(0, 4), slice(3, 6)), 2).resolved((8, 6))
    p = plan(c, 4, CHUNKS, BLOCKS)
    assert (p.send, p.ranks, p.origin) == (True, (1,), (0, 1))
    assert p.key_index((0, 1)) == (0, 0) and p.sends(1) and not p.sends(0)
    assert not plan(c, 3, CHUNKS, BLOCKS).send  # a step not wanted: nobody sends
    assert plan(None, 3, CHUNKS, BLOCKS) is FULL and FULL.sends(3)
    steps_only = plan(Contract.build(None, 2), 2, CHUNKS, BLOCKS)
    assert steps_only.ranks is None and steps_only.key_index((1, 1)) == (1, 1)
    assert plan(c.resolved((8, 6)), 0, CHUNKS, BLOCKS).wire() == c.to_wire()


def test_contract_book_spreads_each_version_once() -> None:
    root, other = ContractBook(), ContractBook()
    assert root.to_spread() is None
    c = Contract.build((slice(0, 4), slice(0, 6))).resolved((8, 6)).with_version(1)
    root.served("u", {"version": 1, "contract": c.to_wire()})
    root.served("u", {"version": 0, "contract": None})  # an older answer is ignored
    changes = root.to_spread()
    assert changes == {"u": {"version": 1, "contract": c.to_wire()}}
    for book in (root, other):  # what the exchange does on every rank
        book.receive(changes)
    assert root.to_spread() is None
    assert root.plan("u", 0, CHUNKS, BLOCKS) == other.plan("u", 0, CHUNKS, BLOCKS)
    assert other.plan("u", 0, CHUNKS, BLOCKS).ranks == (0, 1)
    root.served("u", {"version": 2, "contract": None})  # dropped
    other.receive(root.to_spread() or {})
    assert other.plan("u", 0, CHUNKS, BLOCKS) is FULL


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
    assert reply["status"] == "OK" and _region(reply["contract"]) == ((4, 8), (0, 3))
    stats = s.plugins[PLUGIN_NAME].stats()["contracts"]
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
    assert reply["status"] == "error"
    assert "region [0:20] on axis 0 is outside array 'u'" in reply["message"]
    got = await c.scheduler.deisa_get_contract(name="u")
    assert got["contract"] is None and "outside array" in got["error"]
    # the array is open now: a bad contract is refused at once, a good one checked at once
    bad = await _require(c, "u", Contract.build((slice(0, 2), slice(6, 7))))
    assert bad["status"] == "error" and "axis 1 is outside array 'u'" in bad["message"]
    good = await _require(c, "u", Contract.build((slice(0, 2), slice(5, None))))
    assert good["status"] == "OK" and _region(good["contract"]) == ((0, 2), (5, 6))


@gen_cluster(client=True)
async def test_contract_of_an_array_nobody_opens_is_an_unknown_array_error(c, s, a, b) -> None:
    await c.register_plugin(StreamExtension())
    reply = await _require(c, "nosuch", Contract.build(None, 2), timeout=0.2)
    assert reply["status"] == "error"
    assert "unknown array 'nosuch': no simulation opened it within 0.2 s" in reply["message"]
    opened = await _open(c, "nosuch")  # withdrawn: never served
    assert opened["contract"]["contract"] is None
    malformed = await c.scheduler.deisa_set_contract(name="u", contract={"x": 1}, timeout=1)
    assert malformed["status"] == "error" and "must be a dict" in malformed["message"]


@gen_cluster(client=True)
async def test_watch_returns_when_a_contract_changes_and_the_record_carries_it(c, s, a, b) -> None:
    await c.register_plugin(StreamExtension())
    assert await _open(c) == {"status": "OK"}  # never a contract: the reply is as before
    idle = await c.scheduler.deisa_watch_contracts(names=["u"], versions={}, timeout=0.05)
    assert idle == {"status": "OK", "contracts": {}}
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
    assert published["status"] == "OK"
    reply = await c.scheduler.deisa_get(name="u", client=c.id, timeout=5)
    assert reply["status"] == "OK"
    assert Contract.from_wire(reply["contract"]) == Contract.from_wire(followed)


# -- one rank, the whole path ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_one_rank_bridge_follows_the_contract_and_the_adapter_gets_the_region(
    mode: str, tmp_path: Path
) -> None:
    @gen_cluster(client=True)
    async def run(c, s, a, b) -> None:
        await c.register_plugin(StreamExtension())
        scheduler_file = tmp_path / "scheduler.json"
        scheduler_file.write_text(json.dumps({"address": s.address}))
        wanted = Contract.build((slice(1, 3), slice(2, 6)), slice(1, None, 2))
        pending = asyncio.ensure_future(_require(c, "u", wanted, timeout=30))
        loop = asyncio.get_running_loop()

        def simulate() -> list[int]:
            from mpi4py import MPI

            spec = ArraySpec("float64", (4, 6), (0, 0), (4, 6))
            with Bridge(str(scheduler_file), {"u": spec}, comm=MPI.COMM_SELF, mode=mode) as br:
                for step in range(6):
                    br.publish("u", np.full((4, 6), float(step)) + np.arange(6), step)
                    br.flush()
            return [t.nbytes for t in br.timings]

        def analyse() -> list[tuple[int, Any]]:
            with Client(s.address, timeout=30) as client, Adapter(client, timeout=30) as ad:
                return [(step, x.compute()) for step, x in ad["u"].items()]

        nbytes = await loop.run_in_executor(None, simulate)
        assert (await pending)["status"] == "OK"
        got = await loop.run_in_executor(None, analyse)
        # mode="async": the first step may go before the connection (and the contract) is known
        sent = [step for step, n in enumerate(nbytes) if n]
        assert [step for step, _ in got] == sent
        assert set(sent) - {0} == {1, 3, 5}
        for step, x in got:
            full = np.full((4, 6), float(step)) + np.arange(6)
            expected = full if step == 0 else full[1:3, 2:6]
            np.testing.assert_array_equal(x, expected)

    run()


def test_ledger_counts_ranks_outside_the_region_as_sent_with_no_bytes() -> None:
    from deisa.bridge._publisher import Ledger, RankReport, RootReport

    ledger = Ledger(3)
    entry = ledger.add("u", 4, 0, senders=(1,), plan="p")
    assert (entry.senders, entry.plan) == ((1,), "p")
    root = RankReport(root=RootReport())
    assert ledger.absorb([root, RankReport(), RankReport()]).ready == []  # rank 1 not done
    ready = ledger.absorb([root, RankReport(sent=((0, 96),)), RankReport()]).ready
    assert ready == [(entry, [0, 96, 0])]
