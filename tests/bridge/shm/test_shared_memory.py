"""The shared-memory path with real processes: mpirun ranks, ``dask`` workers, an Adapter.

Every block arrives bitwise whichever way it went; the ranks say which way; a rank SIGKILLed
mid-run leaves no slot mapped on a worker but those of the blocks it holds, and nothing in
/dev/shm; a listener name taken by another account is replaced by the next. The loss of
a worker over shared memory is tests/test_faults.py's (the Bridge's default transport).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, STARTUP, DaskProcesses, kill_if_running, mpirun, start_dask, test_env
from distributed.utils_test import poll_for

from deisa import Adapter
from deisa._dask_internals import workers_of
from deisa.pca_app.driver import array_totals, pool
from deisa.wire.shm import slot_bytes, socket_name

PUBLISHER = REPO / "tests" / "publish_blocks.py"
sys.path.insert(0, str(PUBLISHER.parent))
from publish_blocks import expected  # noqa: E402

SLOT = "/memfd:deisa-slot-"
SHAPE = (31, 34)  # over 2 x 2 ranks: rows 16 + 15, columns 17 + 17


def publish(cluster: DaskProcesses, done: Path, *args: str) -> subprocess.Popen[str]:
    cmd = mpirun(
        4, sys.executable, str(PUBLISHER), str(cluster.scheduler_file), "--shape",
        *map(str, SHAPE), "--connect-timeout", str(STARTUP), "--done", str(done), *args,
    )  # fmt: skip
    return subprocess.Popen(
        cmd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def transports(done: Path) -> list[str]:
    return [json.loads(p.read_text())["transport"] for p in sorted(done.glob("rank-*.json"))]


def take_all(client: Any, name: str) -> dict[int, np.ndarray]:
    return {step: field.compute() for step, field in Adapter(client, timeout=STARTUP)[name].items()}


def slots_on_workers(client: Any) -> dict[str, tuple[int, int]]:
    """Per worker: (slots it maps, its blocks that are views of a slot)."""

    def count(dask_worker: Any) -> tuple[int, int]:
        with open(f"/proc/{os.getpid()}/maps") as maps:
            mapped = {line.split()[4] for line in maps if SLOT in line}  # by inode
        views = sum(
            type(getattr(v, "base", None)).__name__ == "_SlotView"
            for v in dask_worker.data.values()
        )
        return len(mapped), views

    return client.run(count)


def dev_shm() -> set[str]:
    """What of ours is named in /dev/shm (Open MPI's and others' segments come and go)."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {name for name in names if "deisa" in name}


@pytest.mark.parametrize(
    ("mode", "transport"), [("async", "auto"), ("sync", "auto"), ("async", "tcp")]
)
def test_every_block_arrives_bitwise_whichever_way(
    dask_processes: DaskProcesses, tmp_path: Path, mode: str, transport: str
) -> None:
    done = tmp_path / "done"
    done.mkdir()
    sim = publish(dask_processes, done, "--name", "shm", "--nsteps", "6", "--mode", mode,
                  "--transport", transport)  # fmt: skip
    try:
        with dask_processes.client() as client:
            values = take_all(client, "shm")
            _, err = sim.communicate(timeout=2 * STARTUP)
            assert sim.returncode == 0, err[-3000:]
            # the ranks' warm pools, reported with the end of the stream (the run's summary)
            shm_pool = pool(array_totals(client, "shm"))
            # once every step is released, no worker maps a slot any more
            poll_for(lambda: all(n == (0, 0) for n in slots_on_workers(client).values()),
                     STARTUP, period=0.2)  # fmt: skip
    finally:
        kill_if_running(sim)
    assert sorted(values) == list(range(6))
    for step, value in values.items():
        np.testing.assert_array_equal(value, expected(step, SHAPE))
    way = "shared memory" if transport == "auto" else "tcp"
    assert transports(done) == [way] * 4
    if transport == "auto":  # default budget: 5 steps of the rank's block (buffer_nb unbounded)
        assert shm_pool is not None and shm_pool["ranks"] == 4, shm_pool
        blocks = [rows * 17 * 8 for rows in (16, 16, 15, 15)]  # a slot each, its header page too
        assert shm_pool["budget KiB"] == round(sum(5 * slot_bytes(n) for n in blocks) / 1024)
    else:
        assert shm_pool is None
    assert dev_shm() == set()  # slots are memfds: nothing named in /dev/shm


def test_a_rank_killed_mid_run_leaves_only_the_slots_of_blocks_held(
    dask_processes: DaskProcesses, tmp_path: Path
) -> None:
    done = tmp_path / "done"
    done.mkdir()
    sim = publish(dask_processes, done, "--name", "killed", "--nsteps", "8", "--mode", "sync",
                  "--die-rank", "1", "--die-at-step", "3", "--die-by-kill")  # fmt: skip
    try:
        with dask_processes.client() as client:
            adapter = Adapter(client, timeout=STARTUP)
            kept = [adapter["killed"][step] for step in range(3)]  # registered before it dies
            for step, field in enumerate(kept):
                np.testing.assert_array_equal(field.compute(), expected(step, SHAPE))
            _, err = sim.communicate(timeout=2 * STARTUP)
            assert sim.returncode != 0 and "rank 1 dies before step 3" in err, err[-3000:]
            # the ranks are gone: a worker maps the slots of the blocks it still holds, no other
            poll_for(lambda: all(m == v for m, v in slots_on_workers(client).values()),
                     STARTUP, period=0.2)  # fmt: skip
            held = sum(v for _, v in slots_on_workers(client).values())
            assert held >= 3 * 4  # the blocks of the steps kept, each in its slot
            del kept
    finally:
        kill_if_running(sim)
    assert dev_shm() == set()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as uid 65534")
def test_a_listener_name_taken_by_another_account_is_replaced(
    tmp_path: Path,
) -> None:
    from test_transport import FOREIGN_PYTHON, squat

    if FOREIGN_PYTHON is None:
        pytest.skip("no Python that uid 65534 may run")
    # the listeners start with rank 0's connection, after the squatter took the first name (a
    # run of plain TCP has no secret: its names are public, tests/wire/test_names.py)
    cluster = start_dask(tmp_path, n_workers=2, bridge_preload=False)
    done = tmp_path / "done"
    done.mkdir()
    squatter = sim = None
    try:
        with cluster.client() as client:
            victim = sorted(workers_of(client))[0]
            squatter = squat(socket_name(victim, uid=os.getuid()))
            sim = publish(cluster, done, "--name", "squat", "--nsteps", "4")
            values: dict[int, np.ndarray] = {}
            reader = threading.Thread(target=lambda: values.update(take_all(client, "squat")))
            reader.start()
            _, err = sim.communicate(timeout=2 * STARTUP)
            reader.join(2 * STARTUP)
            assert sim.returncode == 0, err[-3000:]
    finally:
        for proc in (sim, squatter):
            if proc is not None:
                kill_if_running(proc)
        cluster.stop()
    for step, value in values.items():
        np.testing.assert_array_equal(value, expected(step, SHAPE))
    assert sorted(values) == list(range(4))
    # the victim's listener took the next name, where its ranks found it
    assert transports(done) == ["shared memory"] * 4
    log = (tmp_path / "worker-0.log").read_text() + (tmp_path / "worker-1.log").read_text()
    assert "held by another account: skipped" in log
