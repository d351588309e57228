"""Labelled arrays (issue 36, item 3): ``as_xarray=True`` and ``to_xarray`` give
:class:`xarray.DataArray` objects around the same lazy dask arrays, their axes named by
``ArraySpec(dims=...)`` on a live stream (in process: ``gen_cluster`` and ``stream_driver``), by
the file or ``Replay(dims=...)`` on saved output, else ``dim_0``...; the step numbers are the
``"step"`` coordinate."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import h5py
import numpy as np
import pytest
from distributed import Client
from distributed.utils_test import gen_cluster
from stream_driver import META, WAIT, Rank0, block, install

from deisa import Adapter, ArraySpec, Decomposition, Replay
from deisa.analysis._labels import XarrayMissingError
from deisa.analysis.replay import UnknownArrayError
from deisa.bridge.link.connect import meta
from deisa.wire import step_key_name

xr = pytest.importorskip("xarray")

STEPS = [0, 10, 20, 30]
SHAPE = (6, 4)


@pytest.fixture(autouse=True)
def local_scheduler() -> Iterator[None]:
    """Replays compute on dask's local scheduler, whatever an earlier test's client left."""
    with dask.config.set(scheduler="threads"):
        yield


def saved() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((len(STEPS), *SHAPE))


def write(path: Path, *, scales: bool) -> Path:
    """An HDF5 file of gtemp (time axis first) and its step numbers, its axes named by
    dimension scales (netCDF-4's way: a scale per axis) if ``scales``."""
    with h5py.File(path, "w") as f:
        gtemp = f.create_dataset("gtemp", data=saved(), chunks=(1, 3, 4))
        f.create_dataset("step", data=np.array(STEPS, dtype=np.int32))
        if scales:
            for axis, name in enumerate(("step", "x", "y")):
                if name != "step":
                    f.create_dataset(name, data=np.arange(gtemp.shape[axis]))
                f[name].make_scale(name)
                gtemp.dims[axis].attach_scale(f[name])
    return path


# -- a live stream ----------------------------------------------------------------------------


def test_live_labelled_steps_carry_the_bridge_dims_and_stay_lazy() -> None:
    """'t' is opened with the metadata a Bridge of ArraySpec(dims=("x", "y")) registers; 'u'
    with that of a Bridge without dims (or older than them): xarray's default names."""

    @gen_cluster(client=True)
    async def run(c, s, a, b) -> None:
        await install(c, s)
        specs = [ArraySpec("float64", (4, 3), (2 * i, 0), (2, 3), dims=("x", "y")) for i in (0, 1)]
        described = meta(Decomposition.from_specs("t", specs), "r1")
        assert described == {**META, "run": "r1", "dims": ["x", "y"]}  # additive
        unnamed = [ArraySpec("float64", (4, 3), (2 * i, 0), (2, 3)) for i in (0, 1)]
        assert "dims" not in meta(Decomposition.from_specs("u", unnamed), "r1")
        await c.scheduler.deisa_open(name="t", run="r1", meta=described, buffer_nb=None)
        for name in ("t", "u"):
            rank0 = Rank0(c, [a, b], name, "r1")
            if name == "u":
                await rank0.open()
            for step in range(3):
                await rank0.publish(step)
            await rank0.close(3)

        def full(step: int) -> np.ndarray:
            return np.vstack([block(step, 0), block(step, 1)])

        def analytics() -> None:
            with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as ad:
                t, u = ad["t"], ad["u"]
                assert t.dims == ("x", "y") and u.dims is None
                first = t.to_xarray((0, slice(None), 1))
                assert first.dims == ("x",) and first.name == "t"
                assert int(first.coords["step"]) == 0
                np.testing.assert_array_equal(first.values, full(0)[:, 1])
                stacked = u.to_xarray([0])
                assert stacked.dims == ("step", "dim_0", "dim_1")
                assert list(stacked.coords["step"].values) == [0]
                np.testing.assert_array_equal(stacked.values, full(0)[None])
                for step, (temp, other) in ad.zip("t", "u", as_xarray=True):
                    assert temp.dims == ("x", "y") and other.dims == ("dim_0", "dim_1")
                    assert int(temp.coords["step"]) == step == int(other.coords["step"])
                    # the step's own keys: nothing computed, no task added
                    assert isinstance(temp.data, da.Array)
                    assert temp.data.name == step_key_name("r1", "t", step)
                    assert temp.data.locations is not None  # split() still finds the blocks
                    np.testing.assert_array_equal(temp.values, full(step))
                    np.testing.assert_array_equal(other.values, full(step))

        await asyncio.get_running_loop().run_in_executor(None, analytics)

    run()


def test_a_bridge_given_dims_names_the_axes_of_the_adapters_arrays(tmp_path: Path) -> None:
    """The whole path: ArraySpec(dims=...) on a (one-rank) Bridge, the scheduler, the Adapter."""
    from mpi4py import MPI

    from deisa import Bridge

    @gen_cluster(client=True)
    async def run(c, s, a, b) -> None:
        scheduler_file = tmp_path / "scheduler.json"
        scheduler_file.write_text(json.dumps({"address": s.address}))
        spec = ArraySpec("float64", (4, 6), (0, 0), (4, 6), dims=("lat", "lon"))

        def simulation() -> None:
            with Bridge(str(scheduler_file), {"g": spec}, comm=MPI.COMM_SELF, mode="sync") as br:
                for step in (0, 5):
                    br.publish("g", np.full((4, 6), float(step)), step)

        def analytics() -> list[tuple[int, Any, float]]:
            with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as ad:
                return [
                    (step, (field.dims, int(field.coords["step"])), float(field.mean()))
                    for step, field in ad["g"].items(as_xarray=True)
                ]

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, simulation)
        got = await loop.run_in_executor(None, analytics)
        assert got == [(0, (("lat", "lon"), 0), 0.0), (5, (("lat", "lon"), 5), 5.0)]

    run()


