"""Several consumers, groups, windows and zip on real runs (mpirun simulations, ``dask``
processes); the scheduler side of each is tested in process in ``scheduler/test_extension.py``.

The checks are on what the analytics receives, not on when ``publish`` returns, so they hold
whether the Bridge publishes synchronously or asynchronously. Consumers run in threads of this
process, each with its own Client, or in a subprocess where one must die.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    REPO,
    STARTUP,
    DaskProcesses,
    mpirun,
    start_dask,
    start_heat,
    test_env,
    write_config,
)
from distributed.utils_test import poll_for

from deisa import Adapter
from deisa_simulation.heat import HeatConfig, reference_field

PUBLISHER = REPO / "tests" / "publish_blocks.py"
sys.path.insert(0, str(PUBLISHER.parent))
from publish_blocks import expected  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    processes = start_dask(tmp_path_factory.mktemp("dask"))
    yield processes
    processes.stop()


HANG = 2 * STARTUP  # the waits below only report a hang


def consumers(adapter: Adapter, array: str) -> dict[str, Any]:
    return dict(adapter.stats()["streams"].get(array, {}).get("consumers", {}))


class Reader(threading.Thread):
    """A consumer with its own Client, running ``body(adapter)`` in a thread; the body computes
    on that client (:func:`computed`)."""

    def __init__(self, cluster: DaskProcesses, body: Callable[[Adapter], Any], **kw: Any):
        super().__init__(daemon=True)
        self.cluster, self.body, self.kw = cluster, body, kw
        self.result: Any = None
        self.error: BaseException | None = None
        self.consumer: str | None = None

    def run(self) -> None:
        try:
            # the thread's client is neither the process's default nor made current with
            # client.as_current(): both write dask's process-wide configuration (scheduler=),
            # and a client made while another thread's setting is in force restores it when it
            # closes, after every client is gone. The body computes on this client explicitly.
            with (
                self.cluster.client(set_as_default=False) as client,
                Adapter(client, timeout=STARTUP, **self.kw) as a,
            ):
                self.consumer = a.consumer
                self.result = self.body(a)
        except BaseException as exc:  # reported by outcome()
            self.error = exc

    def outcome(self) -> Any:
        self.join(timeout=2 * STARTUP)
        assert not self.is_alive(), "the reader hung"
        if self.error is not None:
            raise self.error
        return self.result


def computed(adapter: Adapter, array: Any) -> np.ndarray:
    """``array`` computed on the Adapter's own client."""
    result: np.ndarray = adapter.client.compute(array).result()
    return result


def change_reference(config: HeatConfig, step: int) -> np.ndarray:
    """The whole-field temperature change over output ``step``'s last iteration
    (``output_period`` >= 2)."""
    one_per_output = replace(config, output_period=1)
    before = reference_field(one_per_output, (step + 1) * config.output_period - 2)
    return reference_field(config, step) - before


def test_fan_out_group_windows_and_zip_on_one_heat_run(
    cluster: DaskProcesses, tmp_path: Path
) -> None:
    config_path = write_config(tmp_path / "sim.yml", steps=10, output_period=2)
    config = HeatConfig.from_yaml(config_path)

    def zipped(a: Adapter) -> list[tuple[int, np.ndarray, np.ndarray]]:
        return [(s, computed(a, t), computed(a, d)) for s, (t, d) in a.zip("gtemp", "gdtemp")]

    def windows(a: Adapter) -> list[tuple[list[int], np.ndarray]]:
        return [(steps, computed(a, w)) for steps, w in a["gtemp"].windows(3)]

    def member(a: Adapter) -> dict[int, np.ndarray]:
        return {s: computed(a, f) for s, f in a["gtemp"].items()}

    readers = [
        Reader(cluster, zipped),
        Reader(cluster, windows),
        Reader(cluster, member, group="pool"),
        Reader(cluster, member, group="pool"),
    ]
    for reader in readers:
        reader.start()
    with cluster.client() as client:
        watcher = Adapter(client)  # reads stats only: not a consumer
        # every consumer attached before the first step: each receives the whole run
        poll_for(lambda: len(consumers(watcher, "gtemp")) == 3, HANG, period=0.1)
        poll_for(lambda: len(consumers(watcher, "gdtemp")) == 1, HANG, period=0.1)
        poll_for(lambda: len(consumers(watcher, "gtemp")["group:pool"]["members"]) == 2, HANG)
        sim = start_heat(
            4, config_path, "--scheduler-file", str(cluster.scheduler_file),
            "--change-array", "gdtemp", "--buffer-nb", "2",
        )  # fmt: skip
        try:
            pairs, wins, *shares = (reader.outcome() for reader in readers)
        finally:
            _, err = sim.communicate(timeout=2 * STARTUP)
        assert sim.returncode == 0, err[-3000:]
        stats = watcher.stats()["streams"]
    fields = [reference_field(config, s) for s in range(10)]

    assert [s for s, _, _ in pairs] == list(range(10))  # zip: the same steps, paired
    for step, temp, change in pairs:
        assert np.array_equal(temp, fields[step]), step  # bitwise, as the window reader's
        assert np.array_equal(change, change_reference(config, step)), step
    assert [steps for steps, _ in wins] == [[s, s + 1, s + 2] for s in range(8)]
    for steps, window in wins:
        assert np.array_equal(window, np.stack([fields[s] for s in steps])), steps
    # the group of two shared the steps: none lost, none twice
    assert sorted(s for share in shares for s in share) == list(range(10))
    for share in shares:
        for step, values in share.items():
            assert np.array_equal(values, fields[step]), step
    # every reader read the end of both arrays: the runs retired, nothing left attached
    for array in ("gtemp", "gdtemp"):
        assert stats[array]["run"] is None and stats[array]["consumers"] == {}


