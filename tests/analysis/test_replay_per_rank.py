"""deisa.Replay of HDF5 output held in one file per rank (deisa/analysis/_replay_per_rank.py):
a field written as several boxes a rank, each box a dataset with its ``start`` attribute (and
the step's ``shape``), as decl_hdf5 writes them with ``attributes: {start: $box_start}`` or h5py
code does; boxes that move between ranks, a rank with none, a level that covers part of the
domain. Every step bitwise against the numpy truth, its layout the live run's.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from deisa import Replay, ReplayError
from deisa.analysis.moving import MissingRegionError
from deisa.wire.layout import Box, StepLayout

NRANKS = 3
SHAPE = (4, 12)


def field(step: int, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    rows, cols = np.indices(shape)
    return step * 1e6 + rows * 1e3 + cols


def owners(step: int) -> list[list[int]]:
    """Each rank's boxes (columns 2k..2k+2) at ``step``: two a rank, moved to the next rank
    from step 2 on; at step 3 the last rank's go to rank 0 (it holds none)."""
    mine: list[list[int]] = [[] for _ in range(NRANKS)]
    for box in range(2 * NRANKS):
        owner = (box // 2 + (1 if step >= 2 else 0)) % NRANKS
        mine[0 if step == 3 and owner == NRANKS - 1 else owner].append(box)
    return mine


def write_boxes(directory: Path, steps: range, *, shape_attribute: bool = True) -> None:
    for rank in range(NRANKS):
        with h5py.File(directory / f"out_{rank}.h5", "w") as f:
            for step in steps:
                for box in owners(step)[rank]:
                    data = f.create_dataset(
                        f"rho_{step}_{2 * box}", data=field(step)[:, 2 * box :][:, :2]
                    )
                    data.attrs["start"] = np.array([0, 2 * box], np.int32)
                    if shape_attribute:
                        data.attrs["shape"] = np.array(SHAPE, np.int64)


def test_boxes_of_each_rank_are_placed_by_their_start_in_rank_then_box_order(
    tmp_path: Path,
) -> None:
    write_boxes(tmp_path, range(4))
    rho = Replay(str(tmp_path / "out_${rank}.h5"))["rho"]
    assert rho.steps == [0, 1, 2, 3]
    for step in rho.steps:
        got = rho[step]
        assert got.compute().tobytes() == field(step).tobytes(), step
        assert got.chunks == ((4,), (2,) * (2 * NRANKS))
        mine = [boxes for boxes in owners(step) if boxes]  # a rank with none: no parcel
        expected = tuple(Box((0, 2 * b), (4, 2)) for boxes in mine for b in boxes)
        assert rho.layout(step) == StepLayout(SHAPE, expected, tuple(map(len, mine)))
    assert rho.layout(3).parcels == (4, 2)  # rank 0 holds four boxes, the last rank none
    assert [b.start for b in rho.blocks(3)] == [(0, c) for c in (4, 6, 8, 10, 0, 2)]


def test_each_step_is_labelled_and_zipped_as_live(tmp_path: Path) -> None:
    write_boxes(tmp_path, range(4))
    for rank in range(NRANKS):  # particles beside the boxes, joined in rank order
        with h5py.File(tmp_path / f"out_{rank}.h5", "a") as f:
            for step in range(4):
                f.create_dataset(f"x_{step}", data=np.full(rank + step, float(rank)))
    replay = Replay(str(tmp_path / "out_${rank}.h5"), dims={"rho": ["y", "x"]})
    labelled = replay["rho"].to_xarray(3)
    assert labelled.dims == ("y", "x") and int(labelled["step"]) == 3
    assert labelled.values.tobytes() == field(3).tobytes()
    for step, (x, rho) in replay.zip("x", "rho", as_xarray=True):
        assert x.shape == (sum(r + step for r in range(NRANKS)),) and rho.dims == ("y", "x")
        assert int(rho["step"]) == int(x["step"]) == step


def test_without_a_shape_attribute_the_step_is_the_boxes_extent(tmp_path: Path) -> None:
    write_boxes(tmp_path, range(2), shape_attribute=False)
    rho = Replay(str(tmp_path / "out_{rank}.h5"))["rho"]
    assert rho.shape == SHAPE
    assert rho[1].compute().tobytes() == field(1).tobytes()


def test_a_level_over_part_of_the_domain_names_the_region_no_box_holds(tmp_path: Path) -> None:
    """Boxes with the step's shape (8 x 12): the rows 4..8 are held by no rank."""
    with h5py.File(tmp_path / "level_0.h5", "w") as f:
        for k, col in enumerate((0, 6)):
            data = f.create_dataset(
                f"level/step_7/box_{k}", data=field(7, (8, 12))[:4, col:][:, :6]
            )
            data.attrs["start"] = [0, col]
            data.attrs["shape"] = [8, 12]
    with h5py.File(tmp_path / "level_1.h5", "w"):
        pass  # a rank with nothing of the level
    level = Replay(str(tmp_path / "level_{rank}.h5"))["level"]
    assert level.steps == [7] and level.shape_of(7) == (8, 12)
    with pytest.raises(MissingRegionError, match=r"no block holds \[4:8, 0:6\], \[4:8, 6:12\]"):
        level[7]
    filled = level.step(7, fill=np.nan).compute()
    assert filled[:4].tobytes() == field(7, (8, 12))[:4].tobytes()
    assert np.isnan(filled[4:]).all()
    assert sum(float(b.array.sum()) for b in level.blocks(7)) == field(7, (8, 12))[:4].sum()


def test_boxes_that_do_not_say_where_they_go_are_named(tmp_path: Path) -> None:
    def replay(attrs: dict, *, plain: bool = False) -> None:
        with h5py.File(tmp_path / "bad_0.h5", "w") as f:
            data = f.create_dataset("rho_0_0", data=np.zeros((2, 2)))
            data.attrs.update(attrs)
            if plain:
                f.create_dataset("rho_0", data=np.zeros((2, 2)))
            f.create_dataset("x_0", data=np.arange(3.0))
        opened = Replay(str(tmp_path / "bad_{rank}.h5"))
        assert opened["x"][0].compute().tolist() == [0.0, 1.0, 2.0]  # the others read
        opened["rho"]

    with pytest.raises(ReplayError, match=r"bad_0.h5:rho_0_0: its 'start' attribute \[0.5, 1.0\]"):
        replay({"start": [0.5, 1.0]})
    with pytest.raises(
        ReplayError, match=r"'start' attribute \[1\] does not give one integer an axis"
    ):
        replay({"start": [1]})
    with pytest.raises(ReplayError, match=r"'rho' at step 0 mixes boxes and joined datasets"):
        replay({"start": [0, 0]}, plain=True)
    with pytest.raises(ReplayError, match=r"blocks of 'rho' at step 0 .*outside the step's shape"):
        replay({"start": [1, 1], "shape": [2, 2]})
    with h5py.File(tmp_path / "two_0.h5", "w") as f:
        for k, shape in enumerate(([2, 4], [2, 6])):
            data = f.create_dataset(f"rho_0_{k}", data=np.zeros((2, 2)))
            data.attrs.update({"start": [0, 2 * k], "shape": shape})
    with pytest.raises(ReplayError, match=r"give two shapes of the step: \(2, 4\) and \(2, 6\)"):
        Replay(str(tmp_path / "two_{rank}.h5"))["rho"]
