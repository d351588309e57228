"""Faults never hang and are reported clearly; see docs/reliability.md for the policies.

Each test injects one fault into a real run (`mpirun` publishers, `dask scheduler` and
`dask worker` processes) and checks the documented outcome; a run that outlives its (generous)
bound is reported as a hang. The short timeouts below are the ones meant to expire: each is
armed only once the run has reached the state where nothing else can happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, DaskProcesses, kill_if_running, mpirun, start_dask, test_env
from dask.core import flatten
from distributed.utils_test import poll_for

from deisa import Adapter
from deisa._dask_internals import workers_of

PUBLISHER = REPO / "tests" / "publish_blocks.py"
sys.path.insert(0, str(PUBLISHER.parent))
from publish_blocks import expected  # noqa: E402

SHAPE = (8, 6)
# start-up deadlines (processes starting, connecting): generous, a loaded machine meets them
STARTUP = 120


def start_publisher(
    cluster: DaskProcesses, *args: str, nranks: int = 4, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    cmd = mpirun(
        nranks, sys.executable, str(PUBLISHER), str(cluster.scheduler_file),
        "--connect-timeout", str(STARTUP), *args,
    )  # fmt: skip
    return subprocess.Popen(
        cmd,
        env={**test_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 2 * STARTUP) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"the publisher hung:\n{err[-3000:]}") from None
    return proc.returncode, err


def scheduler_memory(client, array: str) -> tuple[int, int]:
    """(keys of ``array`` in memory, their total bytes) as the scheduler counts them."""

    def count(dask_scheduler) -> tuple[int, int]:
        mem = [
            ts
            for key, ts in dask_scheduler.tasks.items()
            if ts.state == "memory" and f"-{array}-" in str(key)
        ]
        return len(mem), sum(ts.nbytes for ts in mem)

    return client.run_on_scheduler(count)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    processes = start_dask(tmp_path_factory.mktemp("dask"))
    yield processes
    processes.stop()


DYING_CLIENT = f"""
import os, sys
from distributed import Client
from deisa import Adapter
client = Client(scheduler_file=sys.argv[1], timeout={STARTUP})
Adapter(client, timeout={2 * STARTUP})["dead"][0].compute()
os._exit(1)  # the analytics crashes without closing anything
"""


def test_dead_analytics_blocks_then_times_out(cluster: DaskProcesses) -> None:
    analytics = subprocess.Popen(
        [sys.executable, "-c", DYING_CLIENT, str(cluster.scheduler_file)],
        env=test_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the analytics is connected and waiting for the array before the simulation starts, so it
    # takes step 0 as soon as it is published, however slowly the simulation starts; the 3 s
    # flow-control timeout then only expires once buffer_nb steps wait for a dead analytics
    with cluster.client(timeout=STARTUP) as client:
        adapter = Adapter(client)

        def asked() -> bool:  # the analytics asked for a step (and is still running)
            assert analytics.poll() is None, finish(analytics)[1][-3000:]
            return "dead" in adapter.stats()["streams"]

        poll_for(asked, STARTUP, period=0.1)
        sim = start_publisher(
            cluster, "--name", "dead", "--nsteps", "20", "--buffer-nb", "2", "--timeout", "3"
        )
        rc, err = finish(analytics)
        assert rc == 1, err[-3000:]
        rc, err = finish(sim)
        assert rc != 0
        assert (
            "BridgeError: the analytics took no step of 'dead' for 3.0 s while buffer_nb=2" in err
        )
        assert "was not delivered" in err
        stats = adapter.stats()["streams"]["dead"]
    assert stats["taken"] == 1 and stats["queued"] == 2  # blocked at buffer_nb, then failed


def test_drop_oldest_keeps_buffer_nb_steps_and_frees_the_rest(cluster: DaskProcesses) -> None:
    rc, err = finish(
        start_publisher(
            cluster, "--name", "drop", "--nsteps", "8", "--buffer-nb", "2",
            "--on-full", "drop_oldest",
        )
    )  # fmt: skip
    assert rc == 0, err  # nobody consumes, yet the simulation never blocks
    with cluster.client() as client:
        adapter = Adapter(client, timeout=STARTUP)  # the run is over: nothing left to wait for
        stats = adapter.stats()["streams"]["drop"]
        assert list(stats["dropped"]) == [0, 1, 2, 3, 4, 5]
        nkeys, _ = scheduler_memory(client, "drop")
        assert nkeys == 2 * 4  # two steps of four blocks: the dropped ones were released
        steps = [(s, f.compute()) for s, f in adapter["drop"].items()]
    assert [s for s, _ in steps] == [6, 7]
    for s, values in steps:
        np.testing.assert_array_equal(values, expected(s, SHAPE))
    log = (cluster.log_dir or Path()) / "scheduler.log"
    assert "dropped step 0 of 'drop': buffer_nb=2 steps were waiting" in log.read_text()


def test_dead_rank_makes_the_adapter_fail_naming_the_last_step(cluster: DaskProcesses) -> None:
    # mode="sync": steps 0 and 1 are registered before the rank dies (in async mode the steps
    # not yet seen sent by every rank in an exchange, up to max_in_flight, are lost with it)
    sim = start_publisher(
        cluster, "--name", "rankdies", "--nsteps", "6", "--die-rank", "1", "--die-at-step", "2",
        "--mode", "sync",
    )  # fmt: skip
    with cluster.client() as client:
        adapter = Adapter(client, timeout=STARTUP)
        field = adapter["rankdies"]
        assert field[0].shape == SHAPE  # the run has started (start-up may take a while)
        assert field[1].shape == SHAPE  # and reached the step before the rank dies
        adapter.timeout = 3  # no step can come any more: this one is meant to expire
        seen = [0, 1]
        with pytest.raises(TimeoutError) as info:
            for step, _ in field.items():
                seen.append(step)
    assert seen == [0, 1]
    assert "next step of 'rankdies'" in str(info.value)
    assert "the last one received here being 1" in str(info.value)
    rc, err = finish(sim)
    assert rc != 0 and "rank 1 dies before step 2" in err


def test_slow_analytics_keeps_worker_memory_within_buffer_nb(cluster: DaskProcesses) -> None:
    shape, buffer_nb = (256, 256), 2
    step_bytes = shape[0] * shape[1] * 8
    sim = start_publisher(
        cluster, "--name", "slow", "--shape", *map(str, shape), "--nsteps", "10",
        "--buffer-nb", str(buffer_nb),
    )  # fmt: skip
    peak = 0
    with cluster.client() as client:
        field = Adapter(client, timeout=STARTUP)["slow"]
        stop = threading.Event()

        def poll() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, scheduler_memory(client, "slow")[1])
                time.sleep(0.05)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            steps = []
            for step, values in field.items():
                assert values.sum().compute() == expected(step, shape).sum()
                steps.append(step)
                time.sleep(0.5)  # analytics slower than the simulation
                del values
        finally:
            stop.set()
            poller.join(timeout=10)
    assert steps == list(range(10))
    assert finish(sim)[0] == 0
    # buffer_nb queued + the step waiting in deisa_publish (registered) + the analytics' step,
    # + the step it has just let go of while its release is on its way (docs/reliability.md);
    # bounded by buffer_nb, not by the 10 steps a simulation faster than the analytics publishes
    assert step_bytes <= peak <= (buffer_nb + 3) * step_bytes


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    processes = start_dask(tmp_path)
    yield processes
    processes.stop()


def test_dead_worker_fails_the_publish_naming_worker_and_step(own_cluster: DaskProcesses) -> None:
    """``on_worker_loss="fail"``: the run stops with a BridgeError naming the worker and a step
    (tests/bridge/test_async_publish.py checks that every rank raises the same one)."""
    sim = start_publisher(
        own_cluster, "--name", "wdies", "--nsteps", "200", "--sleep", "0.1", "--timeout", "5",
        "--on-worker-loss", "fail", env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "10"},
    )  # fmt: skip
    with own_cluster.client() as client:
        field = Adapter(client, timeout=STARTUP)["wdies"]
        assert field[0].compute().shape == SHAPE  # running, both workers hold blocks
        victim = own_cluster.procs[2]  # worker-1
        victim.kill()
        victim.wait(timeout=STARTUP)
        rc, err = finish(sim)
    assert rc != 0
    # the send to the dead worker fails, or (async mode: the send finished just before) rank 0's
    # registration of the step finds the worker gone; either names the step and the worker
    assert re.search(
        r"BridgeError: (rank \d: sending step \d+ of 'wdies' to worker tcp://127\.0\.0\.1:"
        r"|worker\(s\) tcp://127\.0\.0\.1:\d+ holding blocks of step \d+ of 'wdies' left"
        r"|worker\(s\) tcp://127\.0\.0\.1:\d+ holding blocks of this Bridge left the cluster "
        r"at step \d+ of 'wdies')",
        err,
    ), err[-4000:]


def reports(done: Path) -> list[dict[str, object]]:
    """The per-rank reports of ``publish_blocks.py --done``."""
    return [json.loads(path.read_text()) for path in sorted(done.glob("rank-*.json"))]


def workers(client: Any) -> int:
    """Workers the scheduler has now."""

    def count(dask_scheduler: Any) -> int:
        return len(dask_scheduler.workers)

    return int(client.run_on_scheduler(count))


def queued(adapter: Adapter, name: str) -> int:
    """Steps of ``name`` queued on the scheduler, not taken yet."""
    stream = adapter.stats()["streams"].get(name) or {}
    return int(stream.get("queued", 0))


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_lost_worker_the_simulation_goes_on_and_every_other_step_arrives(
    tmp_path: Path, mode: str
) -> None:
    """Issue 25: a worker SIGKILLed mid-run (4 ranks, 3 workers). The simulation exits 0; the
    analytics receives every step not lost, in order and bitwise; the lost steps are named (they
    had blocks on the dead worker); no key is left on the scheduler afterwards."""
    cluster = start_dask(tmp_path, n_workers=3)
    done = tmp_path / "done"
    done.mkdir()
    nsteps = 40
    try:
        victim = cluster.procs[2]  # worker-1
        sim = start_publisher(
            cluster, "--name", "wloss", "--nsteps", str(nsteps), "--sleep", "0.05",
            "--buffer-nb", "2", "--done", str(done), "--mode", mode,
        )  # fmt: skip
        received: list[int] = []
        values: dict[int, np.ndarray] = {}
        with cluster.client() as client:
            adapter = Adapter(client, timeout=STARTUP)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for step, array in adapter["wloss"].items():
                    values[step] = array.compute()  # before the next: a taken step is ours
                    received.append(step)
                    if step == 10:  # once steps 11 and 12 wait (buffer_nb): they will be lost
                        poll_for(lambda: queued(adapter, "wloss") == 2, STARTUP, period=0.1)
                        victim.kill()
                        victim.wait(timeout=STARTUP)
                        # taken from now on: a step whose block just died is not handed over
                        poll_for(lambda: workers(client) == 2, STARTUP, period=0.1)  # removed
            del array
            lost = adapter.stats()["lost"].get("wloss", [])
            adapter.close()
            rc, err = finish(sim)
            poll_for(lambda: scheduler_memory(client, "wloss") == (0, 0), STARTUP, period=0.1)
    finally:
        kill_if_running(sim)
        cluster.stop()
    assert rc == 0, err[-4000:]
    assert received == sorted(set(received)), received  # in order, each once
    lost_steps = sorted(step for step, _ in lost)
    assert lost_steps[:2] == [11, 12], lost  # they had a block on the dead worker
    assert sorted(received + lost_steps) == list(range(nsteps)), (received, lost)
    for step in received:
        np.testing.assert_array_equal(values[step], expected(step, SHAPE))
    dead = {worker for _, worker in lost}
    assert len(dead) == 1 and next(iter(dead)).startswith("tcp://127.0.0.1:"), lost
    skipped = [str(w.message) for w in caught if "was lost" in str(w.message)]
    assert len(skipped) == len(lost_steps), skipped  # each lost step named once, in a warning
    assert [r["published"] for r in reports(done)] == [nsteps] * 4
    # over shared memory (the default on one node), also to the workers left
    assert [r["transport"] for r in reports(done)] == ["shared memory"] * 4


def relaying_worker(cluster: DaskProcesses) -> int:
    """The index of the worker that relays rank 0's calls (it says who it is to a connection)."""
    from deisa.bridge.link.relay import Relay

    address = json.loads(cluster.scheduler_file.read_text())["address"]

    async def ask() -> str | None:
        relay = await Relay.open(address, STARTUP)
        if relay is None:
            return None
        await relay.close()
        return relay.worker

    with cluster.client() as client:
        poll_for(lambda: len(workers_of(client)) == 3, STARTUP, period=0.1)
        names = {a: w["name"] for a, w in workers_of(client).items()}
    worker = asyncio.run(ask())
    assert worker is not None, "no relay on this node"
    return int(str(names[worker]).removeprefix("worker-"))


