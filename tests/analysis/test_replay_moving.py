"""deisa.Replay of output whose shapes and blocks change from step to step
(deisa/analysis/_replay_moving.py): ADIOS2 BP4/BP5 written here with the serial ``adios2``
package (``SetShape``/``SetSelection`` at each step, several ``Put``s of one variable a step,
``JoinedDim``, variables first written after step 0), every step bitwise against the numpy
truth it was cut from, and equal, chunks included, to what the live run's
:func:`deisa.analysis.moving.assemble` makes of the same boxes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest

from deisa import Replay, ReplayError
from deisa.analysis import _replay_bp_io
from deisa.analysis.moving import MissingRegionError, assemble
from deisa.wire.layout import Box, LayoutError, StepLayout

adios2 = pytest.importorskip("adios2", reason="the adios2 package (pip install adios2) is absent")
bindings = adios2.bindings

ENGINES = ["BP4", "BP5"]
# a particle array: its length at each step, cut into blocks of these counts (one writer)
PARTICLE_COUNTS = [[60, 40], [0, 70, 67], [174], [5, 0]]
# joined 2-D records (n, 3): each step's blocks' row counts
JOINED_COUNTS = [[2, 3], [4], [0, 0], [1, 0, 6]]
FIELD = (8, 10)
# a field as boxes that change at every step (several a writer, cut anyhow; cover the field)
FIELD_BOXES = [
    [((0, 0), (8, 10))],
    [((0, 0), (3, 10)), ((3, 0), (5, 4)), ((3, 4), (5, 6))],
    [((0, 0), (8, 5)), ((0, 5), (2, 5)), ((2, 5), (6, 5))],
    [((4, 0), (4, 10)), ((0, 0), (4, 10))],
]


def truth(name: str, step: int, shape: Sequence[int]) -> np.ndarray:
    seed = sum(map(ord, name)) * 100 + step
    return np.random.default_rng(seed).standard_normal(tuple(shape))


def particle_boxes(step: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    boxes, at = [], 0
    for n in PARTICLE_COUNTS[step]:
        boxes.append(((at,), (n,)))
        at += n
    return boxes


def write_moving(path: Path, engine: str) -> Path:
    """``x``: particles, a new length every step; ``p``: joined records; ``rho``: a field in
    boxes that change; ``late``: defined at step 1, absent at step 2, moving."""
    adios = bindings.ADIOS()
    io = adios.DeclareIO(f"moving-{path.name}")
    io.SetEngine(engine)
    x = io.DefineVariable("x", np.zeros(1), [1], [0], [1], False)
    p = io.DefineVariable("p", np.zeros(1), [adios2.JoinedDim, 3], [], [1, 3], False)
    rho = io.DefineVariable("rho", np.zeros(1), list(FIELD), [0, 0], [1, 1], False)
    late = None
    writer = io.Open(str(path), bindings.Mode.Write)
    for step in range(len(PARTICLE_COUNTS)):
        writer.BeginStep()
        n = sum(PARTICLE_COUNTS[step])
        x.SetShape([n])
        data = truth("x", step, (n,))
        for start, count in particle_boxes(step):
            x.SetSelection([list(start), list(count)])
            writer.Put(x, data[start[0] : start[0] + count[0]].copy(), bindings.Mode.Sync)
        records = truth("p", step, (sum(JOINED_COUNTS[step]), 3))
        at = 0
        for rows in JOINED_COUNTS[step]:
            p.SetSelection([[], [rows, 3]])
            writer.Put(p, records[at : at + rows].copy(), bindings.Mode.Sync)
            at += rows
        field = truth("rho", step, FIELD)
        for start, count in FIELD_BOXES[step]:
            rho.SetSelection([list(start), list(count)])
            box = tuple(slice(s, s + c) for s, c in zip(start, count, strict=True))
            writer.Put(rho, field[box].copy(), bindings.Mode.Sync)
        if step == 1:
            late = io.DefineVariable("late", np.zeros(1), [4], [0], [4], False)
        if late is not None and step != 2:
            late.SetShape([4 + step])
            late.SetSelection([[0], [4 + step]])
            writer.Put(late, truth("late", step, (4 + step,)), bindings.Mode.Sync)
        writer.EndStep()
    writer.Close()
    return path


@pytest.fixture(params=ENGINES)
def moving_bp(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return write_moving(tmp_path / "moving.bp", request.param)


def live(layout: StepLayout, whole: np.ndarray, fill: Any = None) -> da.Array:
    """What the live run makes of ``layout``'s boxes cut from ``whole``: each box one chunk."""
    boxes = [da.from_array(whole[box.slices].copy(), chunks=-1) for box in layout.boxes]
    return assemble(layout, boxes, fill=fill)


