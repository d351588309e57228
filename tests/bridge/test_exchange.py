"""deisa.bridge._exchange: the exchange posted by one call and completed by the next.

In-process on a one-rank communicator (encoding, the overflow path, misuse), then on 4 real
``mpirun`` ranks: a rank's wait ends while another rank stays out of MPI after posting (what
takes the exchange off the publish path), reports too big for a slot reach every rank whole,
the caller's own collectives may run while an exchange is in flight, and a rank waiting for
rank 0 (an exchange, or ``_collective.on_root``) does not spin a core.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import STARTUP, mpirun, test_env

from deisa.bridge._exchange import SLOT_BYTES, TEST_SLEEPS_S, Exchanger, from_wire, to_wire, wait
from deisa.bridge._publisher import Connection, RankReport, RootReport

WORKERS = ("tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002")


def test_wire_names_listed_workers_by_index_and_round_trips() -> None:
    report = RankReport(
        call=("gtemp", 12),
        sent=((11, 8 * 2**20, WORKERS[1]), (10, 0, "tcp://gone:1")),
        failed=((9, "sending step 9 failed"),),
        root=RootReport(registered=9, fields={"contracts": {"gtemp": 1}}),
    )
    wire = to_wire(report, WORKERS)
    assert wire[2] == ((11, 8 * 2**20, 1), (10, 0, "tcp://gone:1"))  # a departed worker by name
    assert from_wire(wire, WORKERS) == report


def test_wire_carries_a_parcels_geometry_only_with_it() -> None:
    geometry = (None, ((3,), (0,)))
    report = RankReport(("x", 2), None, ((4, 24, "tcp://w0"), (5, 0, "", geometry)), ())
    wire = to_wire(report, ["tcp://w0"])
    assert wire[2] == ((4, 24, 0), (5, 0, "", geometry))  # a plain block's tuple as before
    assert from_wire(wire, ["tcp://w0"]) == report


def test_exchange_on_one_rank_posts_completes_and_overflows() -> None:
    from mpi4py import MPI

    exchanger = Exchanger(MPI.COMM_SELF)
    assert exchanger.complete() is None and not exchanger.pending
    small = RankReport(call=("a", 0), sent=((0, 64, WORKERS[0]),), root=RootReport(registered=0))
    exchanger.post(small, WORKERS)
    assert exchanger.pending
    with pytest.raises(RuntimeError, match="already in flight"):
        exchanger.post(small, WORKERS)
    assert exchanger.complete() == [small]
    # rank 0's connection does not fit a slot: it goes whole, by the blocking allgather
    connection = Connection("tcp://127.0.0.1:8786", "run-" + "x" * SLOT_BYTES, WORKERS)
    big = RankReport(root=RootReport(connection=connection))
    assert exchanger.exchange(big, WORKERS) == [big]
    assert (exchanger.completed, exchanger.overflows) == (2, 1)


def test_wait_tests_with_growing_sleeps_until_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr("deisa.bridge._exchange.time.sleep", sleeps.append)

    class Request:
        tests = 0

        def Test(self) -> bool:  # noqa: N802 (mpi4py's name)
            self.tests += 1
            return self.tests > 9

    request = Request()
    wait(request)
    assert request.tests == 10
    assert (
        sleeps[0] == TEST_SLEEPS_S[0]
        and sleeps == sorted(sleeps)
        and max(sleeps) == TEST_SLEEPS_S[1]
    )


RANKS = r"""
import json, os, sys, time
from mpi4py import MPI
from deisa.bridge._collective import on_root
from deisa.bridge._exchange import Exchanger
from deisa.bridge._publisher import RankReport, RootReport

out = sys.argv[1]
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
workers = ("tcp://w0:1", "tcp://w1:1")
exchanger = Exchanger(comm)
result = {}

# 1. every rank posts; rank 0 then stays out of MPI until rank 1 has completed the exchange
exchanger.post(RankReport(call=("a", 0), sent=((0, rank, workers[rank % 2]),)), workers)
if rank == 0:
    deadline = time.monotonic() + float(sys.argv[2])
    while not os.path.exists(f"{out}/completed-1") and time.monotonic() < deadline:
        time.sleep(0.01)
    result["saw_rank_1_complete"] = os.path.exists(f"{out}/completed-1")
reports = exchanger.complete()
if rank == 1:
    open(f"{out}/completed-1", "w").close()
result["first"] = [r.sent[0][1:] for r in reports]

# 2. the caller's own collective while an exchange is in flight; then reports too big for a
# slot (rank 0's fields, rank 2's failure) among small ones
root = RootReport(registered=3, fields={"contracts": {"a": "x" * 500}}) if rank == 0 else None
failed = ((1, "sending step 1 failed: " + "y" * 400),) if rank == 2 else ()
exchanger.post(RankReport(call=("a", 1), failed=failed, root=root), workers)
result["allreduce"] = comm.allreduce(rank)
reports = exchanger.complete()
result["second"] = repr(reports)
result["counts"] = (exchanger.completed, exchanger.overflows)

# 3. rank 0 stays away 1 s before posting: the others wait without spinning a core
if rank == 0:
    time.sleep(1.0)
exchanger.post(RankReport(call=("a", 2)), workers)
cpu, wall = time.process_time(), time.monotonic()
exchanger.complete()
result["wait"] = (time.process_time() - cpu, time.monotonic() - wall)

# 4. the same for deisa.bridge._collective.on_root: the others wait for rank 0's 1 s of work
cpu, wall = time.process_time(), time.monotonic()
result["on_root"] = on_root(comm, lambda: time.sleep(1.0) or "from rank 0")
result["root_wait"] = (time.process_time() - cpu, time.monotonic() - wall)
json.dump(result, open(f"{out}/rank-{rank}.json", "w"))
"""


def test_exchange_on_four_ranks_overlaps_and_agrees(tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    proc = subprocess.run(
        mpirun(4, sys.executable, str(script), str(tmp_path), str(STARTUP)),
        env=test_env(), capture_output=True, text=True, timeout=3 * STARTUP,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]
    # rank 1's wait ended with rank 0 outside MPI since its post: the slots had all arrived
    assert results[0]["saw_rank_1_complete"]
    assert all(r["first"] == [[0, "tcp://w0:1"], [1, "tcp://w1:1"], [2, "tcp://w0:1"],
                              [3, "tcp://w1:1"]] for r in results)  # fmt: skip
    assert all(r["allreduce"] == 6 for r in results)
    assert len({r["second"] for r in results}) == 1  # the same reports, whole, on every rank
    assert "x" * 500 in results[0]["second"] and "y" * 400 in results[0]["second"]
    assert all(r["counts"] == [2, 1] for r in results)
    # waiting about 1 s for rank 0 took the others a small part of a core (MPI_Wait spins one)
    # (an exchange), and for rank 0's answer (_collective.on_root)
    assert all(r["on_root"] == "from rank 0" for r in results)
    for r in results[1:]:
        for cpu, wall in (r["wait"], r["root_wait"]):
            assert wall > 0.5 and cpu < 0.1 * wall, r