def test_without_xarray_asking_for_it_says_what_to_install_and_takes_no_step() -> None:
    @gen_cluster(client=True)
    async def run(c, s, a, b) -> None:
        await install(c, s)
        rank0 = Rank0(c, [a, b], "t", "r1")
        await rank0.open()
        await rank0.publish(0)
        await rank0.close(1)

        def analytics() -> list[int]:
            with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as ad:
                with pytest.MonkeyPatch.context() as patch:
                    patch.setitem(sys.modules, "xarray", None)  # import xarray fails
                    for ask in (
                        lambda: next(ad["t"].items(as_xarray=True)),
                        lambda: next(ad["t"].windows(1, as_xarray=True)),
                        lambda: next(ad.zip("t", "v", as_xarray=True)),
                        lambda: ad["t"].to_xarray(0),
                    ):
                        with pytest.raises(
                            ImportError, match=r'pip install "deisa-insitu\[xarray\]"'
                        ):
                            ask()
                    with pytest.raises(XarrayMissingError, match="as_xarray=True"):
                        next(ad["t"].items(as_xarray=True))
                return [step for step, _ in ad["t"].items()]

        assert await asyncio.get_running_loop().run_in_executor(None, analytics) == [0]

    run()


# -- saved output -------------------------------------------------------------------------------


