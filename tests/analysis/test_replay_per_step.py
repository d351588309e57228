"""deisa.Replay of HDF5 output held as one dataset per step (deisa/analysis/_replay_per_step.py):
datasets named by step in one file (``x/step_0003``, ``x_0003``) or one file per step, whose
sizes change from step to step (particles), with each step's blocks from its ``block_start``
rows. Written here with h5py as decl_hdf5 or h5py code writes them; every step bitwise against
the numpy truth, and equal, chunks included, to what the live run's
:func:`deisa.analysis.moving.assemble` makes of the same blocks.
"""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import h5py
import numpy as np
import pytest

from deisa import Replay, ReplayError
from deisa.analysis._reading import StepShapesDifferError
from deisa.analysis.moving import assemble
from deisa.wire.layout import StepLayout

# each rank's particles at each step (a rank with none at steps 1 and 3)
COUNTS = {0: [30, 25, 20], 1: [40, 0, 9], 2: [12, 13, 14], 3: [50, 1, 0]}
STEPS = sorted(COUNTS)


def particles(step: int) -> np.ndarray:
    return np.random.default_rng(step).standard_normal(sum(COUNTS[step]))


def starts(step: int) -> np.ndarray:
    return np.cumsum([0, *COUNTS[step][:-1]]).astype(np.int64)


def live(layout: StepLayout, whole: np.ndarray) -> da.Array:
    return assemble(
        layout, [da.from_array(whole[b.slices].copy(), chunks=-1) for b in layout.boxes]
    )


def written(counts: list[int]) -> tuple[int, ...]:
    return tuple(c for c in counts if c)


@pytest.mark.parametrize("naming", ["x/step_{:04d}", "x_{:04d}", "x/{}", "x_step_{}"])
def test_per_step_datasets_of_particles_are_bitwise_and_chunked_by_rank(
    tmp_path: Path, naming: str
) -> None:
    path = tmp_path / "particles.h5"
    with h5py.File(path, "w") as f:
        for step in STEPS:
            f.create_dataset(naming.format(step), data=particles(step))
            f.create_dataset(naming.replace("x", "block_start").format(step), data=starts(step))
    replay = Replay(path)
    assert replay.names == ["x"]
    x = replay["x"]
    assert x.steps == STEPS
    for step in STEPS:
        got = x[step]
        assert x.shape_of(step) == got.shape == (sum(COUNTS[step]),)
        assert got.compute().tobytes() == particles(step).tobytes()
        assert got.chunks == (written(COUNTS[step]),)  # a rank with none: no block
        assert got.chunks == live(x.layout(step), particles(step)).chunks
    with pytest.raises(StepShapesDifferError, match=r"different shapes \(\(75,\) and \(49,\)\)"):
        x[0:2]


def test_one_file_per_step_of_changing_size(tmp_path: Path) -> None:
    """A file a step (decl_hdf5's ``data_${step}.h5``), each with its particles of shape
    (1, n) (a leading axis of one) and its ranks' starts."""
    for step in STEPS:
        with h5py.File(tmp_path / f"data_{step}.h5", "w") as f:
            f.create_dataset("x", data=particles(step)[None, :])
            f.create_dataset("block_start", data=starts(step)[:, None])
    x = Replay(str(tmp_path / "data_${step}.h5"))["x"]
    assert x.steps == STEPS
    for step, array in x.items():
        assert array.shape == (sum(COUNTS[step]),)
        assert array.compute().tobytes() == particles(step).tobytes()
        assert array.chunks == (written(COUNTS[step]),)


