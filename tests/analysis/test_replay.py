"""deisa.Replay: the reading interface of a live array over saved files (HDF5, Zarr).

In process, on files written here with h5py (decl_hdf5's layout: time axis first, a ``step``
dataset). Replay against a live stream of the same run, with the C and the Python solvers:
tests/test_replay_live.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dask.array as da
import h5py
import numpy as np
import pytest
from conftest import two_worker_client
from distributed import Client
from sklearn.decomposition import PCA

from deisa import (
    EndOfStreamError,
    IncrementalPCA,
    Replay,
    ReplayError,
    StepNotAvailableError,
    split,
)
from deisa.analysis.pca import _current_client
from deisa.analysis.replay import UnknownArrayError

STEPS = [0, 10, 20, 30]


SHAPE = (12, 8)


def fields(seed: int = 0) -> np.ndarray:
    """One (x, y) field per step of STEPS, distinct."""
    return np.random.default_rng(seed).standard_normal((len(STEPS), *SHAPE))


def write_run(
    path: Path, *, chunks: tuple[int, ...] | None = (1, 6, 4), steps: bool = True
) -> Path:
    """A file as configs/heat_both.yml writes it: gtemp, gdtemp, and the step numbers."""
    with h5py.File(path, "w") as f:
        f.create_dataset("gtemp", data=fields(0), chunks=chunks)
        f.create_dataset("gdtemp", data=fields(1), chunks=chunks)
        if steps:
            f.create_dataset("step", data=np.array(STEPS, dtype=np.int32))
        f.create_dataset("mesh/area", data=np.ones(SHAPE))  # no time axis: 12 != 4 steps
    return path


def write_per_step(tmp_path: Path, name: str = "data_{}.h5", leading: bool = False) -> None:
    for i, step in enumerate(STEPS):
        with h5py.File(tmp_path / name.format(step), "w") as f:
            for dataset, seed in (("gtemp", 0), ("gdtemp", 1)):
                data = fields(seed)[i]
                f.create_dataset(dataset, data=data[None] if leading else data, chunks=None)


def test_replay_array_has_the_live_interface(tmp_path: Path) -> None:
    gtemp = Replay(write_run(tmp_path / "run.h5"))["gtemp"]
    expected = fields(0)
    assert gtemp.steps == STEPS and len(gtemp) == 4 and gtemp.ended
    assert gtemp.shape == SHAPE and gtemp.dtype == np.float64
    assert gtemp.chunks == ((6, 6), (4, 4))  # the HDF5 chunks
    assert np.array_equal(gtemp[10].compute(), expected[1])
    assert np.array_equal(gtemp[20, 3:7, 1].compute(), expected[2, 3:7, 1])
    assert np.array_equal(gtemp[-1, ...].compute(), expected[3])
    assert np.array_equal(gtemp[10:31:10].compute(), expected[1:])
    assert np.array_equal(gtemp[[0, 30]].compute(), expected[[0, 3]])
    assert np.array_equal(gtemp[...].compute(), expected)
    assert [s for s, _ in gtemp.items()] == STEPS
    assert [s for s, _ in gtemp.items()] == STEPS  # a replay is read again at each call
    assert np.array_equal(np.stack([a.compute() for a in gtemp]), expected)


def test_replay_errors_of_the_time_index_are_the_live_ones(tmp_path: Path) -> None:
    gtemp = Replay(write_run(tmp_path / "run.h5"))["gtemp"]
    with pytest.raises(StepNotAvailableError, match=r"step 5 of 'gtemp' was not saved \(steps"):
        gtemp[5]
    with pytest.raises(EndOfStreamError, match="step 40 is past the end of the saved steps"):
        gtemp[40]
    with pytest.raises(EndOfStreamError, match="holds no saved step"):
        gtemp[1:9]
    with pytest.raises(IndexError, match="too many indices"):
        gtemp[0, 0, 0, 0]


def test_windows_and_zip_over_saved_steps(tmp_path: Path) -> None:
    replay = Replay(write_run(tmp_path / "run.h5"))
    temp, change = fields(0), fields(1)
    windows = [(steps, w.compute()) for steps, w in replay["gtemp"].windows(2)]
    assert [steps for steps, _ in windows] == [[0, 10], [10, 20], [20, 30]]
    assert all(np.array_equal(w, temp[i : i + 2]) for i, (_, w) in enumerate(windows))
    partial = [steps for steps, _ in replay["gtemp"].windows(3, partial=True)]
    assert partial == [[0], [0, 10], [0, 10, 20], [10, 20, 30]]
    assert list(replay["gtemp"].windows(5)) == []
    pairs = list(replay.zip("gtemp", "gdtemp"))
    assert [step for step, _ in pairs] == STEPS
    for i, (_, (t, dt)) in enumerate(pairs):
        assert t is not None and dt is not None
        assert np.array_equal(t.compute(), temp[i]) and np.array_equal(dt.compute(), change[i])
    with pytest.raises(ValueError, match="at least two distinct array names"):
        list(replay.zip("gtemp", "gtemp"))


def test_zip_pairs_arrays_saved_at_different_steps(tmp_path: Path) -> None:
    """how='all' keeps the steps both have, how='any' every step with None for the missing."""
    write_run(tmp_path / "a.h5")
    replay = Replay(tmp_path / "a.h5")
    write_per_step(tmp_path)
    (tmp_path / "data_10.h5").unlink()
    per_step = Replay(tmp_path / "data_{step}.h5")
    from deisa.analysis._zip_steps import zip_steps

    both = [s for s, _ in zip_steps([replay["gtemp"], per_step["gdtemp"]], "all")]
    assert both == [0, 20, 30]
    either = [(s, [a is None for a in arrays]) for s, arrays in
              zip_steps([replay["gtemp"], per_step["gdtemp"]], "any")]  # fmt: skip
    assert either == [(0, [False, False]), (10, [False, True]), (20, [False, False]),
                      (30, [False, False])]  # fmt: skip


def test_nothing_is_read_before_compute(tmp_path: Path) -> None:
    """The arrays handed out read the file when computed: new values written after they were
    built are the values computed."""
    path = write_run(tmp_path / "run.h5")
    gtemp = Replay(path)["gtemp"]
    step, window = gtemp[20], next(gtemp.windows(2))[1]
    with h5py.File(path, "r+") as f:
        f["gtemp"][...] = 7.0
    assert (step.compute() == 7.0).all() and (window.compute() == 7.0).all()


def test_step_numbers_default_to_positions_or_are_given(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run.h5", steps=False)
    assert Replay(path)["gtemp"].steps == [0, 1, 2, 3]
    assert Replay(path, steps=[5, 6, 7, 8])["gtemp"].steps == [5, 6, 7, 8]
    with pytest.raises(ReplayError, match="must be increasing"):
        Replay(path, steps=[3, 1, 2, 4])


def test_rows_never_written_by_a_run_stopped_early_are_left_out(tmp_path: Path) -> None:
    """decl_hdf5 declares the whole time axis: a run stopped after 2 of 4 outputs leaves the
    step dataset's fill value (0) in the last rows."""
    path = write_run(tmp_path / "run.h5")
    with h5py.File(path, "r+") as f:
        f["step"][2:] = 0
    assert Replay(path)["gtemp"].steps == [0, 10]