def test_the_relays_worker_lost_rank_0_goes_on_through_distributed(tmp_path: Path) -> None:
    """Issue 35: rank 0 calls the scheduler through the relay of a worker of its node; that
    worker SIGKILLed mid-run, rank 0 makes its calls again through distributed (a registration
    or a watch the relay left unanswered included), and the run goes on as when any other
    worker is lost: exit 0, every step not lost arrives, bitwise. With
    ``on_scheduler_loss="fail"``: the relay's loss is not the scheduler's."""
    cluster = start_dask(tmp_path, n_workers=3)
    done = tmp_path / "done"
    done.mkdir()
    nsteps = 30
    sim = None
    try:
        victim = cluster.procs[1 + relaying_worker(cluster)]
        sim = start_publisher(
            cluster, "--name", "rloss", "--nsteps", str(nsteps), "--sleep", "0.05",
            "--buffer-nb", "2", "--done", str(done), "--on-scheduler-loss", "fail",
        )  # fmt: skip
        received: list[int] = []
        values: dict[int, np.ndarray] = {}
        with cluster.client() as client:
            adapter = Adapter(client, timeout=STARTUP)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the lost steps' warnings
                for step, array in adapter["rloss"].items():
                    values[step] = array.compute()
                    received.append(step)
                    if step == 8:  # steps 9 and 10 wait on flow control, rank 0's call with them
                        poll_for(lambda: queued(adapter, "rloss") == 2, STARTUP, period=0.1)
                        victim.kill()
                        victim.wait(timeout=STARTUP)
            del array
            lost = adapter.stats()["lost"].get("rloss", [])
            adapter.close()
            rc, err = finish(sim)
    finally:
        if sim is not None:
            kill_if_running(sim)
        cluster.stop()
    assert rc == 0, err[-4000:]
    lost_steps = sorted(step for step, _ in lost)
    assert sorted(received + lost_steps) == list(range(nsteps)), (received, lost)
    for step in received:
        np.testing.assert_array_equal(values[step], expected(step, SHAPE))
    rank0 = reports(done)[0]
    assert rank0["published"] == nsteps and rank0["distributed"] is True  # through it, after


