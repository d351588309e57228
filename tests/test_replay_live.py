"""Record and stream in one run, then replay: deisa.Replay gives, bitwise, what the live
analytics saw, and the same analysis gives the same results on both.

- The C solver with configs/heat_both.yml: decl_hdf5 records every 10th step to heat.h5 while
  the deisa plugin streams every step; examples/pca.py --replay heat.h5 gives the live PCA,
  and the replay is chunked as the live stream, for an even decomposition and an uneven one.
- The Python solver (it has no HDF5 output): the live analytics records every step it receives
  to one file per step, and a replay of that pattern gives the same windows and zips.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from conftest import (
    BUILD,
    REPO,
    STARTUP,
    DaskProcesses,
    mpirun,
    start_dask,
    start_heat,
    test_env,
    write_config,
)

from deisa import Adapter, IncrementalPCA, Replay

CONFIGS = REPO / "configs"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[[int], DaskProcesses]]:
    """Starts a scheduler and ``n`` one-thread workers (processes); stops them after the test."""
    started: list[DaskProcesses] = []

    def start(n_workers: int) -> DaskProcesses:
        started.append(start_dask(tmp_path, n_workers=n_workers, nthreads=1))
        return started[-1]

    yield start
    for processes in started:
        processes.stop()


def pca_variance(field: Any, client: Any = None) -> list[float]:
    """What examples/pca.py computes for one step."""
    pca = IncrementalPCA(n_components=2, copy=False, svd_solver="full", client=client).fit(field)
    return [float(v) for v in pca.explained_variance_]


@pytest.mark.pdi
@pytest.mark.parametrize(
    ("global_size", "process_grid"),
    [([32, 32], [2, 2]), ([10, 14], [3, 1])],  # 10 rows over 3 ranks: blocks of 4, 3 and 3
    ids=["even-2x2", "uneven-3x1"],
)
def test_c_solver_records_and_streams_and_the_replay_is_what_the_live_side_saw(
    built: Path,
    tmp_path: Path,
    cluster: Callable[[int], DaskProcesses],
    global_size: list[int],
    process_grid: list[int],
) -> None:
    simulation = write_config(
        tmp_path / "simulation.yml", global_size=global_size, process_grid=process_grid, steps=25
    )
    nranks = process_grid[0] * process_grid[1]
    # one worker of one thread: the live PCA reduces one partition, as a replay with no client
    # does, so that the two agree bitwise
    processes = cluster(1)
    env = test_env()
    env["PDI_PLUGIN_PATH"] = str(BUILD / "plugin")
    cmd = mpirun(
        nranks, str(BUILD / "simulation" / "heat"), str(simulation), str(CONFIGS / "heat_both.yml")
    )
    heat = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        live: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        live_pca: dict[int, list[float]] = {}
        with processes.client() as client, Adapter(client, timeout=STARTUP) as adapter:
            for step, (temp, change) in adapter.zip("gtemp", "gdtemp"):
                assert temp is not None and change is not None
                live[step] = (temp.compute(), change.compute())
                if step % 10 == 0:
                    live_pca[step] = pca_variance(temp, client)
            live_chunks = adapter["gtemp"].chunks
        output, _ = heat.communicate(timeout=STARTUP)
        assert heat.returncode == 0, output
    finally:
        if heat.poll() is None:
            heat.kill()
    assert sorted(live) == list(range(25))

    replay = Replay(tmp_path / "heat.h5")  # read by dask's local scheduler
    assert replay["gtemp"].steps == replay["gdtemp"].steps == [0, 10, 20]
    # the ranks' blocks, from the block_start dataset that heat_both.yml writes at `init'
    assert replay["gtemp"].chunks == replay["gdtemp"].chunks == live_chunks
    if global_size == [10, 14]:
        assert live_chunks == ((4, 3, 3), (14,))
        with h5py.File(tmp_path / "heat.h5", "r") as f:  # HDF5 chunks are all of one size
            assert f["gtemp"].chunks == (1, 4, 14)
    for step, (temp, change) in replay.zip("gtemp", "gdtemp"):
        assert temp is not None and change is not None
        assert np.array_equal(temp.compute(), live[step][0]), step
        assert np.array_equal(change.compute(), live[step][1]), step

    script = [sys.executable, str(REPO / "examples" / "pca.py"), "--replay", "heat.h5"]
    proc = subprocess.run(
        [*script, "--out", "replay.json"],
        cwd=tmp_path,
        env=test_env(),
        capture_output=True,
        text=True,
        timeout=STARTUP,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    replayed = json.loads((tmp_path / "replay.json").read_text())
    assert replayed["steps"] == [0, 10, 20]
    assert dict(zip(replayed["steps"], replayed["explained_variance"], strict=True)) == live_pca


def test_python_solver_replayed_from_per_step_files_windows_and_zips_alike(
    tmp_path: Path, cluster: Callable[[int], DaskProcesses]
) -> None:
    config = write_config(
        tmp_path / "simulation.yml", global_size=[24, 20], process_grid=[2, 2], steps=6
    )
    processes = cluster(2)
    with (
        processes.client() as client,
        Adapter(client, timeout=STARTUP) as recorder,
        Adapter(client, timeout=STARTUP) as watcher,
    ):
        for name in ("gtemp", "gdtemp"):  # both consumers receive every step
            recorder[name]._attach()
        watcher["gtemp"]._attach()
        heat = start_heat(
            4, config, "--scheduler-file", str(processes.scheduler_file), "--change-array",
            "gdtemp",
        )  # fmt: skip
        try:
            live_zip, live_windows = [], []
            windows = watcher["gtemp"].windows(3, partial=True)
            for step, (temp, change) in recorder.zip("gtemp", "gdtemp"):
                assert temp is not None and change is not None
                pair = (temp.compute(), change.compute())
                live_zip.append((step, pair))
                with h5py.File(tmp_path / f"data_{step}.h5", "w") as f:
                    for name, data in zip(("gtemp", "gdtemp"), pair, strict=True):
                        chunks = tuple(c[0] for c in recorder[name].chunks)
                        f.create_dataset(name, data=data, chunks=chunks)
                steps, window = next(windows)
                live_windows.append((steps, window.compute()))
            assert next(windows, None) is None
            live_array = watcher["gtemp"]  # the steps and len of a live array, as of a replay
            assert live_array.ended and live_array.steps == list(range(6)) and len(live_array) == 6
            live_chunks = recorder["gtemp"].chunks
            out, err = heat.communicate(timeout=STARTUP)
            assert heat.returncode == 0, out + err
        finally:
            if heat.poll() is None:
                heat.kill()
        assert [step for step, _ in live_zip] == list(range(6))
        assert Replay(str(tmp_path / "data_{step}.h5"))["gtemp"].steps == list(range(6))

        check_replay(Replay(str(tmp_path / "data_{step}.h5"), client), live_zip, live_windows)
    # the same once no client is left: dask's local scheduler reads the files
    check_replay(Replay(str(tmp_path / "data_{step}.h5")), live_zip, live_windows)
    assert Replay(str(tmp_path / "data_{step}.h5"))["gtemp"].chunks == live_chunks


def check_replay(replay: Replay, live_zip: list[Any], live_windows: list[Any]) -> None:
    """zip and windows(3, partial=True) of the replay give, bitwise, what they gave live."""
    replayed = list(replay.zip("gtemp", "gdtemp"))
    assert [step for step, _ in replayed] == [step for step, _ in live_zip]
    for (_, arrays), (_, pair) in zip(replayed, live_zip, strict=True):
        for array, data in zip(arrays, pair, strict=True):
            assert array is not None and np.array_equal(array.compute(), data)
    windows = list(replay["gtemp"].windows(3, partial=True))
    assert [steps for steps, _ in windows] == [steps for steps, _ in live_windows]
    assert [steps for steps, _ in live_windows][:3] == [[0], [0, 1], [0, 1, 2]]
    for (_, window), (_, data) in zip(windows, live_windows, strict=True):
        assert np.array_equal(window.compute(), data)


def test_deisa_run_analytics_replays_a_file_into_the_table_and_plot(tmp_path: Path) -> None:
    """``deisa-run analytics --replay FILE``: the run's table, results.json and plot from a file,
    on a cluster of its own (none given)."""
    from sklearn.decomposition import PCA

    field = np.random.default_rng(0).standard_normal((3, 40, 12)) * np.linspace(3, 0.5, 12)
    with h5py.File(tmp_path / "run.h5", "w") as f:
        f.create_dataset("gtemp", data=field, chunks=(1, 20, 12))
        f.create_dataset("step", data=np.array([0, 10, 20], dtype=np.int32))
    command = [sys.executable, "-m", "deisa.launcher", "analytics"]
    options = ["--replay", "run.h5", "--output", "out", "--n-components", "2", "--workers", "2"]
    shared = tmp_path / "tmp"  # the node's TMPDIR, as /tmp
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    proc = subprocess.run(
        [*command, *options], cwd=tmp_path, env={**test_env(), "TMPDIR": str(shared)},
        capture_output=True, text=True, timeout=STARTUP,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(shared.iterdir()) == []  # its cluster's scratch was private, and removed
    table = [line.split()[0] for line in proc.stdout.splitlines() if line.split()[:1]]
    assert {"0", "10", "20", "total"} <= set(table), proc.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    steps = results["steps"]
    assert [s["step"] for s in steps] == [0, 10, 20]
    for entry, data in zip(steps, field, strict=True):
        expected = PCA(n_components=2).fit(data).explained_variance_
        np.testing.assert_allclose(entry["explained_variance"], expected, rtol=1e-10)
    assert (tmp_path / "out" / "explained_variance.png").stat().st_size > 0

    for bad, message in (
        ([], "give --scheduler-file (the live stream) or --replay FILES"),
        (["--replay", "run.h5", "--stop-when-converged", "0.1"], "not with --replay"),
    ):
        proc = subprocess.run(
            [*command, *bad], cwd=tmp_path, env=test_env(), capture_output=True, text=True,
            timeout=STARTUP,
        )  # fmt: skip
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