def test_contiguous_datasets_get_automatic_chunks_or_the_given_ones(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run.h5", chunks=None)
    assert Replay(path)["gtemp"].chunks == ((12,), (8,))
    assert Replay(path, chunks=(4, 8))["gtemp"].chunks == ((4, 4, 4), (8,))


def test_uneven_blocks_come_from_block_start(tmp_path: Path) -> None:
    """A ``block_start`` dataset (each rank's ``local_start``, as configs/heat_both.yml writes
    it) gives the run's blocks, which regular HDF5 chunks cannot when they are uneven: 12 rows
    over 3 ranks and 8 columns over 2, blocks of 5, 4 and 3 rows, 4 columns each."""
    path = write_run(tmp_path / "run.h5")  # HDF5 chunks of (6, 4)
    starts = [[0, 0], [0, 4], [5, 0], [5, 4], [9, 0], [9, 4]]
    with h5py.File(path, "a") as f:
        f.create_dataset("block_start", data=np.array(starts, dtype=np.int32))
    replay = Replay(path)
    assert replay.names == ["gdtemp", "gtemp"]  # not an array of the run
    assert replay["gtemp"].chunks == replay["gdtemp"].chunks == ((5, 4, 3), (4, 4))
    assert np.array_equal(replay["gtemp"][20].compute(), fields(0)[2])
    assert Replay(path, chunks=(6, 8))["gtemp"].chunks == ((6, 6), (8,))  # given ones win
    with h5py.File(path, "a") as f:  # starts that do not fit the array: the file's chunks
        f["block_start"][5] = [12, 4]
    assert Replay(path)["gtemp"].chunks == ((6, 6), (4, 4))


@pytest.mark.parametrize("pattern", ["data_{step}.h5", "data_${step}.h5", "data_*.h5"])
@pytest.mark.parametrize("leading", [False, True], ids=["spatial", "leading-axis"])
def test_one_file_per_step(tmp_path: Path, pattern: str, leading: bool) -> None:
    write_per_step(tmp_path, leading=leading)
    if "{" in pattern:  # no number where the step goes: not a step file of the pattern
        (tmp_path / "data_old.h5").write_bytes(b"")
    replay = Replay(str(tmp_path / pattern))
    gtemp = replay["gtemp"]
    assert gtemp.steps == STEPS and gtemp.shape == SHAPE
    assert np.array_equal(gtemp[...].compute(), fields(0))
    assert [s for s, _ in replay.zip("gtemp", "gdtemp")] == STEPS


def test_a_list_of_per_step_files(tmp_path: Path) -> None:
    write_per_step(tmp_path)
    files = [tmp_path / f"data_{s}.h5" for s in STEPS]
    assert Replay(files)["gtemp"].steps == [0, 1, 2, 3]
    gtemp = Replay(files, steps=STEPS)["gtemp"]
    assert gtemp.steps == STEPS
    assert np.array_equal(gtemp[30].compute(), fields(0)[3])


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nothing\.h5: no such file"):
        Replay(tmp_path / "nothing.h5")
    with pytest.raises(FileNotFoundError, match="no file matches the per-step pattern"):
        Replay(str(tmp_path / "data_{step}.h5"))
    write_per_step(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"data_5\.h5: no such file"):
        Replay([tmp_path / "data_0.h5", tmp_path / "data_5.h5"])


def test_an_unknown_array_lists_those_present(tmp_path: Path) -> None:
    replay = Replay(write_run(tmp_path / "run.h5"))
    with pytest.raises(UnknownArrayError, match=r"no array 'temp' in .*: 'gdtemp', 'gtemp'$"):
        replay["temp"]
    with pytest.raises(KeyError):
        replay["temp"]
    assert replay.names == ["gdtemp", "gtemp"] and "gtemp" in replay


def test_a_dataset_without_time_axis_is_refused(tmp_path: Path) -> None:
    replay = Replay(write_run(tmp_path / "run.h5"))
    with pytest.raises(ReplayError, match=r"'step' .* has no time axis: it has shape \(4,\)"):
        replay["step"]
    with pytest.raises(ReplayError, match=r"'mesh/area' .* no time axis: its first axis has 12"):
        replay["mesh/area"]


def test_per_step_files_that_disagree_are_refused_before_any_read(tmp_path: Path) -> None:
    write_per_step(tmp_path)
    with h5py.File(tmp_path / "data_20.h5", "r+") as f:
        del f["gtemp"]
        f.create_dataset("gtemp", data=np.zeros((6, 8), np.float32))
        del f["gdtemp"]
    replay = Replay(str(tmp_path / "data_{step}.h5"))
    with pytest.raises(
        ReplayError, match=r"datasets of 'gtemp' disagree: .*data_0\.h5:gtemp holds"
    ):
        replay["gtemp"]  # another dtype (another shape is a moving array: test_replay_moving.py)
    with pytest.raises(ReplayError, match=r"data_20\.h5 has no dataset 'gdtemp'"):
        replay["gdtemp"]


def test_a_glob_without_step_numbers_asks_for_them(tmp_path: Path) -> None:
    for name in ("a.h5", "b.h5"):
        with h5py.File(tmp_path / name, "w") as f:
            f.create_dataset("gtemp", data=np.zeros(SHAPE))
    with pytest.raises(ReplayError, match="give steps="):
        Replay(str(tmp_path / "*.h5"))
    assert Replay(str(tmp_path / "*.h5"), steps=[1, 2])["gtemp"].steps == [1, 2]


def test_zarr_store(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(tmp_path / "run.zarr"), mode="w")
    group.create_array("gtemp", shape=(4, *SHAPE), chunks=(1, 6, 4), dtype="f8")[...] = fields(0)
    group.create_array("step", shape=(4,), dtype="i4")[...] = STEPS
    replay = Replay(tmp_path / "run.zarr")
    gtemp = replay["gtemp"]
    assert gtemp.steps == STEPS and gtemp.chunks == ((6, 6), (4, 4))
    assert np.array_equal(gtemp[...].compute(), fields(0))
    assert [steps for steps, _ in gtemp.windows(3)] == [[0, 10, 20], [10, 20, 30]]
    with pytest.raises(UnknownArrayError, match="the arrays there are: 'gtemp'"):
        replay["gdtemp"]


def test_pca_of_a_replay_without_client_is_exact_pca(tmp_path: Path) -> None:
    assert _current_client() is None, "a client left over by another test"
    gtemp = Replay(write_run(tmp_path / "run.h5"))["gtemp"]
    for step, field in gtemp.items():
        model = IncrementalPCA(n_components=3, svd_solver="full").fit(field)
        reference = PCA(n_components=3, svd_solver="full").fit(fields(0)[STEPS.index(step)])
        np.testing.assert_allclose(
            model.explained_variance_, reference.explained_variance_, rtol=1e-10
        )
    assert isinstance(field, da.Array)


@pytest.fixture
def cluster() -> Iterator[Client]:
    """A LocalCluster of two one-thread worker processes, closed after the test."""
    with two_worker_client() as client:
        yield client


def test_split_and_pca_of_a_replay_on_a_cluster(tmp_path: Path, cluster: Client) -> None:
    """The workers read the blocks themselves; split() persists them and partitions them by
    worker, and the PCA reduces them where they are."""
    replay = Replay(write_run(tmp_path / "run.h5"), cluster)
    field = replay["gtemp"][20]
    partitions = split(field, client=cluster, persist=True)
    assert sum(len(p.block_indexes) for p in partitions) == 4  # 2 x 2 chunks
    model = IncrementalPCA(n_components=3, svd_solver="full", client=cluster).fit(field)
    reference = PCA(n_components=3, svd_solver="full").fit(fields(0)[2])
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_, rtol=1e-10)
    assert np.array_equal(replay["gdtemp"][30].compute(), fields(1)[3])  # on the cluster
