"""Asynchronous publish (``mode="async"``) with real `mpirun` ranks, scheduler and workers.

Two runs, each checking several things at once to keep the integration time small:

- a simulation started *before* the scheduler exists (its Bridge connects in the background)
  publishes a burst of 250 small steps on 4 ranks (1,000 blocks) and closes at once: the
  analytics receives every block bitwise, every step once, in order; no rank held more block
  copies, nor more blocks in flight, than ``max_in_flight``;
- a worker killed mid-run makes a later ``publish`` (or ``close``) raise the same
  ``BridgeError`` on every rank, and the run ends (no hang).

And, with no scheduler at all, a wrong call (a bad block, ranks calling with different arrays
while the others wait for room) is raised by the next call, the same on every rank, with no
exchange left in flight.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from conftest import STARTUP, DaskProcesses, kill_if_running, mpirun, start_dask, test_env
from distributed.utils_test import poll_for

from deisa import Adapter

# Values encode (step, global row, global column): a misplaced or stale block shows.
PUBLISHER = """
import json, os, sys, time
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge, BridgeError

scheduler_file, out, nsteps, max_in_flight, sleep = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
)
hold = sys.argv[6] if len(sys.argv) > 6 else None  # after step 0, wait for this file (no MPI)
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
rows, cols = 8, 6  # 2 x 2 ranks of 4 x 3
x0, y0 = 4 * (rank // 2), 3 * (rank % 2)
spec = ArraySpec("float64", global_shape=(rows, cols), start=(x0, y0), shape=(4, 3))
x, y = np.indices((4, 3))
field = np.empty((6, 5))  # with ghost cells: the published block is a strided view
t0 = time.monotonic()
bridge = Bridge(
    scheduler_file, {"field": spec}, mode="async", max_in_flight=max_in_flight,
    connect_timeout=240, on_worker_loss=os.environ.get("ON_WORKER_LOSS", "continue"),
)
report = {"rank": rank, "construct_s": time.monotonic() - t0,
          "scheduler_existed": os.path.exists(scheduler_file)}
open(f"{out}/constructed-{rank}", "w").close()
go = os.environ.get("GO")  # before step 0, wait for this file (rank 0 connects meanwhile)
deadline = time.monotonic() + 240
while go and not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.02)
try:
    with bridge:
        if hold and not go:
            bridge.flush()  # connected: step 0's sends start at once
        for step in range(nsteps):
            field[1:-1, 1:-1] = step * 1e6 + (x0 + x) * 1e3 + (y0 + y)
            bridge.publish("field", field[1:-1, 1:-1], step)
            field[1:-1, 1:-1] = -1.0  # overwritten at once: the Bridge holds its own copy
            deadline = time.monotonic() + 240
            while hold and step == 0 and not os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.02)
            if sleep:
                time.sleep(sleep)
except BridgeError as exc:
    report["error"] = str(exc)
report.update(
    peak_buffers=bridge.peak_buffers.get("field", 0),
    peak_in_flight=bridge.peak_in_flight.get("field", 0),
    published=len(bridge.timings),
    copy_s=sum(t.copy_s for t in bridge.timings),
)
with open(f"{out}/rank-{rank}.json", "w") as f:
    json.dump(report, f)