def test_a_particle_array_of_changing_length_is_bitwise_each_step(moving_bp: Path) -> None:
    replay = Replay(moving_bp)
    x = replay["x"]
    assert x.steps == [0, 1, 2, 3]
    for step in x.steps:
        n = sum(PARTICLE_COUNTS[step])
        got = x[step]
        assert x.shape_at(step) == (n,) and got.shape == (n,)
        assert got.compute().tobytes() == truth("x", step, (n,)).tobytes()
        assert got.chunks == (tuple(c for c in PARTICLE_COUNTS[step] if c),)  # as written
        live_step = live(x.layout(step), truth("x", step, (n,)))
        assert got.chunks == live_step.chunks
    assert [s for s, _ in x.items()] == x.steps
    assert np.array_equal(x[1, 60:70].compute(), truth("x", 1, (137,))[60:70])


def test_the_layout_is_the_live_runs(moving_bp: Path) -> None:
    """One parcel per writer (one writer here), its boxes in put order, empty ones kept in a
    parcel that holds elements; a joined array's is StepLayout.joined's placement."""
    replay = Replay(moving_bp)
    layout = replay["x"].layout(1)
    assert layout == StepLayout(
        (137,), (Box((0,), (0,)), Box((0,), (70,)), Box((70,), (67,))), (3,)
    )
    p = replay["p"]
    for step, counts in enumerate(JOINED_COUNTS):
        parcels = [[(c, 3) for c in counts]] if any(counts) else []  # none: no element
        assert p.layout(step) == StepLayout.joined(0, parcels, shape=(sum(counts), 3))


def test_joined_records_are_bitwise_and_an_empty_step_is_empty(moving_bp: Path) -> None:
    p = Replay(moving_bp)["p"]
    for step, counts in enumerate(JOINED_COUNTS):
        rows = sum(counts)
        got = p[step].compute()
        assert got.shape == (rows, 3) and got.tobytes() == truth("p", step, (rows, 3)).tobytes()
    assert p[2].shape == (0, 3)


def test_a_field_in_boxes_that_change_is_cut_as_written(moving_bp: Path) -> None:
    rho = Replay(moving_bp)["rho"]
    assert rho.shape == FIELD  # one shape over the steps
    for step in rho.steps:
        got = rho[step]
        assert got.compute().tobytes() == truth("rho", step, FIELD).tobytes()
        assert got.chunks == live(rho.layout(step), truth("rho", step, FIELD)).chunks
    assert rho[1].chunks == ((3, 5), (4, 6))  # a row band over two boxes: cut at column 4
    assert rho[2].chunks == ((2, 6), (5, 5))
    stacked = rho[0:4].compute()  # one shape: the steps stack
    assert np.array_equal(stacked, np.stack([truth("rho", s, FIELD) for s in range(4)]))


def test_a_variable_first_written_after_step_0_and_absent_at_one(moving_bp: Path) -> None:
    late = Replay(moving_bp)["late"]
    assert late.steps == [1, 3]
    for step in late.steps:
        assert late[step].compute().tobytes() == truth("late", step, (4 + step,)).tobytes()


def test_steps_of_different_shapes_say_so_and_are_not_stacked(moving_bp: Path) -> None:
    x = Replay(moving_bp)["x"]
    with pytest.raises(ReplayError, match=r"'x' has no one shape: \(100,\) at step 0, \(137,\)"):
        _ = x.shape
    with pytest.raises(ReplayError, match=r"different shapes, \(100,\) and \(137,\)"):
        x[0:2]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 1, 2]


def test_nothing_is_read_before_compute(moving_bp: Path) -> None:
    _replay_bp_io._READERS.clear()
    replay = Replay(moving_bp)
    total = sum(x.sum() for _, x in replay["x"].items())
    assert not _replay_bp_io._READERS  # metadata only, so far
    expected = sum(truth("x", s, (sum(c),)).sum() for s, c in enumerate(PARTICLE_COUNTS))
    assert total.compute() == pytest.approx(expected, rel=1e-12)
    assert _replay_bp_io._READERS


