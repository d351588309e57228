"""Contracts along the whole path, in process: a one-rank Bridge (``MPI.COMM_SELF``, in a
thread) follows the contract an Adapter set, and the Adapter gets exactly the region, in both
publishing modes. The real-process tests (4 ranks) are in ``test_contracts_mpi.py``."""

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
from deisa.contract import Contract
from deisa.scheduler.extension import StreamExtension
from deisa.wire import is_ok


async def _require(c: Client, name: str, contract: Contract | None, timeout: float = 5) -> Any:
    wire = None if contract is None else contract.to_wire()
    return await c.scheduler.deisa_set_contract(name=name, contract=wire, timeout=timeout)


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
        assert is_ok(await pending)
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
