"""deisa.Replay of ADIOS2 BP4/BP5 output (deisa/analysis/_replay_bp.py).

The files are written here with the serial ``adios2`` package, as several writers would: each
block a ``Put`` of its own start and count (a ragged 2-D decomposition, where the row bands are
cut at different columns), a single value per step. Every step is compared bitwise with the
numpy field it was cut from, and with a Replay of the same data saved to HDF5.
"""

from __future__ import annotations

import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from conftest import drop_reader_profile, two_worker_client

from deisa import EndOfStreamError, Replay, StepNotAvailableError
from deisa.analysis import _replay_bp_io
from deisa.analysis.moving import MissingRegionError
from deisa.analysis.replay import UnknownArrayError
from deisa.wire.layout import LayoutError

adios2 = pytest.importorskip("adios2", reason="the adios2 package (pip install adios2) is absent")
bindings = adios2.bindings

ENGINES = ["BP4", "BP5"]
SHAPE = (10, 7)
STEPS = 4
# (start, count) of each writer's block: rows 0-3 cut at column 3, rows 4-9 at columns 2 and 5
RAGGED = [((0, 0), (4, 3)), ((0, 3), (4, 4)), ((4, 0), (6, 2)), ((4, 2), (6, 3)), ((4, 5), (6, 2))]
GRID = [((0, 0), (4, 3)), ((0, 3), (4, 4)), ((4, 0), (6, 3)), ((4, 3), (6, 4))]


