"""End-to-end data path: `mpirun` heat ranks -> Bridge -> real Dask processes -> Adapter.

The tests share one scheduler and two workers (conftest's ``shared_dask``), each run under an
array name of its own; the scheduler's call counters are compared with their values before the
run."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    STARTUP,
    DaskProcesses,
    kill_if_running,
    mpirun,
    run_heat,
    start_heat,
    test_env,
    write_config,
)
from distributed.utils_test import poll_for

from deisa import Adapter, EndOfStreamError, IncrementalPCA
from deisa.analysis.splitter import measure_incoming_transfers, split
from deisa_simulation.heat import HeatConfig, block_checksum, reference_field


def scheduler_keys(client) -> list:
    return client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks))


def until_no_keys(client) -> None:
    """Wait, up to STARTUP, until the scheduler tracks no key."""

    def left() -> None:
        raise AssertionError(f"keys left on the scheduler: {scheduler_keys(client)}")

    poll_for(lambda: not scheduler_keys(client), STARTUP, left, period=0.1)


def calls(adapter: Adapter) -> dict[str, int]:
    """The scheduler's count of deisa calls per route so far. The module's tests share one
    cluster (each run under an array name of its own): a test counts the calls of its run as the
    difference from before it."""
    return dict(adapter.stats()["calls"])


def test_bridge_delivers_every_block_bitwise_ragged(
    shared_dask: DaskProcesses, tmp_path: Path
) -> None:
    # 31 x 34 over 2 x 2 ranks: rows split 16 + 15 (N % P != 0)
    config = write_config(tmp_path / "sim.yml", global_size=[31, 34], steps=5)
    timings = tmp_path / "timings.json"
    with shared_dask.client() as client:
        before = calls(Adapter(client))
    sim = start_heat(
        4, config, "--scheduler-file", str(shared_dask.scheduler_file), "--array", "ragged",
        "--buffer-nb", "2", "--checksums", "--timings", str(timings),
    )  # fmt: skip
    with shared_dask.client() as client:
        gtemp = Adapter(client, timeout=STARTUP)["ragged"]
        received: dict[tuple[int, tuple[int, int]], str] = {}
        for step, field in gtemp.items():
            assert field.chunks == ((16, 15), (17, 17))
            assert len(field.dask) == 4  # the four futures, no task
            values = field.compute()
            np.testing.assert_array_equal(
                values, reference_field(HeatConfig.from_yaml(config), step)
            )
            for i, row0 in enumerate((0, 16)):
                for j, col0 in enumerate((0, 17)):
                    block = field.blocks[i, j].compute()
                    received[step, (row0, col0)] = block_checksum(block)
            del field
        assert sim.wait(timeout=STARTUP) == 0, sim.stderr.read() if sim.stderr else ""
        assert gtemp.ended
        # one scheduler message per step, not per rank
        assert calls(Adapter(client))["publish"] - before.get("publish", 0) == 5
        until_no_keys(client)

    published = {
        (t["step"], tuple(t["start"])): t["checksum"]
        for rank in json.loads(timings.read_text())["ranks"]
        for t in rank
    }
    assert len(published) == 5 * 4
    assert received == published


def test_bridge_flow_control_blocks_and_resumes(shared_dask: DaskProcesses, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim.yml", steps=6, output_period=1)
    with shared_dask.client() as client:
        before = calls(Adapter(client)).get("publish", 0)
    sim = start_heat(
        4, config, "--scheduler-file", str(shared_dask.scheduler_file), "--buffer-nb", "2",
        "--array", "flow",
    )  # fmt: skip
    with shared_dask.client() as client:
        adapter = Adapter(client, timeout=STARTUP)

        def queued() -> dict:
            return adapter.stats()["streams"].get("flow", {})

        def running() -> bool:
            assert sim.poll() is None, "the simulation exited"
            return True

        hang = 2 * STARTUP  # the waits below only report a hang

        # one publish call per step: the third has reached the scheduler, which holds it
        poll_for(lambda: running() and calls(adapter).get("publish", 0) - before >= 3, hang)
        assert queued()["queued"] == 2
        assert queued()["published"] == 2
        assert sim.poll() is None, "the simulation ran past buffer_nb"

        gtemp = adapter["flow"]
        first = gtemp[0]  # frees one slot: the blocked step goes through
        poll_for(lambda: running() and queued().get("published", 0) >= 3, hang)  # step 2
        assert queued()["published"] == 3
        assert sim.poll() is None

        steps = [step for step, _ in gtemp.items()]
        assert steps == [1, 2, 3, 4, 5]
        assert sim.wait(timeout=STARTUP) == 0
        assert first.compute().shape == (32, 32)
        del first
        until_no_keys(client)


def test_adapter_first_then_simulation(shared_dask: DaskProcesses, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim.yml", steps=3)
    with shared_dask.client() as client:
        adapter = Adapter(client, timeout=STARTUP)
        before = calls(adapter).get("meta", 0)
        gtemp = adapter["late"]

        def simulate_once_the_adapter_waits() -> None:
            # the Adapter asked for 'late' (only reports a hang)
            poll_for(lambda: calls(adapter).get("meta", 0) > before, STARTUP, period=0.1)
            run_heat(4, config, "--scheduler-file", str(shared_dask.scheduler_file),
                     "--array", "late")  # fmt: skip

        later = threading.Thread(target=simulate_once_the_adapter_waits)
        later.start()
        try:
            last = gtemp[2, :, :]  # waits for the simulation to start and reach step 2
            np.testing.assert_array_equal(
                last.compute(), reference_field(HeatConfig.from_yaml(config), 2)
            )
        finally:
            later.join(timeout=2 * STARTUP)
        assert [s for s, _ in gtemp.items()] == [0, 1]  # cached on the way to step 2
        with pytest.raises(EndOfStreamError, match="past the end of the stream of 'late'"):
            gtemp[3]
        del last
        until_no_keys(client)


def test_simulation_first_then_adapter(shared_dask: DaskProcesses, tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim.yml", steps=3)
    run_heat(4, config, "--scheduler-file", str(shared_dask.scheduler_file), "--array", "early")
    # every rank has exited: the data lives on, held by the stream on the scheduler
    with shared_dask.client() as client:
        gtemp = Adapter(client, timeout=30)["early"]
        fields = gtemp[0:3]
        assert fields.shape == (3, 32, 32)
        expected = [reference_field(HeatConfig.from_yaml(config), s) for s in range(3)]
        np.testing.assert_array_equal(fields.compute(), np.stack(expected))
        assert list(gtemp) == []
        del fields
        until_no_keys(client)


# every rank and worker on this machine: one node, so node_local places as locality
@pytest.mark.parametrize("placement", ["locality", "node_local"])
def test_bridge_locality_placement_keeps_row_bands_together(
    shared_dask: DaskProcesses, tmp_path: Path, placement: str
) -> None:
    config = write_config(tmp_path / "sim.yml", process_grid=[2, 2], steps=1)
    run_heat(
        4, config, "--scheduler-file", str(shared_dask.scheduler_file),
        "--placement", placement, "--array", f"bands_{placement}",
    )  # fmt: skip
    with shared_dask.client() as client:
        field = Adapter(client, timeout=30)[f"bands_{placement}"][0]
        keys = field.__dask_keys__()
        who_has = client.who_has(list(field.dask.values()))
        bands = [{who_has[key][0] for key in row} for row in keys]
        assert all(len(band) == 1 for band in bands)
        assert bands[0] != bands[1]  # two row bands, two workers
        # SplIter's local phase, and the whole PCA fit, move nothing between workers
        assert split(field, keep_rows_whole=True).bytes_to_move == 0
        with measure_incoming_transfers(client) as moved:
            pca = IncrementalPCA(n_components=2).fit(field)
        assert pca.bytes_moved_ == 0
        assert (moved.count, moved.nbytes, moved.exact) == (0, 0, True)


def test_bridge_round_robin_placement_spreads_ranks(
    shared_dask: DaskProcesses, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "sim.yml", process_grid=[2, 2], steps=1)
    run_heat(4, config, "--scheduler-file", str(shared_dask.scheduler_file), "--array", "spread")
    with shared_dask.client() as client:
        field = Adapter(client, timeout=30)["spread"][0]
        who_has = client.who_has(list(field.dask.values()))
        keys = [key for row in field.__dask_keys__() for key in row]  # rank order
        workers = [who_has[key][0] for key in keys]
        assert workers[0] == workers[2] != workers[1] == workers[3]
        # every row band spans both workers: the PCA moves one block per band and says so
        with measure_incoming_transfers(client) as moved:
            pca = IncrementalPCA(n_components=2).fit(field)
        assert pca.bytes_moved_ == 2 * 16 * 16 * 8  # one 16 x 16 float64 block per band
        assert moved.nbytes == pca.bytes_moved_


def test_bridge_rejects_a_missing_scheduler_file(tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim.yml", steps=1)
    proc = run_heat(
        4, config, "--scheduler-file", str(tmp_path / "nowhere.json"), "--connect-timeout", "1",
        check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "nowhere.json' does not exist" in proc.stderr


def test_bridge_takes_options_and_keyword_overrides(local_client, tmp_path: Path) -> None:
    from mpi4py import MPI

    from deisa import ArraySpec, Bridge, BridgeOptions

    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps({"address": local_client.scheduler.address}))
    spec = ArraySpec("float64", (4, 6), (0, 0), (4, 6))
    # mode="sync": the step is registered when publish returns, so it is read inside the block
    options = BridgeOptions(placement="locality", buffer_nb=3, mode="sync")
    with Bridge(str(path), {"u": spec}, comm=MPI.COMM_SELF, options=options, timeout=None) as b:
        assert b.options == BridgeOptions(
            placement="locality", buffer_nb=3, timeout=None, mode="sync"
        )
        assert (b.placement, b.buffer_nb, b.timeout, b.on_full) == ("locality", 3, None, "block")
        b.publish("u", np.arange(24.0).reshape(4, 6), 0)
        field = Adapter(local_client, timeout=60)["u"][0].compute()
    assert np.array_equal(field, np.arange(24.0).reshape(4, 6))


# A publisher that exposes time indices again, as a code writing HDF5 slices may: steps 0, 1,
# then step 1 again with new values before the analytics takes anything (replaced); once the
# analytics has taken steps 0 and 1 (it says so in the file `taken'), step 1 again and step 0
# (dropped, with a warning), then step 2. Values: 100 * step + 10 * publication + rank.
REPUBLISHER = """
import os, sys, time
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
spec = ArraySpec("float64", global_shape=(4, 3), start=(2 * rank, 0), shape=(2, 3))

