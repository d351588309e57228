"""Contracts between real processes: 4 mpirun ranks, a dask scheduler and two workers, a client.

One run per mode (``async``, ``sync``) checks, at once (bench/contract_ranks.py publishes a
16 x 12 array in 2 x 2 blocks):

- a contract set *before* the simulation opens the array applies from its first step: steps not
  wanted are sent by no rank, and on the others only the ranks whose block intersects the region
  send (per-rank bytes from ``Bridge.timings``; on the workers, the keys that arrived);
- the analytics receives exactly the region, bitwise;
- a contract changed mid-run takes effect at a step boundary, the same on every rank;
- bad contracts (a region outside the array, a negative stride, an unknown array) are
  ``ContractError`` on the analytics side, while the simulation runs on and ends normally.

In-process tests (the value object, the geometry, the scheduler routes, a one-rank Bridge in
both modes) are in test_contracts.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, STARTUP, DaskProcesses, mpirun, test_env
from distributed.utils_test import poll_for

from bench.contract_ranks import value
from deisa import Adapter
from deisa.contract import Contract, ContractError, plan

RANKS = REPO / "bench" / "contract_ranks.py"

CHUNKS = ((8, 8), (6, 6))
BLOCKS = ((0, 0), (0, 1), (1, 0), (1, 1))
NSTEPS = 24
A = Contract.build((slice(2, 8), slice(1, 9)), 2)  # ranks 0 and 1, every 2nd step
B = Contract.build((slice(9, 16), slice(None)), slice(0, None, 3))  # ranks 2 and 3, every 3rd


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_contract_sends_only_the_region_and_changes_at_a_step_boundary(
    mode: str, tmp_path: Path, dask_processes: DaskProcesses
) -> None:
    out = tmp_path / "ranks"
    with dask_processes.client() as client:
        adapter = Adapter(client, timeout=STARTUP)
        field = adapter["field"]
        # analytics first: the contract waits on the scheduler for the array to open
        required: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: required.update(a=field.require(A.region, 2)))
        thread.start()
        poll_for(lambda: "field" in adapter.stats()["contracts"]["contracts"], STARTUP)
        with pytest.raises(ContractError, match="unknown array 'nosuch'"):
            Adapter(client, timeout=0.5)["nosuch"].require(steps=2)
        with pytest.raises(ContractError, match="stride=-1 must be a positive integer"):
            field.require(steps=slice(0, None, -1))
        proc = subprocess.Popen(
            mpirun(4, sys.executable, str(RANKS), str(dask_processes.scheduler_file), str(out),
                   "--nsteps", str(NSTEPS), "--mode", mode, "--sleep", "0.05"),
            env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            thread.join(STARTUP)
            assert required["a"].version == 1 and required["a"].region == ((2, 8), (1, 9))
            received: dict[int, Any] = {}
            contracts: dict[int, Contract | None] = {}
            for step, array in field.items():
                received[step] = array
                contracts[step] = field.contract_of(step)
                if len(received) == 3:  # mid-run: a new contract, and a bad one
                    assert field.require(B.region, slice(0, None, 3)).version == 2
                    with pytest.raises(ContractError, match=r"\[0:17\] on axis 0 is outside"):
                        field.require((slice(0, 17), slice(0, 2)))
            assert field.contract is not None and field.contract.version == 2
            output, _ = proc.communicate(timeout=STARTUP)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, output
        on_workers = client.run(lambda dask_worker: sorted(str(k) for k in dask_worker.data))
        versions = [contracts[s].version for s in sorted(received)]  # type: ignore[union-attr]
        assert versions == sorted(versions) and set(versions) == {1, 2}, versions  # one boundary
        for step, array in received.items():
            contract = contracts[step]
            assert contract is not None
            (r0, r1), (c0, c1) = contract.box
            rows, cols = np.ogrid[r0:r1, c0:c1]
            np.testing.assert_array_equal(array.compute(), value(step, rows, cols))
        sent = [json.loads(Path(f"{out}.{rank}.json").read_text())["sent"] for rank in range(4)]
        for step in range(NSTEPS):
            senders = {rank for rank in range(4) if sent[rank][str(step)]}
            if step not in received:
                assert not senders, (step, senders)  # not wanted: no byte from any rank
                continue
            expected = plan(contracts[step], step, CHUNKS, BLOCKS)
            assert senders == set(expected.ranks or ()), (step, senders, contracts[step])
            assert all(sent[r][str(step)] == 8 * 6 * 8 for r in senders)
        # on the workers: one key per block sent, and none of the other blocks
        keys = [k for held in on_workers.values() for k in held]
        for step in received:
            held = [k for k in keys if f"-field-{step}'" in k]
            assert len(held) == len(plan(contracts[step], step, CHUNKS, BLOCKS).ranks or ()), held
        blocks_sent = [plan(contracts[s], s, CHUNKS, BLOCKS).ranks or () for s in received]
        assert len(keys) == sum(len(ranks) for ranks in blocks_sent)