def field(step: int, dtype: Any = np.float64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(1000 * seed + step)
    return (rng.standard_normal(SHAPE) * 100).astype(dtype)


def write_bp(
    path: Path,
    engine: str,
    arrays: dict[str, tuple[Any, list[Any]]],
    *,
    every: dict[str, int] | None = None,
    shapes: Mapping[int, tuple[int, ...]] | None = None,
) -> Path:
    """``arrays``: name -> (dtype, blocks); each step Puts every block of every array (those
    of ``every[name]``-th steps only), then the single values ``step`` and ``time``."""
    adios = bindings.ADIOS()
    io = adios.DeclareIO(f"write-{path.name}")
    io.SetEngine(engine)
    variables = {
        name: io.DefineVariable(name, np.zeros(1, dtype), list(SHAPE), [0, 0], [1, 1], False)
        for name, (dtype, _) in arrays.items()
    }
    step_value = io.DefineVariable("step", np.zeros(1, np.int32))
    time_value = io.DefineVariable("time", np.zeros(1, np.float64))
    label = io.DefineVariable("label", "text")
    writer = io.Open(str(path), bindings.Mode.Write)
    for step in range(STEPS):
        writer.BeginStep()
        for seed, (name, (dtype, blocks)) in enumerate(arrays.items()):
            if step % (every or {}).get(name, 1):
                continue
            if shapes and step in shapes:
                variables[name].SetShape(list(shapes[step]))
            data = field(step, dtype, seed)
            for start, count in blocks:
                variables[name].SetSelection([list(start), list(count)])
                box = tuple(slice(s, s + c) for s, c in zip(start, count, strict=True))
                writer.Put(variables[name], np.ascontiguousarray(data[box]), bindings.Mode.Sync)
        writer.Put(step_value, np.array([step], np.int32), bindings.Mode.Sync)
        writer.Put(time_value, np.array([0.25 * step]), bindings.Mode.Sync)
        writer.Put(label, f"step {step}")
        writer.EndStep()
    writer.Close()
    return path


def two_arrays(path: Path, engine: str) -> Path:
    return write_bp(path, engine, {"U": (np.float64, RAGGED), "V": (np.float32, GRID)})


@pytest.mark.parametrize("engine", ENGINES)
def test_bp_steps_are_bitwise_the_written_fields(tmp_path: Path, engine: str) -> None:
    replay = Replay(two_arrays(tmp_path / "out.bp", engine))
    assert replay.names == ["U", "V", "step", "time"]  # the string value left out
    u, v = replay["U"], replay["V"]
    assert u.steps == v.steps == list(range(STEPS)) and len(u) == STEPS
    assert (u.shape, u.dtype, v.dtype) == (SHAPE, np.float64, np.float32)
    for step in range(STEPS):
        got = u[step].compute()
        assert got.dtype == np.float64 and got.tobytes() == field(step).tobytes()
        assert v[step].compute().tobytes() == field(step, np.float32, 1).tobytes()
    assert np.array_equal(u[1:3, 2:8, 3].compute(), np.stack([field(1), field(2)])[:, 2:8, 3])


@pytest.mark.parametrize("engine", ENGINES)
def test_bp_chunks_are_the_writers_blocks(tmp_path: Path, engine: str) -> None:
    replay = Replay(two_arrays(tmp_path / "out.bp", engine))
    assert replay["V"].chunks == ((4, 6), (3, 4))  # a grid: exactly the blocks
    assert replay["U"].chunks == ((4, 6), (2, 1, 2, 2))  # ragged: each chunk in one block
    assert replay["U"][0].chunks == replay["U"].chunks
    assert Replay(tmp_path / "out.bp", chunks=(5, 7))["U"].chunks == ((5, 5), (7,))


@pytest.mark.parametrize("engine", ENGINES)
def test_bp_replay_leaves_no_profile_in_tmp(tmp_path: Path, engine: str) -> None:
    """ADIOS2's BP5 reader writes ``/tmp/<file name>_<pid>_profiling.json`` (0644, whatever
    TMPDIR says) when it closes, unless its io sets ``Profile`` ``Off``: a Replay, its scan and
    its block readers, leaves nothing outside the file it reads."""
    name = f"replay-{uuid.uuid4().hex}.bp"
    replay = Replay(two_arrays(tmp_path / name, engine))
    assert replay["U"][STEPS - 1].compute().tobytes() == field(STEPS - 1).tobytes()
    for key in [key for key in list(_replay_bp_io._READERS) if key[0].endswith(name)]:
        _replay_bp_io._forget(key)  # the block reader closed, as when it is evicted
    tmps = {Path("/tmp"), Path(tempfile.gettempdir())}
    assert [p for tmp in tmps for p in tmp.glob(f"{name}_*_profiling.json")] == []


def test_bp_and_hdf5_replays_give_the_same_steps(tmp_path: Path) -> None:
    bp = Replay(two_arrays(tmp_path / "out.bp", "BP5"))
    with h5py.File(tmp_path / "out.h5", "w") as f:
        f.create_dataset("U", data=np.stack([field(s) for s in range(STEPS)]))
        f.create_dataset("V", data=np.stack([field(s, np.float32, 1) for s in range(STEPS)]))
    h5 = Replay(tmp_path / "out.h5")
    assert [n for n in bp.names if n in "UV"] == h5.names
    for name in h5.names:
        assert bp[name].steps == h5[name].steps
        for (s, a), (t, b) in zip(bp[name].items(), h5[name].items(), strict=True):
            assert s == t and a.compute().tobytes() == b.compute().tobytes()
        windows = [(s, w.compute()) for s, w in bp[name].windows(2)]
        expected = [(s, w.compute()) for s, w in h5[name].windows(2)]
        assert [s for s, _ in windows] == [s for s, _ in expected] == [[0, 1], [1, 2], [2, 3]]
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(windows, expected, strict=True))
    pairs = [
        (s, u.compute(), v.compute())
        for s, (u, v) in bp.zip("U", "V")
        if u is not None and v is not None
    ]
    assert [s for s, _, _ in pairs] == list(range(STEPS))
    assert all(np.array_equal(v, field(s, np.float32, 1)) for s, _, v in pairs)