def write_boxes(path: Path, engine: str, shape: tuple[int, ...], steps: list[list[Any]]) -> Path:
    """``U`` of ``shape``: at each step, the boxes ``(start, count)`` of ``steps[i]`` only."""
    adios = bindings.ADIOS()
    io = adios.DeclareIO(f"boxes-{path.name}")
    io.SetEngine(engine)
    u = io.DefineVariable("U", np.zeros(1), list(shape), [0] * len(shape), [1] * len(shape), False)
    writer = io.Open(str(path), bindings.Mode.Write)
    for step, boxes in enumerate(steps):
        writer.BeginStep()
        whole = truth("U", step, shape)
        for start, count in boxes:
            u.SetSelection([list(start), list(count)])
            box = tuple(slice(s, s + c) for s, c in zip(start, count, strict=True))
            writer.Put(u, whole[box].copy(), bindings.Mode.Sync)
        writer.EndStep()
    writer.Close()
    return path


@pytest.mark.parametrize("engine", ENGINES)
def test_a_level_covering_part_of_the_domain_names_what_is_missing(
    tmp_path: Path, engine: str
) -> None:
    """An AMR level: two boxes of a 12 x 12 domain; each step names the regions no box holds,
    reads with a fill value, and gives its boxes apart."""
    boxes = [((0, 0), (4, 4)), ((6, 6), (6, 6))]
    u = Replay(write_boxes(tmp_path / "level.bp", engine, (12, 12), [boxes, boxes[:1]]))["U"]
    with pytest.raises(MissingRegionError, match=r"step 0 of 'U' in .*level.bp: .* no block holds"):
        u[0]
    got = u.step(0, fill=np.nan).compute()
    expected = np.full((12, 12), np.nan)
    for start, count in boxes:
        region = tuple(slice(s, s + c) for s, c in zip(start, count, strict=True))
        expected[region] = truth("U", 0, (12, 12))[region]
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(
        u.step(0, fill=np.nan).compute(), live(u.layout(0), expected, np.nan).compute(),
        equal_nan=True,
    )  # fmt: skip
    blocks = u.blocks(0)
    assert [(s, c) for s, c, _ in blocks] == boxes
    assert blocks[1][2].compute().tobytes() == expected[6:, 6:].tobytes()


@pytest.mark.parametrize("engine", ENGINES)
def test_overlapping_boxes_are_refused_when_assembled_and_read_apart(
    tmp_path: Path, engine: str
) -> None:
    boxes = [((0, 0), (6, 6)), ((2, 2), (3, 3))]
    u = Replay(write_boxes(tmp_path / "overlap.bp", engine, (6, 6), [boxes]))["U"]
    with pytest.raises(LayoutError, match=r"boxes 0 \[0:6, 0:6\] and 1 \[2:5, 2:5\] .* overlap"):
        u[0]
    assert [c for _, c, _ in u.blocks(0)] == [(6, 6), (3, 3)]


def test_a_step_whose_grid_is_over_the_cap_is_refused_naming_it(tmp_path: Path) -> None:
    path = write_boxes(tmp_path / "small.bp", "BP5", (6,), [[((0,), (6,))], [((0,), (2,))]])
    with pytest.raises(ReplayError, match=r"the 1 blocks of 'U' at step 1 in .* into 2 pieces"):
        Replay(path, max_metadata_bytes=8)["U"]
    assert Replay(path)["U"].step(1, fill=0.0).shape == (6,)  # the control


@pytest.mark.parametrize("engine", ENGINES)
def test_blocks_the_data_files_cannot_hold_are_refused_naming_the_step(
    tmp_path: Path, engine: str
) -> None:
    """A truncated data file: the particles declared at step 0 are refused at replay[name],
    before anything is read or sized from them."""
    counts = [[1000], [3000]]
    steps = [[((0,), (c[0],))] for c in counts]
    path = write_boxes(tmp_path / "cut.bp", engine, (4000,), steps)
    Replay(path)["U"]  # the control: whole, it is read
    data = path / "data.0"
    data.write_bytes(data.read_bytes()[:4000])
    with pytest.raises(ReplayError, match=r"'U' at step 0 in .*cut.bp hold 8000 bytes, more than"):
        Replay(path)["U"]