def wait_for(path):
    if rank == 0:
        deadline = time.monotonic() + 120
        while not os.path.exists(path):
            assert time.monotonic() < deadline, path
            time.sleep(0.05)
    comm.Barrier()

with Bridge(sys.argv[1], {"field": spec}) as bridge:
    for publication, step in enumerate([0, 1, 1, None, 1, 0, 2]):
        if step is None:
            bridge.flush()  # mode="async": the steps so far are registered, as in sync mode
            open("published", "w").close()
            wait_for("taken")
            continue
        bridge.publish("field", np.full((2, 3), 100.0 * step + 10 * publication + rank), step)
"""


def test_step_published_again_replaces_or_is_dropped_and_the_run_finishes(
    shared_dask: DaskProcesses, tmp_path: Path
) -> None:
    script = tmp_path / "republish.py"
    script.write_text(REPUBLISHER)
    cmd = mpirun(2, sys.executable, str(script), str(shared_dask.scheduler_file))
    sim = subprocess.Popen(
        cmd, cwd=tmp_path, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:

        def published() -> bool:
            assert sim.poll() is None, sim.communicate()
            return (tmp_path / "published").exists()

        poll_for(published, 120)
        with shared_dask.client() as client:
            field = Adapter(client, timeout=120)["field"]
            first = field[0:2].compute()  # takes steps 0 and 1
            (tmp_path / "taken").touch()
            rest = dict(field.items())
            out, err = sim.communicate(timeout=120)
            assert sim.returncode == 0, out + err
            assert sorted(rest) == [2] and field.ended
            last = rest[2].compute()
            stats = Adapter(client).stats()["streams"]
    finally:
        kill_if_running(sim)
    rows = np.repeat([0, 1], 2)[:, None]  # the rank that published each row
    np.testing.assert_array_equal(first[0], 0.0 + rows + np.zeros((4, 3)))  # publication 0
    np.testing.assert_array_equal(first[1], 120.0 + rows + np.zeros((4, 3)))  # 2nd of step 1
    np.testing.assert_array_equal(last, 260.0 + rows + np.zeros((4, 3)))
    for step in (1, 0):
        assert (
            f"step {step} of 'field' was published after the analytics had taken step 1: this "
            "publication was dropped"
        ) in err
    assert stats["field"]["run"] is None  # the run ended and was consumed


def test_rank0_is_heard_between_its_connection_and_its_first_step(
    shared_dask: DaskProcesses, tmp_path: Path
) -> None:
    """A simulation computing long before its first publish (mode="async") still gives the
    scheduler news of rank 0: its contracts watch runs from its connection, not from its first
    exchange. The analytics of a Slurm job tells a slow simulation from a gone one by it
    (deisa.pca_app.stall)."""
    from user_code import write_user_code

    simulation, _ = write_user_code(tmp_path / "code")
    env = test_env() | {"DEISA_SCHEDULER_FILE": str(shared_dask.scheduler_file)}
    gate = tmp_path / "compute-done"  # its first publish waits for this file
    command = mpirun(2, sys.executable, str(simulation), "1", "-1", "2", f"gate={gate}")
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        with shared_dask.client() as client:

            def watched_and_published() -> tuple[int, int | None]:
                stats = client.sync(client.scheduler.deisa_stats) or {}  # None: no extension yet
                stream = stats.get("streams", {}).get("field") or {}
                published = stream.get("published") if stream.get("run") else None
                return stats.get("contracts", {}).get("calls", {}).get("watch", 0), published

            def running() -> bool:
                assert proc.poll() is None, "the simulation exited"
                return True

            # until rank 0 opens it, then its next watch (within 10 s); only reports a hang
            poll_for(
                lambda: running() and watched_and_published()[1] is not None, STARTUP, period=0.2
            )
            seen = watched_and_published()
            poll_for(
                lambda: running() and watched_and_published()[0] > seen[0], STARTUP, period=0.2
            )
            gate.touch()
            assert [step for step, _ in Adapter(client, timeout=STARTUP)["field"].items()] == [0]
        assert proc.wait(timeout=STARTUP) == 0
    finally:
        kill_if_running(proc)