def test_sync_publish_to_a_killed_worker_returns_well_within_the_connect_timeout(
    tmp_path: Path,
) -> None:
    """Issue 33: ``mode="sync"``, a worker SIGKILLed while the ranks compute. The next publish
    sends to it before any rank hears of its loss: distributed retries a refused connection for
    its whole connect timeout (here 60 s), and that publish used to wait for it. The Bridge now
    sees the refusal itself, and the step is sent again to the worker left, in seconds (about
    1 s idle): a bound of a third of the connect timeout holds on a loaded machine."""
    connect_s, bound_s = 60, 20
    cluster = start_dask(tmp_path, n_workers=2)
    done, hold = tmp_path / "done", tmp_path / "hold"
    done.mkdir()
    nsteps, held = 6, 3
    try:
        sim = start_publisher(
            cluster, "--name", "wsync", "--nsteps", str(nsteps), "--mode", "sync",
            "--done", str(done), "--hold-at-step", str(held), "--hold-file", str(hold),
            env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": str(connect_s)},
        )  # fmt: skip
        received: dict[int, np.ndarray] = {}
        with cluster.client() as client:
            names = {w["name"]: a for a, w in workers_of(client).items()}
            field = Adapter(client, timeout=STARTUP)["wsync"]
            for step in range(held):  # every rank has sent to both workers (round_robin)
                received[step] = field[step].compute()
            victim = cluster.procs[2]  # worker-1
            victim.kill()
            victim.wait(timeout=STARTUP)
            poll_for(lambda: workers(client) == 1, STARTUP, period=0.1)  # removed
            hold.touch()  # the ranks publish step 3, not knowing: half of them to the dead one
            for step in range(held, nsteps):
                received[step] = field[step].compute()
            rc, err = finish(sim)
    finally:
        kill_if_running(sim)
        cluster.stop()
    assert rc == 0, err[-4000:]
    for step in range(nsteps):  # nothing lost: the blocks were still in the ranks' hands
        np.testing.assert_array_equal(received[step], expected(step, SHAPE))
    refused = [line for line in err.splitlines() if "refuses connections" in line]
    assert refused and all(names["worker-1"] in line for line in refused), err[-4000:]
    took = [
        returned - called
        for rank in reports(done)
        for step, called, returned in rank["returned"]
        if step == held
    ]
    assert len(took) == 4 and max(took) < bound_s, took


