"""deisa.analysis.compat: pdidev/deisa main's client (``Deisa(nb_workers, scheduler_file_name=)``)
beside 0.3.x's, and the declared time length of an array on the analytics side.

The analytics script is tests/grammars/ekin_main.py, written as pdidev/deisa main's published
benchmark is; it runs in a thread against a real scheduler and two workers in process
(``gen_cluster``) while a real one-rank Bridge (``MPI.COMM_SELF``, in another thread) publishes
a 4-D field (variables, z, y, x) with a declared time length. The same in real processes, with
a C code through PDI: tests/test_grammars.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import runpy
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, STARTUP
from distributed.utils_test import gen_cluster

from deisa.analysis import _compat_client, compat
from deisa.analysis._compat_main import MySlice, selection_of
from deisa.analysis._reading import EndOfStreamError
from deisa.wire import SCHEDULER_FILE_ENV

SHAPE = (5, 6, 4, 8)  # nvar, z, y, x
NSTEPS = 4
EKIN_MAIN = REPO / "tests" / "grammars" / "ekin_main.py"


@pytest.fixture(autouse=True)
def warned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compat_client, "_warned", True)


def field(step: int) -> np.ndarray:
    """Step ``step``: every variable, z, y, x distinct, exact in float64."""
    v, z, y, x = np.indices(SHAPE)
    return 1.0 + step + 0.5 * v + 0.25 * z + 0.125 * y + x / 64.0


def ekin(series: np.ndarray) -> np.ndarray:
    """ekin_main.py's kinetic energy, by numpy."""
    mz = series.shape[2]
    s = series[:, :, mz // 3]
    return 0.5 * s[:, 0] * (s[:, 2] ** 2 + s[:, 3] ** 2 + s[:, 4] ** 2) / (mz * mz)


def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


def simulate(
    scheduler_file: Path,
    steps: int = NSTEPS,
    time_length: int | None = NSTEPS,
    before_close: threading.Event | None = None,
    before_first: threading.Event | None = None,
) -> None:
    """A one-rank simulation publishing ``steps`` steps of global_t, declaring
    ``time_length``; waits for ``before_first`` before its first step and for
    ``before_close`` before it closes the stream."""
    from mpi4py import MPI

    from deisa import ArraySpec, Bridge

    spec = ArraySpec("float64", SHAPE, (0,) * 4, SHAPE, time_length=time_length)
    with Bridge(str(scheduler_file), {"global_t": spec}, comm=MPI.COMM_SELF, mode="sync") as br:
        if before_first is not None:
            assert before_first.wait(STARTUP)
        for step in range(steps):
            br.publish("global_t", field(step), step)
        if before_close is not None:
            assert before_close.wait(STARTUP)


def scheduler_file(tmp_path: Path, s: Any) -> Path:
    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps({"address": s.address}))
    return path


def run_script(path: Path, *argv: str) -> dict[str, Any]:
    saved = sys.argv
    sys.argv = [str(path), *argv]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = saved


# -- which generation a call is ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((), {"scheduler_file_name": "s.json", "nb_workers": 2, "use_ucx": False}, "main"),
        ((2,), {"scheduler_file_name": "s.json"}, "main"),
        ((2, "s.json"), {}, "main"),
        ((np.int64(2),), {"cluster": object()}, "main"),
        ((), {"nb_workers": 1, "scheduler_address": "tcp://127.0.0.1:1"}, "main"),
        (("s.json", "config.yml"), {}, "0.3"),
        (("s.json", 2), {"use_ucx": False}, "0.3"),
        ((Path("s.json"),), {"config": 2}, "0.3"),
        ((), {"scheduler_info": "s.json", "config": 2}, "0.3"),
    ],
)
def test_the_arguments_decide_the_generation(args: Any, kwargs: Any, expected: str) -> None:
    assert compat.generation(args, kwargs) == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {"scheduler_info": "s.json", "nb_workers": 2}, r"\['nb_workers'\] and .* mix two"),
        ((), {"use_ucx": True}, "cannot tell the form"),
        ((2.5, "s.json"), {}, "cannot tell the form"),
    ],
)
def test_a_call_of_no_form_names_both(args: Any, kwargs: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message) as info:
        compat.Deisa(*args, **kwargs)
    assert "Deisa(scheduler_info, config)" in str(info.value)
    assert "Deisa(nb_workers, scheduler_file_name=None" in str(info.value)


def test_main_without_a_scheduler_says_where_to_give_it() -> None:
    with pytest.raises(RuntimeError, match=r"scheduler_file_name='scheduler\.json'"):
        compat.Deisa(2)
    with pytest.raises(ValueError, match="nb_workers=0 must be a positive integer"):
        compat.Deisa(0, scheduler_file_name="s.json")


def test_selection_is_recorded_as_that_generation_did() -> None:
    shape = (10, 3, 8)
    assert selection_of((slice(None), 1, slice(-4, None, 2)), shape) == [
        MySlice(0, 10, 1),
        MySlice(1, 2, 1),
        MySlice(4, 8, 2),
    ]
    assert selection_of((-1, Ellipsis), shape) == [(9, 10, 1), (0, 3, 1), (0, 8, 1)]
    assert selection_of((Ellipsis, 5), shape) == [(0, 10, 1), (0, 3, 1), (5, 6, 1)]
    assert selection_of(Ellipsis, shape) == [(0, 10, 1), (0, 3, 1), (0, 8, 1)]
    assert selection_of(3, shape) == [(3, 4, 1)]
    with pytest.raises(ValueError, match="Only one use of Ellipsis allowed"):
        selection_of((Ellipsis, 0, Ellipsis), shape)
    with pytest.raises(ValueError, match="-1 only positive step values are accepted"):
        selection_of((slice(None, None, -1),), shape)


