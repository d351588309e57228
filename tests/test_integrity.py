"""Nothing is lost, nothing is duplicated, nothing is left behind: a long run, checked bitwise."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, DaskProcesses, kill_if_running, mpirun, start_dask, test_env
from distributed.utils_test import poll_for

from deisa import Adapter

PUBLISHER = REPO / "tests" / "publish_blocks.py"
sys.path.insert(0, str(PUBLISHER.parent))
from publish_blocks import expected  # noqa: E402

SHAPE, GRID, NSTEPS, BUFFER_NB = (16, 12), (2, 2), 250, 4
# start-up deadlines (processes starting, connecting): generous, a loaded machine meets them
STARTUP = 120


def digest(block: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(block).tobytes(), digest_size=16).hexdigest()


def worker_keys(client) -> dict[str, int]:
    return client.run(lambda dask_worker: len(dask_worker.data))


def scheduler_keys(client) -> list:
    return client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    processes = start_dask(tmp_path)
    yield processes
    processes.stop()


def test_long_run_delivers_every_block_exactly_once_and_leaves_nothing(
    cluster: DaskProcesses,
) -> None:
    with cluster.client() as client:
        baseline = worker_keys(client)
        assert scheduler_keys(client) == []
        cmd = mpirun(
            GRID[0] * GRID[1], sys.executable, str(PUBLISHER), str(cluster.scheduler_file),
            "--shape", *map(str, SHAPE), "--grid", *map(str, GRID), "--nsteps", str(NSTEPS),
            "--buffer-nb", str(BUFFER_NB), "--name", "long", "--connect-timeout", str(STARTUP),
        )  # fmt: skip
        sim = subprocess.Popen(
            cmd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        adapter = Adapter(client, timeout=STARTUP)
        received: dict[tuple[int, tuple[int, int]], str] = {}
        keys_seen: set = set()
        steps = []
        try:
            for step, field in adapter["long"].items():
                steps.append(step)
                keys = [k for row in field.__dask_keys__() for k in row]
                assert not keys_seen.intersection(keys)
                keys_seen.update(keys)
                values = field.compute()
                np.testing.assert_array_equal(values, expected(step, SHAPE))
                offsets = [np.cumsum((0, *c[:-1])) for c in field.chunks]
                for i, r0 in enumerate(offsets[0]):
                    for j, c0 in enumerate(offsets[1]):
                        h, w = field.chunks[0][i], field.chunks[1][j]
                        block = values[r0 : r0 + h, c0 : c0 + w]
                        assert (step, (int(r0), int(c0))) not in received
                        received[step, (int(r0), int(c0))] = digest(block)
                del field, values
            _, err = sim.communicate(timeout=STARTUP)
        finally:
            kill_if_running(sim)
        assert sim.returncode == 0, err[-3000:]
        assert steps == list(range(NSTEPS))
        assert len(received) == NSTEPS * GRID[0] * GRID[1] >= 1000
        sent = {
            (s, (x0, y0)): digest(expected(s, SHAPE)[x0 : x0 + 8, y0 : y0 + 6])
            for s in range(NSTEPS)
            for x0 in (0, 8)
            for y0 in (0, 6)
        }
        assert received == sent
        stats = adapter.stats()
        assert stats["calls"]["publish"] == NSTEPS
        assert stats["streams"]["long"]["run"] is None  # end of stream consumed: run forgotten

        def released() -> bool:  # the releases travel on the batched streams
            return not scheduler_keys(client) and worker_keys(client) == baseline

        def left() -> None:
            raise AssertionError(
                f"left on the scheduler: {scheduler_keys(client)}; on the workers: "
                f"{worker_keys(client)} (before the run: {baseline})"
            )

        poll_for(released, STARTUP, left, period=0.2)