"""


def expected(step: int) -> np.ndarray:
    x, y = np.indices((8, 6))
    return step * 1e6 + x * 1e3 + y


def start_publisher(
    tmp: Path,
    scheduler_file: Path,
    nsteps: int,
    max_in_flight: int,
    sleep: float = 0.0,
    hold: Path | None = None,
    on_worker_loss: str = "continue",
    go: Path | None = None,
) -> subprocess.Popen[str]:
    script = tmp / "publisher.py"
    script.write_text(PUBLISHER)
    out = tmp / "out"
    out.mkdir()
    cmd = mpirun(
        4, sys.executable, str(script), str(scheduler_file), str(out), str(nsteps),
        str(max_in_flight), str(sleep), *([str(hold)] if hold else []),
    )  # fmt: skip
    env = {**test_env(), "ON_WORKER_LOSS": on_worker_loss, "GO": str(go or "")}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=2 * STARTUP)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"the publisher hung:\n{err[-3000:]}") from None
    return proc.returncode, err


def reports(tmp: Path) -> list[dict]:
    return [json.loads((tmp / "out" / f"rank-{r}.json").read_text()) for r in range(4)]


@pytest.fixture
def later_cluster(tmp_path: Path) -> Iterator[list[DaskProcesses]]:
    """Dask processes a test starts itself (after its simulation), stopped at the end."""
    started: list[DaskProcesses] = []
    yield started
    for cluster in started:
        cluster.stop()


def test_async_burst_before_the_scheduler_delivers_every_block_once_in_order(
    tmp_path: Path, later_cluster: list[DaskProcesses]
) -> None:
    nsteps, max_in_flight = 250, 3
    dask_dir = tmp_path / "dask"
    dask_dir.mkdir()
    scheduler_file = dask_dir / "scheduler.json"
    sim = start_publisher(tmp_path, scheduler_file, nsteps, max_in_flight)
    try:
        # every rank's Bridge is constructed while no scheduler exists
        def constructed() -> bool:
            assert sim.poll() is None, f"the publisher exited: {finish(sim)[1][-3000:]}"
            return all((tmp_path / "out" / f"constructed-{r}").exists() for r in range(4))

        poll_for(constructed, STARTUP)  # only reports a hang
        later_cluster.append(start_dask(dask_dir))
        with later_cluster[0].client() as client:
            adapter = Adapter(client, timeout=STARTUP)
            steps, fields = [], []
            for step, values in adapter["field"].items():
                steps.append(step)
                fields.append(values)
            assert steps == list(range(nsteps))  # in order, each once, none lost at close
            received = da.stack(fields).compute()
            stats = adapter.stats()
        rc, err = finish(sim)
    finally:
        kill_if_running(sim)
    assert rc == 0, err[-3000:]
    np.testing.assert_array_equal(received, np.stack([expected(s) for s in range(nsteps)]))
    assert stats["calls"]["publish"] == nsteps  # one scheduler message per step, not per rank
    for report in reports(tmp_path):
        assert not report["scheduler_existed"] and "error" not in report
        assert report["published"] == nsteps
        # the memory bound: at most max_in_flight copies of the block, reused
        assert 1 <= report["peak_buffers"] <= max_in_flight
        assert report["peak_in_flight"] == max_in_flight  # the burst did fill it


def test_async_worker_killed_mid_run_raises_the_same_error_on_every_rank(
    tmp_path: Path,
) -> None:
    """``on_worker_loss="fail"``: a worker's loss is a BridgeError on every rank, naming it."""
    cluster = start_dask(tmp_path)
    try:
        sim = start_publisher(
            tmp_path, cluster.scheduler_file, 2000, 2, sleep=0.02, on_worker_loss="fail"
        )
        try:
            with cluster.client() as client:
                field = Adapter(client, timeout=STARTUP)["field"]
                assert field[0].compute().shape == (8, 6)  # running; both workers hold blocks
                victim = cluster.procs[2]  # worker-1
                victim.kill()
                victim.wait(timeout=STARTUP)
                rc, err = finish(sim)
        finally:
            kill_if_running(sim)
    finally:
        cluster.stop()
    assert rc == 0, err[-3000:]  # every rank caught the BridgeError and wrote its report
    errors = {report["error"] for report in reports(tmp_path)}
    assert len(errors) == 1, errors  # the same message on every rank
    (error,) = errors
    assert "step" in error and "tcp://127.0.0.1:" in error, error
    assert all(report["published"] < 2000 for report in reports(tmp_path))