# -- the benchmark's script, unchanged ---------------------------------------------------------


@gen_cluster(client=True, timeout=STARTUP)
async def test_main_benchmark_analytics_runs_unchanged_and_equals_numpy(
    c, s, a, b, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its launch order: the analytics before the simulation; it waits for the workers, then
    for the simulation's arrays. Under deisa-run's variable, the scheduler is left running."""
    path = scheduler_file(tmp_path, s)
    monkeypatch.setenv(SCHEDULER_FILE_ENV, str(path))
    analytics = in_thread(run_script, EKIN_MAIN, "2", str(path), str(tmp_path))
    await in_thread(simulate, path)
    names = await analytics
    got = np.load(tmp_path / "ekin.npz")
    series = np.stack([field(step) for step in range(NSTEPS)])
    expected = ekin(series)
    assert list(got["shape"]) == [NSTEPS, SHAPE[1], SHAPE[2], SHAPE[3]]
    np.testing.assert_allclose(got["ekin"], expected, rtol=1e-13)
    np.testing.assert_allclose(got["sum_over_xy"], expected.sum(axis=(1, 2)), rtol=1e-13)
    np.testing.assert_allclose(got["fourier"], np.abs(np.fft.fft2(expected)) ** 2, rtol=1e-10)
    assert names["deisa"].client.status == "closed" and s.status.name == "running"
    assert names["arrays"]["global_t"].selection == [
        (0, NSTEPS, 1),
        (0, SHAPE[0], 1),
        (SHAPE[1] // 3, SHAPE[1] // 3 + 1, 1),
        (0, SHAPE[2], 1),
        (0, SHAPE[3], 1),
    ]


@gen_cluster(client=True, timeout=STARTUP)
async def test_declared_time_length_is_there_before_any_step_and_missing_steps_say_so(
    c, s, a, b, tmp_path: Path
) -> None:
    """``len(gt[:, 0])`` is the declared length before the first step; a simulation that stops
    after 2 of its 4 steps ends the stream: the steps that came compute, the others fail
    naming the step and the end."""
    path = scheduler_file(tmp_path, s)
    first = threading.Event()
    simulation = in_thread(simulate, path, 2, NSTEPS, None, first)

    def analytics() -> tuple[int, np.ndarray, str, Any]:
        deisa = compat.Deisa(2, scheduler_file_name=str(path))
        arrays = deisa.get_deisa_arrays()
        with pytest.raises(ValueError, match="nope array does not exist in Deisa data store"):
            arrays["nope"]
        gt = arrays["global_t"][:, 1]
        length = len(gt[:, 0, 0, 0])
        first.set()
        head = deisa.get_client().compute(gt[:2].sum(axis=(1, 2, 3))).result()
        with pytest.raises(EndOfStreamError) as info:
            gt.sum().compute()
        contract = arrays.generate_contract()
        arrays.handle_contract()
        arrays.gc()
        deisa.get_client().close()
        return length, head, str(info.value), contract

    length, head, message, contract = await in_thread(analytics)
    await simulation
    assert length == NSTEPS
    np.testing.assert_array_equal(head, [field(t)[1].sum() for t in range(2)])
    assert re.fullmatch(  # whichever missing step fails first
        r"step [23] of 'global_t' never came: the simulation ended the stream after 2 step\(s\) "
        r"\(last: 1\) of the 4 its time axis declares",
        message,
    ), message
    assert contract == {"global_t": [(0, NSTEPS, 1), (1, 2, 1)]}


@gen_cluster(client=True, timeout=STARTUP)
async def test_main_connects_by_address(c, s, a, b) -> None:
    def connect() -> str:
        deisa = compat.Deisa(2, scheduler_address=s.address)
        address: str = deisa.get_client().scheduler.address
        deisa.get_client().close()
        return address

    assert await in_thread(connect) == s.address


def test_main_connects_by_cluster_object_first() -> None:
    """``cluster=`` (a LocalCluster here) wins over a scheduler file given too."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
        deisa = compat.Deisa(nb_workers=1, scheduler_file_name="absent.json", cluster=cluster)
        try:
            assert deisa.get_client().scheduler.address == cluster.scheduler_address
        finally:
            deisa.get_client().close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_v03_selection_ends_at_the_declared_length_without_the_streams_end(
    c, s, a, b, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.3.x's ``[...]`` with a launch configuration only (no PDI YAML): the simulation's
    declared length ends it, while the stream is still open."""
    path = scheduler_file(tmp_path, s)
    monkeypatch.chdir(tmp_path)
    release = threading.Event()
    simulation = in_thread(simulate, path, NSTEPS, NSTEPS, release)

    def analytics() -> tuple[int, float]:
        deisa = compat.Deisa(str(path), 2)
        gt = deisa.get_deisa_arrays()["global_t"][...]
        total = float(deisa.get_client().compute(gt.sum()).result())
        release.set()
        deisa.get_client().close()
        return len(gt), total

    length, total = await in_thread(analytics)
    await simulation
    assert length == NSTEPS
    assert total == sum(field(step).sum() for step in range(NSTEPS))