def test_worker_joining_mid_run_receives_blocks_from_then_on(tmp_path: Path) -> None:
    """Issue 25: a worker added mid-run is placed on from the next publish (round_robin over
    the 3 workers then gives it a block of every step)."""
    cluster = start_dask(tmp_path, n_workers=2)
    nsteps = 30
    try:
        sim = start_publisher(
            cluster, "--name", "wjoin", "--nsteps", str(nsteps), "--sleep", "0.05",
            "--buffer-nb", "2",
        )  # fmt: skip
        held: dict[int, set[str]] = {}
        with cluster.client() as client:
            for step, array in Adapter(client, timeout=STARTUP)["wjoin"].items():
                held[step] = holders(client, array)
                np.testing.assert_array_equal(array.compute(), expected(step, SHAPE))
                if step == 5:
                    (joined,) = cluster.start_workers(1)  # worker-2, stopped with the others
                    client.wait_for_workers(3, timeout=STARTUP)
                    address = next(
                        a for a, w in workers_of(client).items() if w["name"] == "worker-2"
                    )
            rc, err = finish(sim)
    finally:
        kill_if_running(sim)
        cluster.stop()
    assert joined.poll() is not None  # stopped with the cluster
    assert rc == 0, err[-4000:]
    assert sorted(held) == list(range(nsteps))
    first = min(step for step, workers in held.items() if address in workers)
    assert first > 5
    assert all(address in held[step] for step in range(first, nsteps)), held