def test_replay_names_the_axes_after_the_hdf5_dimension_scales(tmp_path: Path) -> None:
    gtemp = Replay(write(tmp_path / "run.h5", scales=True))["gtemp"]
    assert gtemp.dims == ("x", "y")
    steps = list(gtemp.items(as_xarray=True))
    assert [step for step, _ in steps] == STEPS
    for i, (step, field) in enumerate(steps):
        assert field.dims == ("x", "y") and int(field.coords["step"]) == step
        assert isinstance(field.data, da.Array) and field.data.chunks == ((3, 3), (4,))
        np.testing.assert_array_equal(field.values, saved()[i])
    windows = list(gtemp.windows(3, as_xarray=True))
    assert [steps for steps, _ in windows] == [[0, 10, 20], [10, 20, 30]]
    for i, (steps_of, window) in enumerate(windows):
        assert window.dims == ("step", "x", "y")
        assert list(window.coords["step"].values) == steps_of
        assert isinstance(window.data, da.Array)
        np.testing.assert_array_equal(window.values, saved()[i : i + 3])
    corner = gtemp.to_xarray((slice(10, None), slice(0, 2), 3))
    assert corner.dims == ("step", "x") and list(corner.coords["step"].values) == STEPS[1:]
    np.testing.assert_array_equal(corner.values, saved()[1:, 0:2, 3])


def test_replay_dims_given_else_xarray_defaults_and_the_file_wins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = write(tmp_path / "plain.h5", scales=False)
    assert Replay(plain)["gtemp"].dims is None
    step, field = next(Replay(plain)["gtemp"].items(as_xarray=True))
    assert field.dims == ("dim_0", "dim_1") and int(field.coords["step"]) == step == 0
    given = Replay(plain, dims={"gtemp": ["i", "j"]})["gtemp"]
    assert given.dims == ("i", "j") and given.to_xarray(20).dims == ("i", "j")
    named = write(tmp_path / "named.h5", scales=True)
    with caplog.at_level(logging.WARNING, logger="deisa.analysis._labels"):
        assert Replay(named, dims={"gtemp": ["i", "j"]})["gtemp"].dims == ("x", "y")
    assert "dims['gtemp']=('i', 'j') not used" in caplog.text and "('x', 'y')" in caplog.text
    for leading in (False, True):  # per-step files, with or without a leading axis of 1
        path = tmp_path / f"data_{int(leading)}_0.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("gtemp", data=saved()[:1] if leading else saved()[0])
        field = next(Replay([path], dims={"gtemp": ("x", "y")})["gtemp"].items(as_xarray=True))[1]
        assert field.dims == ("x", "y")
        np.testing.assert_array_equal(field.values, saved()[0])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_replay_names_the_axes_of_a_zarr_store_written_by_xarray(
    tmp_path: Path, zarr_format: int
) -> None:
    """xarray writes the names as ``_ARRAY_DIMENSIONS`` (Zarr 2) or ``dimension_names`` (3)."""
    pytest.importorskip("zarr")
    store = tmp_path / "run.zarr"
    dataset = xr.Dataset({"gtemp": (("step", "x", "y"), saved())}, coords={"step": STEPS})
    dataset.to_zarr(store, zarr_format=zarr_format, consolidated=False)
    gtemp = Replay(store)["gtemp"]
    assert gtemp.steps == STEPS and gtemp.dims == ("x", "y")
    window = gtemp.to_xarray(...)
    xr.testing.assert_equal(window.drop_vars("step"), dataset["gtemp"].drop_vars("step"))
    assert list(window.coords["step"].values) == STEPS


@pytest.mark.parametrize(
    ("dims", "error", "message"),
    [
        (["x", "y"], TypeError, r"dims=\['x', 'y'\] must map array names"),
        ({"gtemp": ["x"]}, ValueError, r"dims\['gtemp'\]=\['x'\] gives 1 name\(s\) for 2"),
        ({"gtemp": "xy"}, TypeError, r"dims\['gtemp'\]='xy' must be a list or tuple"),
        ({"gtemp": ["x", "x"]}, ValueError, r"dims\['gtemp'\]=.* names two axes 'x'"),
        ({"gtemp": ["step", "x"]}, ValueError, r"dims\['gtemp'\]=.*'step' is the name of"),
        ({"nope": ["x", "y"]}, UnknownArrayError, r"dims: no array 'nope' in .*: 'gtemp'"),
    ],
)
def test_replay_dims_errors_name_the_argument(
    tmp_path: Path, dims: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Replay(write(tmp_path / "run.h5", scales=False), dims=dims)