@pytest.mark.parametrize("engine", ENGINES)
def test_bp_single_values_are_one_element_arrays_as_live(
    tmp_path: Path, engine: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As the deisa engine publishes them (docs/adios2.md): ``replay["step"][t].compute()[0]``."""
    with caplog.at_level("INFO", logger="deisa.analysis"):
        replay = Replay(two_arrays(tmp_path / "out.bp", engine))
    assert "'label' (a single value of type string) left out" in caplog.text
    step, time = replay["step"], replay["time"]
    assert step.steps == time.steps == list(range(STEPS))
    assert (step.shape, step.dtype, time.dtype, step.chunks) == (
        (1,),
        np.int32,
        np.float64,
        ((1,),),
    )
    for t in range(STEPS):
        assert step[t].compute()[0] == t and time[t].compute().tolist() == [0.25 * t]
    pairs = [
        (t, u.compute(), s.compute())
        for t, (u, s) in replay.zip("U", "step")
        if u is not None and s is not None
    ]
    assert [(t, s.tolist()) for t, _, s in pairs] == [(t, [t]) for t in range(STEPS)]
    assert all(np.array_equal(u, field(t)) for t, u, _ in pairs)
    with pytest.raises(EndOfStreamError, match="step 9 is past the end"):
        step[9]
    numbered = Replay(tmp_path / "out.bp", steps=[0, 10, 20, 30])
    assert numbered["U"].steps == numbered["step"].steps == [0, 10, 20, 30]
    assert numbered["step"][20].compute()[0] == 2
    assert np.array_equal(numbered["U"][30].compute(), field(3))


@pytest.mark.parametrize("engine", ENGINES)
def test_bp_array_written_every_other_step_keeps_its_step_numbers(
    tmp_path: Path, engine: str
) -> None:
    path = write_bp(
        tmp_path / "out.bp", engine, {"U": (np.float64, GRID), "W": (np.int32, RAGGED)},
        every={"W": 2},
    )  # fmt: skip
    replay = Replay(path)
    assert replay["W"].steps == [0, 2] and replay["U"].steps == [0, 1, 2, 3]
    assert np.array_equal(replay["W"][2].compute(), field(2, np.int32, 1))
    with pytest.raises(StepNotAvailableError, match="step 1 of 'W' was not saved"):
        replay["W"][1]
    assert [s for s, _ in replay.zip("U", "W")] == [0, 2]


def test_bp_is_lazy_and_computes_on_a_cluster(tmp_path: Path) -> None:
    path = two_arrays(tmp_path / "out.bp", "BP4")
    _replay_bp_io._READERS.clear()
    replay = Replay(path)
    total = sum(u.sum() for _, u in replay["U"].items())
    assert not _replay_bp_io._READERS  # metadata only, so far
    expected = sum(field(s).sum() for s in range(STEPS))
    assert total.compute() == pytest.approx(expected, rel=1e-12)
    assert _replay_bp_io._READERS
    with two_worker_client() as client:
        on_cluster = Replay(path, client)
        steps = client.compute([u for _, u in on_cluster["U"].items()], sync=True)
        assert all(a.tobytes() == field(s).tobytes() for s, a in enumerate(steps))


def test_bp_steps_that_are_not_one_grid_are_assembled_as_live(tmp_path: Path) -> None:
    """Blocks leaving holes, overlapping, or a shape that grows: each step is its own layout
    (tests/analysis/test_replay_moving.py), whose missing regions and overlaps are named when
    the step is assembled, as on a live stream."""
    holes = write_bp(tmp_path / "holes.bp", "BP5", {"U": (np.float64, RAGGED[:-1])})
    with pytest.raises(MissingRegionError, match=r"step 0 of 'U' .* no block holds \[4:10, 5:7\]"):
        Replay(holes)["U"][0]
    filled = Replay(holes)["U"].step(0, fill=0.0).compute()
    assert np.array_equal(filled[:, :5], field(0)[:, :5]) and not filled[4:, 5:].any()
    overlap = [((0, 0), (10, 7)), ((2, 2), (3, 3))]
    overlapping = write_bp(tmp_path / "overlap.bp", "BP4", {"U": (np.float64, overlap)})
    with pytest.raises(LayoutError, match="overlap"):
        Replay(overlapping)["U"][0]
    shapes = {2: (10, 8)}
    whole = [((0, 0), (10, 7))]
    grown = write_bp(tmp_path / "grown.bp", "BP5", {"U": (np.float64, whole)}, shapes=shapes)
    u = Replay(grown)["U"]
    assert u[1].compute().tobytes() == field(1).tobytes() and u.shape_of(2) == (10, 8)
    with pytest.raises(MissingRegionError, match=r"step 2 of 'U' .* no block holds \[0:10, 7:8\]"):
        u[2]
    with pytest.raises(UnknownArrayError, match=r"no array 'X' in .*grown.bp; the arrays there"):
        Replay(grown)["X"]


def test_bp_leaves_local_arrays_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    adios = bindings.ADIOS()
    io = adios.DeclareIO("local")
    io.SetEngine("BP5")
    local = io.DefineVariable("particles", np.zeros(1), [], [], [5], False)
    glob = io.DefineVariable("U", np.zeros(1), [3], [0], [3], False)
    writer = io.Open(str(tmp_path / "local.bp"), bindings.Mode.Write)
    writer.BeginStep()
    writer.Put(local, np.arange(5.0), bindings.Mode.Sync)
    writer.Put(glob, np.arange(3.0), bindings.Mode.Sync)
    writer.EndStep()
    writer.Close()
    with caplog.at_level("INFO", logger="deisa.analysis"):
        replay = Replay(tmp_path / "local.bp")
    assert replay.names == ["U"] and "'particles' (LocalArray) left out" in caplog.text
    assert np.array_equal(replay["U"][0].compute(), np.arange(3.0))
    # asked for: it is there, and the message says what it is, not only "no array"
    match = r"no array 'particles' in .*local.bp \(LocalArray\): not a global array"
    with pytest.raises(UnknownArrayError, match=match):
        replay["particles"]


@pytest.mark.parametrize("engine", ENGINES)
def test_bp_written_by_mpi_ranks_replays_their_blocks(tmp_path: Path, engine: str) -> None:
    """Three MPI ranks of a C++ code (bench/adios2's writer, ADIOS2 with MPI) each Put a row;
    the Replay's chunks are the ranks' rows, every step bitwise what they wrote."""
    from conftest import mpirun, test_env

    from bench.adios2_endstep import build_writer

    writer, why = build_writer()
    if writer is None:
        pytest.skip(why)
    config = tmp_path / "config.xml"
    config.write_text(f'<adios-config><io name="Out"><engine type="{engine}"/></io></adios-config>')
    cmd = mpirun(3, str(writer), str(config), "Out", str(tmp_path / "out.bp"), "1", "3")
    proc = subprocess.run(cmd, env=test_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    block = Replay(tmp_path / "out.bp")["block"]
    n = 2**20 // 8
    assert block.steps == [0, 1, 2] and block.shape == (3, n)
    assert block.chunks == ((1, 1, 1), (n,))
    for step in block.steps:
        expected = np.arange(3.0)[:, None] + 1e-9 * np.arange(n, dtype=np.float64)
        expected[:, 0] = step  # each step marks its first element
        assert block[step].compute().tobytes() == expected.tobytes()


# -- attributes (issue 57) ---------------------------------------------------------------------


def write_with_attributes(path: Path, openpmd: bool) -> dict[str, str]:
    """Two steps of ``T`` (or an openPMD-named mesh component and a scalar record) with a
    global string, a global array, a variable's own number and, from step 1, a new global
    attribute: the ADIOS2 names of the arrays, by the names Replay gives them."""
    adios = bindings.ADIOS()
    io = adios.DeclareIO(f"attrs-{path.name}")
    io.SetEngine("BP5")
    names = {"E/x": "/data/meshes/E/x", "rho": "/data/meshes/rho"} if openpmd else {"T": "T"}
    variables = {
        raw: io.DefineVariable(raw, np.zeros(1), [4], [0], [4], False) for raw in names.values()
    }
    io.DefineAttribute("author", "deisa tests")
    io.DefineAttribute("grid", np.array([0.5, 0.25, 0.125]))
    if openpmd:
        io.DefineAttribute("/openPMD", "1.1.0")
        io.DefineAttribute("/basePath", "/data/")
        io.DefineAttribute("/meshesPath", "meshes/")
        io.DefineAttribute("/data/meshes/E/unitDimension", [1.0, 1.0, -3.0, -1.0, 0.0, 0.0, 0.0])
        io.DefineAttribute("/data/meshes/E/x/unitSI", np.array([2.0]))
        io.DefineAttribute("/data/meshes/E/y/unitSI", np.array([3.0]))  # not E/x's
        io.DefineAttribute("/data/meshes/rho/unitSI", np.array([4.0]))
    else:
        io.DefineAttribute("unitSI", np.array([2.0]), "T", "/")
        io.DefineAttribute("labels", ["x"], "T", "/")
    engine = io.Open(str(path), bindings.Mode.Write)
    for step in range(2):
        engine.BeginStep()
        for variable in variables.values():
            engine.Put(variable, np.arange(4.0) + step, bindings.Mode.Sync)
        if step == 1:
            io.DefineAttribute("/data/time" if openpmd else "time", np.array([0.5], np.float32))
        engine.EndStep()
    engine.Close()
    return names


@pytest.mark.parametrize("openpmd", [False, True], ids=["plain", "openpmd"])
def test_bp_attributes_are_each_arrays_per_step_as_adios2_reads_them(
    tmp_path: Path, openpmd: bool
) -> None:
    path = tmp_path / "attrs.bp"
    names = write_with_attributes(path, openpmd)
    # what the adios2 bindings read, step by step, by ADIOS2's names
    read: list[dict[str, Any]] = []
    with adios2.Stream(str(path), "r") as stream:
        for _ in stream.steps():
            step_attrs = {}
            for name in stream.available_attributes():
                value = stream.read_attribute(name)
                step_attrs[name] = value if isinstance(value, (str, list)) else value.tolist()
            read.append(step_attrs)
    drop_reader_profile(path)
    replay = Replay(str(path))
    assert replay.names == sorted(names)
    for name, raw in names.items():
        own = raw.rsplit("/", 1)[0] if openpmd else raw
        for step in range(2):
            got = replay[name].attrs_of(step)
            # each attribute of the array, under its own name, as the bindings read it
            for key, value in got.items():
                candidates = [n for n in read[step] if n.rsplit("/", 1)[-1] == key.split("/")[-1]]
                assert any(read[step][n] == value for n in candidates), (name, key, value)
        latest = replay[name].attrs
        assert latest["author"] == "deisa tests" and latest["grid"] == [0.5, 0.25, 0.125]
        assert "time" not in replay[name].attrs_of(0)
        assert latest["time"] == [0.5] and type(latest["time"][0]) is float  # float32, exactly
        assert replay[name]._attr_changes[1] == {"time": [0.5]}  # step 1: only what changed
        assert own  # the record's path
    if openpmd:
        assert replay["E/x"].attrs["unitSI"] == [2.0]  # its own, not E/y's
        assert replay["rho"].attrs["unitSI"] == [4.0]
        assert replay["E/x"].attrs["unitDimension"] == [1.0, 1.0, -3.0, -1.0, 0.0, 0.0, 0.0]
        assert replay["E/x"].attrs["openPMD"] == "1.1.0"
        with pytest.raises(
            UnknownArrayError, match=r"is the openPMD record 'E/x'.*replay\['E/x'\]"
        ):
            replay["/data/meshes/E/x"]
        np.testing.assert_array_equal(replay["E/x"][1].compute(), np.arange(4.0) + 1)
    else:
        assert replay["T"].attrs["unitSI"] == [2.0] and replay["T"].attrs["labels"] == ["x"]