def holders(client: Any, array: Any) -> set[str]:
    """The workers holding the blocks of a step's ``array``, as the scheduler knows them."""
    keys = list(flatten(array.__dask_keys__()))

    def where(dask_scheduler: Any) -> list[str]:
        return sorted({ws.address for key in keys for ws in dask_scheduler.tasks[key].who_has})

    return set(client.run_on_scheduler(where))


@contextlib.contextmanager
def busy_loops(n: int = 2) -> Iterator[None]:
    """``n`` processes spinning a core each (``python3 -c 'while 1: pass'``) while the block
    runs: the load under which issue 54's faults were seen."""
    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for loop in loops:
            kill_if_running(loop)


KILL_RUNS = 2  # runs per mode and policy, each killing the scheduler at a random step
LOST_AFTER = 10  # the runs' connect_timeout: the bound after the scheduler's death
WIND_DOWN = 60  # past LOST_AFTER: the steps left, MPI's end, on a loaded machine


@pytest.mark.timeout(KILL_RUNS * 8 * STARTUP)
@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("policy", ["continue", "fail"])
def test_lost_scheduler_detaches_or_fails_within_connect_timeout(
    tmp_path: Path, policy: str, mode: str
) -> None:
    """Issues 25 and 54: the scheduler SIGKILLed at a random step, under two busy loops, the
    ranks asking a steering value after each publish (as the heat solver does).
    ``on_scheduler_loss="continue"``: after ``connect_timeout`` one error line, then the Bridge
    sends nothing, ``get`` returns its default, and the simulation runs to its end, exit 0,
    writing its own files; ``"fail"``: a BridgeError naming the scheduler. Either way the one
    message of a scheduler that has not answered, whichever call saw it first (a
    registration, a steering ``get``, ``close``): a call reset, refused or timed out meanwhile
    is the same loss, not a failure of its own (``get`` raised ``BridgeError: TimeoutError: ``
    before, with an empty message), and ``close()`` (``"fail"``) does not call the lost
    scheduler again. The same in either ``mode``."""
    rng = random.Random()
    with busy_loops(2):
        for run in range(KILL_RUNS):
            kill_at = rng.randrange(1, 20)
            rc, err, took, ranks = _kill_the_scheduler(
                tmp_path / f"run{run}", policy, mode, kill_at
            )
            context = f"run {run}, killed at step {kill_at}, {took:.1f} s after:\n{err[-4000:]}"
            assert took < LOST_AFTER + WIND_DOWN, context
            for raw in ("Stream is closed", "CommClosedError", "TimeoutError: \n"):
                assert raw not in err, context
            if policy == "fail":
                assert rc != 0, context
                raised = [line for line in err.splitlines() if "BridgeError: " in line]
                assert raised, context
                assert all("the scheduler has not answered for" in line for line in raised), context
                continue
            assert rc == 0, context
            lines = [line for line in err.splitlines() if "publish() sends nothing" in line]
            assert len(lines) == 1 and f"connect_timeout={LOST_AFTER} s" in lines[0], context
            assert [r["published"] for r in ranks] == [60] * 4  # it ran to its end
            assert len({r["detached"] for r in ranks}) == 1 and ranks[0]["detached"]  # all alike
            # get answered its default (nothing was set), before the loss and after it
            assert all(set(r["steered"]) == {"default"} and len(r["steered"]) == 60 for r in ranks)