def test_a_second_analytics_that_attaches_late_receives_the_whole_run_with_consumers_2(
    cluster: DaskProcesses, tmp_path: Path
) -> None:
    """Two analytics started with the simulation, the second late (under load its process
    starts seconds later: issue #54, one ended with 6 of 20 steps, or with none). The heat run
    declares ``--consumers 2``: its steps wait for the second, which receives every one."""
    config = write_config(tmp_path / "sim.yml", steps=10, output_period=2)

    def steps(a: Adapter) -> list[int]:
        return [step for step, _ in a["late"].items()]

    first, second = Reader(cluster, steps), Reader(cluster, steps)
    first.start()
    with cluster.client() as client:
        watcher = Adapter(client)
        sim = start_heat(
            4, config, "--scheduler-file", str(cluster.scheduler_file), "--array", "late",
            "--buffer-nb", "2", "--consumers", "2",
        )  # fmt: skip
        try:
            taken = lambda: watcher.stats()["streams"].get("late", {}).get("taken", 0)  # noqa: E731
            poll_for(lambda: taken() >= 2, HANG, period=0.1)  # the first reads, alone
            second.start()
            assert first.outcome() == second.outcome() == list(range(10))
        finally:
            _, err = sim.communicate(timeout=2 * STARTUP)
        assert sim.returncode == 0, err[-3000:]


DYING_CONSUMER = f"""
import sys, time
from distributed import Client
from deisa import Adapter
client = Client(scheduler_file=sys.argv[1], timeout={STARTUP})
Adapter(client, timeout={2 * STARTUP})["killed"][0].compute()
print("took step 0", flush=True)
time.sleep(3600)  # stuck: killed by the test
"""


def scheduler_keys(client: Any, array: str) -> int:
    def count(dask_scheduler: Any) -> int:
        return sum(1 for key in dask_scheduler.tasks if f"-{array}-" in str(key))

    return int(client.run_on_scheduler(count))


def test_killed_consumer_unblocks_the_simulation_and_leaves_no_key(
    cluster: DaskProcesses,
) -> None:
    nsteps = 12
    dying = subprocess.Popen(
        [sys.executable, "-c", DYING_CONSUMER, str(cluster.scheduler_file)],
        env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with cluster.client() as client:
        watcher = Adapter(client)

        def alive() -> bool:
            assert dying.poll() is None, dying.communicate()[1][-3000:]
            return True

        reader = Reader(cluster, lambda a: {s: computed(a, f) for s, f in a["killed"].items()})
        reader.start()
        poll_for(lambda: alive() and len(consumers(watcher, "killed")) == 2, HANG, period=0.1)
        sim = subprocess.Popen(
            mpirun(4, sys.executable, str(PUBLISHER), str(cluster.scheduler_file),
                   "--name", "killed", "--nsteps", str(nsteps), "--buffer-nb", "2",
                   "--connect-timeout", str(STARTUP)),
            env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            # the stuck consumer took step 0 and has buffer_nb steps to take: the run waits
            stuck = [c for c in consumers(watcher, "killed") if c != reader.consumer]
            # the stuck consumer holds the run back
            poll_for(
                lambda: alive() and consumers(watcher, "killed")[stuck[0]]["queued"] == 2,
                HANG,
                period=0.1,
            )
            assert sim.poll() is None
            os.kill(dying.pid, signal.SIGKILL)
            dying.wait(timeout=STARTUP)
            received = reader.outcome()  # the run goes on for the consumer left
            _, err = sim.communicate(timeout=2 * STARTUP)
        finally:
            for proc in (sim, dying):
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        assert sim.returncode == 0, err[-3000:]
        assert sorted(received) == list(range(nsteps))
        for step, values in received.items():
            assert np.array_equal(values, expected(step, (8, 6))), step
        del received
        assert consumers(watcher, "killed") == {}
        poll_for(lambda: scheduler_keys(client, "killed") == 0, HANG, period=0.1)  # all released


def test_deisa_run_publishes_only_the_analysed_array_of_the_c_solver_yaml() -> None:
    from deisa.bridge.options import BridgeOptions
    from deisa.launcher.solver import deisa_pdi_config

    yml = REPO / "configs" / "heat_deisa.yml"
    for array, data in (("gtemp", "temp"), ("gdtemp", "dtemp")):
        plugin = deisa_pdi_config(yml, "s.json", BridgeOptions(), array)["plugins"]["deisa"]
        assert list(plugin["write"]) == [data]  # the other array would wait for a reader
        assert set(plugin["datasets"]) == {"gtemp", "gdtemp"}