def test_a_field_refined_from_step_to_step_has_the_files_chunks(tmp_path: Path) -> None:
    path = tmp_path / "field.h5"
    shapes = {0: (8, 8), 1: (16, 16), 2: (16, 16)}
    fields = {s: np.arange(np.prod(n), dtype=np.float32).reshape(n) + s for s, n in shapes.items()}
    with h5py.File(path, "w") as f:
        for step, data in fields.items():
            f.create_dataset(f"rho_{step}", data=data, chunks=(4, 8))
        f.create_dataset("gtemp", data=np.zeros((3, 5, 5)))  # a time-axis array beside them
    replay = Replay(path)
    assert replay.names == ["gtemp", "rho"]
    rho = replay["rho"]
    assert rho[1].chunks == ((4, 4, 4, 4), (8, 8)) and rho[0].chunks == ((4, 4), (8,))
    assert all(rho[s].compute().tobytes() == d.tobytes() for s, d in fields.items())
    assert [s for s, _ in replay.zip("rho", "gtemp", how="any")] == [0, 1, 2]
    assert Replay(path, chunks=(8, 16))["rho"][1].chunks == ((8, 8), (16,))


def test_per_step_datasets_of_one_shape_are_a_plain_array(tmp_path: Path) -> None:
    path = tmp_path / "same.h5"
    with h5py.File(path, "w") as f:
        for step in (0, 5, 10):
            f.create_dataset(f"u/step_{step}", data=np.full((3, 4), float(step)))
    u = Replay(path)["u"]
    assert u.steps == [0, 5, 10] and u.shape == (3, 4)
    assert np.array_equal(u[0:11].compute()[:, 0, 0], [0.0, 5.0, 10.0])  # they stack
    assert Replay(path, steps=[1, 2, 3])["u"].steps == [1, 2, 3]
    with pytest.raises(ReplayError, match=r"steps= gives 2 step numbers for 3 datasets of 'u'"):
        Replay(path, steps=[1, 2])["u"]


def test_per_step_datasets_of_another_dtype_are_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x_0", data=np.zeros(4))
        f.create_dataset("x_1", data=np.zeros(5, np.int32))
    with pytest.raises(ReplayError, match=r"datasets of 'x' disagree: .*:x_0 holds \(4,\) float64"):
        Replay(path)["x"]


def test_one_file_per_rank_joins_the_ranks_particles_in_rank_order(tmp_path: Path) -> None:
    """decl_hdf5 with a file a rank (``particles_${rank}.h5``, ``x_$step`` where the rank has
    particles, as plugin/pdi/tests/particles.c's run writes them): each step is the ranks'
    particles one after another in rank order, a rank with none holding no block, the layout
    StepLayout.joined's (the live run's of a joined array)."""
    for rank in range(3):
        with h5py.File(tmp_path / f"particles_{rank}.h5", "w") as f:
            for step in STEPS:
                n = COUNTS[step][rank]
                if n or step == 0:  # an empty dataset, or none at all: nothing of this rank
                    lo = int(starts(step)[rank])
                    f.create_dataset(f"x_{step}", data=particles(step)[lo : lo + n])
                    f.create_dataset(f"rec_{step}", data=np.ones((n, 2), np.int32) * rank)
    replay = Replay(str(tmp_path / "particles_${rank}.h5"))
    assert replay.names == ["rec", "x"]
    x = replay["x"]
    assert x.steps == STEPS and x.moving
    for step in STEPS:
        got = x[step]
        assert got.compute().tobytes() == particles(step).tobytes()
        assert got.chunks == (written(COUNTS[step]),)
        holding = [[(c,)] for c in COUNTS[step] if c]
        assert x.layout(step) == StepLayout.joined(0, holding)
    rec = replay["rec"][1].compute()
    assert rec.shape == (49, 2) and rec[:, 0].tolist() == [0] * 40 + [2] * 9
    with h5py.File(tmp_path / "particles_2.h5", "a") as f:
        f.create_dataset("x_9", data=np.zeros((2, 2)))
    with pytest.raises(ReplayError, match=r"datasets of 'x' at step 9 do not join along their"):
        Replay(str(tmp_path / "particles_{rank}.h5"))["x"]


def test_a_per_rank_pattern_names_what_it_does_not_take(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no file matches the per-rank pattern"):
        Replay(str(tmp_path / "none_{rank}.h5"))
    with pytest.raises(ReplayError, match=r"one file per rank has no \{step\} field"):
        Replay(str(tmp_path / "data_{step}_{rank}.h5"))