def _kill_the_scheduler(
    tmp_path: Path, policy: str, mode: str, kill_at: int
) -> tuple[int, str, float, list[dict[str, Any]]]:
    """A run of 60 steps whose scheduler is SIGKILLed once the analytics has read step
    ``kill_at``: the publisher's exit status, its stderr, the seconds from the kill to its
    exit, and the ranks' reports."""
    tmp_path.mkdir()
    cluster = start_dask(tmp_path)
    done = tmp_path / "done"
    done.mkdir()
    try:
        sim = start_publisher(
            cluster, "--name", "sloss", "--nsteps", "60", "--sleep", "0.05",
            "--buffer-nb", "2", "--done", str(done), "--on-scheduler-loss", policy,
            "--connect-timeout", str(LOST_AFTER), "--mode", mode, "--steer", "stop",
        )  # fmt: skip
        with cluster.client() as client, ThreadPoolExecutor(1) as pool:
            for step, _ in Adapter(client, timeout=STARTUP)["sloss"].items():
                if step == kill_at:
                    break
            cluster.procs[0].kill()
            killed = time.monotonic()
            # the publisher's end, timed apart from this client's (whose scheduler is gone)
            ended = pool.submit(lambda: (*finish(sim), time.monotonic() - killed))
            cluster.procs[0].wait(timeout=STARTUP)
        rc, err, took = ended.result()
    finally:
        kill_if_running(sim)
        cluster.stop()
    return rc, err, took, reports(done)