@pytest.mark.parametrize("learned", ["flush", "first publish"])
def test_async_step_reaches_the_analytics_before_the_next_publish(
    tmp_path: Path, learned: str
) -> None:
    """Once connected, every rank's "block sent" notice lets rank 0 register a step while the
    ranks compute: the analytics receives step 0 although no rank publishes (nor calls MPI)
    again until then. The ranks learn the connection from a ``flush``, or, where rank 0
    connected while they computed (no Bridge call since its creation, as with PDI's
    `init_on'), from one more exchange at their first publish, whose block then goes out at
    once (before that exchange, step 0 waited in a buffer of the Bridge's own for the next
    call's exchange)."""
    cluster = start_dask(tmp_path)
    hold = tmp_path / "hold"
    go = tmp_path / "go" if learned == "first publish" else None
    try:
        sim = start_publisher(tmp_path, cluster.scheduler_file, 3, 2, hold=hold, go=go)
        try:
            with cluster.client() as client:
                adapter = Adapter(client, timeout=STARTUP)
                if go is not None:
                    poll_for(lambda: adapter.stats()["streams"].get("field"), timeout=STARTUP)
                    go.touch()  # rank 0 is connected: now the ranks publish step 0
                field = adapter["field"]
                np.testing.assert_array_equal(field[0].compute(), expected(0))
                hold.touch()  # only now do the ranks go on to step 1
                np.testing.assert_array_equal(field[2].compute(), expected(2))
            rc, err = finish(sim)
        finally:
            kill_if_running(sim)
    finally:
        cluster.stop()
    assert rc == 0, err[-3000:]
    assert all("error" not in report for report in reports(tmp_path))


WRONG_CALL = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge, BridgeError

scheduler_file, out, case = sys.argv[1], sys.argv[2], sys.argv[3]
rank = MPI.COMM_WORLD.Get_rank()
spec = ArraySpec("float64", global_shape=(8, 6), start=(2 * rank, 0), shape=(2, 6))
# "dtype": no wait for room; "name": the ranks publishing "field" wait for room at step 2 (2
# blocks in flight: no scheduler, nothing is ever registered), rank 3 does not wait
limit = 10 if case == "dtype" else 2
bridge = Bridge(scheduler_file, {"field": spec}, mode="async", max_in_flight=limit,
                connect_timeout=120)
returned, error = [], None
try:
    for step in range(5):
        block, name = np.zeros((2, 6)), "field"
        if step == 2 and case == "dtype" and rank == 1:
            block = block.astype("float32")
        if step == 2 and case == "name" and rank == 3:
            name = "nope"
        bridge.publish(name, block, step)
        returned.append(step)
except BridgeError as exc:
    error = str(exc)
bridge.close()
json.dump({"returned": returned, "error": error, "in_flight": bridge._async.exchanger.pending},
          open(f"{out}/rank-{rank}.json", "w"))
"""


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("dtype", "rank 1: publish('field', step=2) refused: block of 'field' has dtype float32, "
                  "declared float64"),
        ("name", "rank 3: called publish('nope', step=2) while rank 0 called "
                 "publish('field', step=2)"),
    ],
)  # fmt: skip
def test_async_wrong_call_is_raised_by_the_next_call_on_every_rank(
    tmp_path: Path, case: str, message: str
) -> None:
    script = tmp_path / "wrong_call.py"
    script.write_text(WRONG_CALL)
    (tmp_path / "out").mkdir()
    scheduler_file = tmp_path / "scheduler.json"  # no scheduler: nothing is ever sent
    proc = subprocess.Popen(
        mpirun(4, sys.executable, str(script), str(scheduler_file), str(tmp_path / "out"), case),
        env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    rc, err = finish(proc)
    assert rc == 0, err[-3000:]
    for report in reports(tmp_path):
        assert report["returned"] == [0, 1, 2], report  # step 2 returned; step 3 raised
        assert report["error"] == message
        assert not report["in_flight"]  # close() left no exchange in flight


def _anon_rss() -> int:
    status = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))


def test_a_dropped_block_buffer_gives_its_memory_back_at_once() -> None:
    from deisa.bridge._buffers import Buffers

    nbytes = 16 * 2**20
    np.ones(nbytes // 8).sum()  # glibc's mmap threshold now grows past a freed 16 MiB block
    buffers = Buffers()
    before = _anon_rss()
    buffer = buffers.take("f", (nbytes // 8,), np.dtype("f8"))
    buffer.fill(1.0)  # resident
    during = _anon_rss()
    buffers.drop("f")  # its blocks go to shared-memory slots from now on
    del buffer
    assert during - before >= nbytes * 0.9
    assert _anon_rss() - before < 2 * 2**20
