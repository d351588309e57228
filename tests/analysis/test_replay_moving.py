"""deisa.Replay of output whose shapes and blocks change from step to step
(deisa/analysis/_replay_moving.py): ADIOS2 BP4/BP5 written here with the serial ``adios2``
package (``SetShape``/``SetSelection`` at each step, several ``Put``s of one variable a step,
``JoinedDim``, variables first written after step 0), every step bitwise against the numpy
truth it was cut from, and equal, chunks included, to what the live run's
:func:`deisa.analysis.moving.assemble` makes of the same boxes.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest

from deisa import Replay, ReplayError
from deisa.analysis import _replay_bp_io
from deisa.analysis._reading import NoFixedShapeError, StepShapesDifferError
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
        assert x.shape_of(step) == (n,) and got.shape == (n,)
        assert got.compute().tobytes() == truth("x", step, (n,)).tobytes()
        assert got.chunks == (tuple(c for c in PARTICLE_COUNTS[step] if c),)  # as written
        live_step = live(x.layout(step), truth("x", step, (n,)))
        assert got.chunks == live_step.chunks
    assert [s for s, _ in x.items()] == x.steps
    assert np.array_equal(x[1, 60:70].compute(), truth("x", 1, (137,))[60:70])
    rechunked = Replay(moving_bp, chunks=50)["x"][1]  # given chunks win, step by step
    assert rechunked.chunks == ((50, 50, 37),)
    assert rechunked.compute().tobytes() == truth("x", 1, (137,)).tobytes()


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
    assert x.moving and x.ndim == 1
    with pytest.raises(NoFixedShapeError, match=r"'x' changes its shape .*\(100,\) at step 0, "):
        _ = x.shape
    with pytest.raises(NoFixedShapeError, match=r"chunks of 'x' change from step to step"):
        _ = x.chunks
    with pytest.raises(StepShapesDifferError, match=r"steps 0 and 1 of 'x' .* \(\(100,\) and"):
        x[0:2]
    with pytest.raises(StepShapesDifferError):
        next(x.windows(2))
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


def test_each_box_is_read_on_the_cluster(moving_bp: Path) -> None:
    """With a Client, the workers read the boxes themselves (a box reader pickled as the path,
    the name and where the box lies)."""
    from conftest import two_worker_client

    with two_worker_client() as client:
        replay = Replay(moving_bp, client)
        steps = client.compute([x for _, x in replay["x"].items()], sync=True)
        for step, got in enumerate(steps):
            assert got.tobytes() == truth("x", step, (sum(PARTICLE_COUNTS[step]),)).tobytes()
        level = client.compute(replay["rho"][1], sync=True)
        assert level.tobytes() == truth("rho", 1, FIELD).tobytes()


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
    assert blocks[1].array.compute().tobytes() == expected[6:, 6:].tobytes()
    u.fill = -1.0  # every step, as a live array's fill
    assert (u[1].compute()[4:] == -1.0).all() and [s for s, _ in u.items()] == [0, 1]
    with pytest.raises(ValueError, match="must be a scalar"):
        u.step(0, fill=[1.0])


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


# -- written by MPI ranks: blocks of several writers, JoinedDim across ranks, boxes that move --

WRITER_SOURCE = Path(__file__).parent / "bp_moving_writer"
WRITER_BUILD = Path(__file__).resolve().parents[2] / "build" / "test-bp-moving"
# the writer's p (JoinedDim): [step][rank] -> its blocks' counts; x: [step][rank] -> its count
MPI_JOINED = [[[2, 1], [], [3]], [[1], [2, 2], [0]], [[], [], [4]]]
MPI_COUNTS = [[5, 0, 7], [6, 6, 6], [1, 9, 2]]


def build_moving_writer() -> tuple[Path | None, str]:
    """tests/analysis/bp_moving_writer built (again if its source changed), or None and why."""
    binary = WRITER_BUILD / "deisa_test_bp_moving"
    newest = max(p.stat().st_mtime for p in WRITER_SOURCE.iterdir())
    if binary.exists() and binary.stat().st_mtime > newest:
        return binary, "built"
    if shutil.which("cmake") is None:
        return None, "cmake is not installed"
    configure = ["cmake", "-S", str(WRITER_SOURCE), "-B", str(WRITER_BUILD), "-Wno-dev"]
    for cmd in (configure, ["cmake", "--build", str(WRITER_BUILD)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            last = (proc.stdout + proc.stderr).strip().splitlines()[-1:]
            return None, f"the C++ writer does not build against ADIOS2 with MPI: {last}"
    return binary, "built"


def mpi_particles(step: int) -> np.ndarray:
    return np.array(
        [100.0 * step + 10 * rank + k + 0.001 * i
         for rank, blocks in enumerate(MPI_JOINED[step])
         for k, count in enumerate(blocks)
         for i in range(count)]
    )  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
def test_bp_written_by_mpi_ranks_is_the_live_runs_per_step(tmp_path: Path, engine: str) -> None:
    """Three MPI ranks of a C++ code: particles joined across ranks (a rank with none, a
    block of none), an array whose shape changes Put as two blocks a rank, a field whose boxes
    move between ranks at step 2. Every step bitwise; each writer a parcel (BP5 records the
    writer of a block; BP4 does not: one parcel), the joined layout StepLayout.joined's."""
    from conftest import mpirun, test_env

    writer, why = build_moving_writer()
    if writer is None:
        pytest.skip(why)
    out = tmp_path / "out.bp"
    proc = subprocess.run(
        mpirun(3, str(writer), engine, str(out)),
        env=test_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    replay = Replay(out)
    p, x, rho = replay["p"], replay["x"], replay["rho"]
    assert p.steps == x.steps == rho.steps == [0, 1, 2]
    for step in range(3):
        assert p[step].compute().tobytes() == mpi_particles(step).tobytes()
        holding = [[(c,) for c in blocks] for blocks in MPI_JOINED[step] if sum(blocks)]
        if engine == "BP5":
            assert p.layout(step) == StepLayout.joined(0, holding)
        n = sum(MPI_COUNTS[step])
        assert x[step].compute().tobytes() == (1000.0 * step + np.arange(n)).tobytes()
        expected = 1000.0 * step + np.arange(48.0).reshape(6, 8)
        assert rho[step].compute().tobytes() == expected.tobytes()
        assert rho[step].chunks == ((3, 3), (4, 4))
    assert x[0].chunks == ((2, 3, 3, 4),)  # each rank's two blocks; rank 1 has none
    assert x.layout(0).parcels == ((2, 2) if engine == "BP5" else (6,))


def test_a_fixed_array_reads_as_a_moving_one_does(tmp_path: Path) -> None:
    """One shape and the same covering blocks at every step: a plain ReplayArray (one shape,
    one grid, as before), with the moving arrays' blocks(t), step(t) and fill too."""
    boxes = [((0, 0), (2, 5)), ((2, 0), (4, 5))]
    u = Replay(write_boxes(tmp_path / "fixed.bp", "BP5", (6, 5), [boxes, boxes]))["U"]
    assert not u.moving and u.shape == (6, 5) and u.chunks == ((2, 4), (5,))
    assert u.layout(1) is None  # as a live step published plain
    assert [(b.start, b.count) for b in u.blocks(1)] == boxes
    assert u.blocks(1)[1].array.compute().tobytes() == truth("U", 1, (6, 5))[2:].tobytes()
    assert u.step(1, fill=0.0).compute().tobytes() == u[1].compute().tobytes()
