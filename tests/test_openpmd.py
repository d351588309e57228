"""An openPMD-api code (the I/O layer of WarpX and PIConGPU) with real openPMD-api, real ADIOS2
and real processes (docs/openpmd.md).

The project's own openPMD-api MPI writer (tests/adios2/openpmd_writer.cxx: meshes E and B, x, y
and z, two chunks per rank as AMReX boxes give them; a species ``electrons`` whose count changes
every iteration, one rank with none at iteration 1; the variable-based encoding, one ADIOS2 step
per iteration) is built by the project's CMake where openPMD-api is found, run on 4 ranks:

- with BP5 through its openPMD JSON configuration, the file read back with the ``adios2`` wheel
  and compared bitwise with what the writer computes (the same formulas, in numpy);
- with only its configuration changed to the deisa engine, under ``deisa-run`` (a real dask
  scheduler and workers), every mesh and particle record of every iteration compared bitwise
  with the BP5 output by the analytics: openPMD-api's own parameters are ignored at Open, the
  meshes arrive in the ranks' two chunks, the particles in the ranks' counts (the engine's data
  that moves, issue 56); and the meshes alone written as one chunk per rank (a fixed array).

Every test skips, saying why, where openPMD-api >= 0.17 with MPI and ADIOS2 (or ADIOS2 >= 2.12
with MPI, or PDI for the project's build) is not installed; where openPMD-api is, a skipped
test here fails the run (tests/conftest.py, ``DEISA_ALLOW_OPENPMD_SKIP=1`` allows it).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, deisa_run, drop_reader_profile, exclusive, mpirun, test_env
from test_adios2 import adios2_build  # noqa: F401  (the fixture: the project's ADIOS2 build)

from deisa.doctor.openpmd import check_openpmd, openpmd_config_file

pytestmark = pytest.mark.openpmd

RANKS = 4
ITERATIONS = 4
WRITER = "deisa_openpmd_writer"

BP5 = {"adios2": {"engine": {"type": "bp5"}}, "iteration_encoding": "variable_based"}
DEISA = {
    "adios2": {
        "engine": {
            "type": "plugin",
            "pretend_engine": "sst",
            "parameters": {"PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine"},
        }
    },
    "iteration_encoding": "variable_based",
}  # docs/openpmd.md: what a user changes, nothing else

# the writer's layout (tests/adios2/openpmd_writer.cxx)
ROWS = (3, 5)
NZ = 6
MESHES = [f"/data/meshes/{field}/{axis}" for field in "EB" for axis in "xyz"]
SPECIES = "/data/particles/electrons"
PARTICLES = [
    *(f"{SPECIES}/{record}/{axis}" for record in ("position", "momentum") for axis in "xyz"),
    f"{SPECIES}/weighting",
    f"{SPECIES}/id",
]

CHECKER = r"""
import contextlib
import os
import sys

import adios2
import numpy as np

from deisa import Adapter, Replay
from deisa.wire.attributes import openpmd_record

reference, iterations = sys.argv[1], int(sys.argv[2])
expected, attributes = [], []
with adios2.Stream(reference, "r") as stream:
    for _ in stream.steps():
        expected.append({name: stream.read(name) for name in stream.available_variables()})
        found = {}
        for name in stream.available_attributes():
            value = stream.read_attribute(name)
            found[name] = value if isinstance(value, (str, list)) else np.asarray(value).tolist()
        attributes.append(found)
with contextlib.suppress(FileNotFoundError):  # ADIOS2's BP5 reader leaves its profile in /tmp
    os.remove(f"/tmp/{os.path.basename(reference)}_{os.getpid():x}_profiling.json")
assert len(expected) == iterations, len(expected)
raws = sys.argv[3].split(",") if len(sys.argv) > 3 else sorted(expected[0])
record = {raw: openpmd_record(raw) for raw in raws}  # /data/meshes/E/x -> E/x
names = [record[raw] for raw in raws]
OTHER_RUN = ("date", "particlesPath")


def openpmd_attributes(raw, it):
    # the openPMD hierarchy's attributes of a record component, the nearest level winning: the
    # series' (/openPMD...), the iteration's (/data/time...), the record's and the component's
    levels = ["", "/data", raw.rsplit("/", 1)[0], raw]
    if raw.endswith(("/weighting", "/id")):  # a scalar record: the record is the component
        levels = levels[:2] + [raw]
    found = {}
    for level in levels:
        for name, value in attributes[it].items():
            parent, _, key = name.rpartition("/")
            if parent == level and not name.startswith("__openPMD"):
                found[key] = value
    return found


replay = Replay(reference)
assert set(names) <= set(replay.names), replay.names  # the BP5 output's records, renamed
with Adapter.from_env() as adapter:
    for it in range(iterations):
        chunks = {}
        for raw, name in zip(raws, names):
            array = adapter[name]
            labelled = array.to_xarray(it)  # the xarray view: units, coordinates
            live = labelled.data
            got = live.compute()
            want = expected[it][raw]
            assert got.dtype == want.dtype and got.shape == want.shape, (name, it, got, want)
            assert got.tobytes() == want.tobytes(), (name, it)
            chunks[name] = live.chunks
            want_attrs = openpmd_attributes(raw, it)
            assert replay[name].attrs_of(it) == want_attrs, (name, it, replay[name].attrs_of(it))
            # the live run is another run of the writer: its date differs, and without its
            # species (--meshes-only) it writes no particlesPath
            live_attrs = {k: v for k, v in array.attrs_of(it).items() if k not in OTHER_RUN}
            want_attrs = {k: v for k, v in want_attrs.items() if k not in OTHER_RUN}
            assert live_attrs == want_attrs, (name, it, live_attrs, want_attrs)
            if name in ("E/x", "B/z"):  # a mesh: its axes, units and grid (a moving window)
                assert labelled.dims == ("x", "y", "z"), labelled.dims
                units = "m kg s^-3 A^-1" if name == "E/x" else "kg s^-2 A^-1"
                assert labelled.attrs["units"] == units, labelled.attrs
                x = -2.0 + 0.25 * it + (np.arange(got.shape[0]) + 0.5) * 0.5
                assert labelled["x"].values.tobytes() == x.tobytes(), labelled["x"].values
                assert labelled["x"].attrs == {"unitSI": 1e-06}
        time = {key: adapter[names[0]].attrs_of(it)[key] for key in ("time", "dt", "timeUnitSI")}
        assert time == {"time": 0.5 * it, "dt": 0.5, "timeUnitSI": 1e-15}, time
        first, last = names[0], names[-1]
        print(f"iteration {it}: {len(names)} records bitwise, {first} in {chunks[first]}, "
              f"{last} in {chunks[last]}; attributes equal, time {time['time']}", flush=True)
    streams = adapter.stats()["streams"]  # what the code wrote, and nothing else, published
    assert set(streams) == set(names), sorted(streams)
print(f"openpmd checker: {len(names)} records, {iterations} iterations bitwise", flush=True)
"""


def field_value(it: int, field: int, component: int, ny: int) -> np.ndarray:
    """A mesh component at iteration ``it`` (field 0: E, 1: B), as the writer computes it."""
    flat = np.arange(sum(ROWS) * ny * NZ, dtype=np.float64).reshape(sum(ROWS), ny, NZ)
    return it * 1e5 + field * 1e4 + component * 1e3 + flat * 0.5


def particle_counts(it: int, nranks: int = RANKS) -> list[int]:
    """How many electrons each rank writes at iteration ``it``."""
    return [0 if (it == 1 and r == nranks - 1) else 4 + (7 * r + 5 * it) % 9 for r in range(nranks)]


def expected_records(it: int, nranks: int = RANKS) -> dict[str, np.ndarray]:
    """Every record of iteration ``it`` as the writer computes it, by its ADIOS2 variable."""
    ny = sum(2 + r % 3 for r in range(nranks))
    records = {
        name: field_value(it, field, component, ny)
        for field, component, name in ((i // 3, i % 3, name) for i, name in enumerate(MESHES))
    }
    counts = particle_counts(it, nranks)
    rank = np.repeat(np.arange(nranks), counts)
    g = np.arange(sum(counts), dtype=np.uint64)
    p = g - np.repeat(np.cumsum([0, *counts[:-1]]), counts).astype(np.uint64)
    for c, axis in enumerate("xyz"):
        records[f"{SPECIES}/position/{axis}"] = it + 0.5 * g + 0.125 * c
        records[f"{SPECIES}/momentum/{axis}"] = -(it + 0.25 * g) * (c + 1)
    records[f"{SPECIES}/weighting"] = 1 + 0.5 * rank + 0.001953125 * p
    records[f"{SPECIES}/id"] = (1000 * rank + p + 1).astype(np.uint64)
    return records


@pytest.fixture(scope="module")
def openpmd_writer(adios2_build: Path) -> Path:  # noqa: F811
    """The project's build with the openPMD writer; skips without openPMD-api."""
    config = openpmd_config_file()
    if config is None:
        pytest.skip("openPMD-api >= 0.17 is not installed (README.md: openPMD-api)")
    finding = check_openpmd()
    if finding.status != "ok":
        pytest.skip(f"openPMD-api is not usable here: {finding.found}")
    writer = adios2_build / "tests" / "adios2" / WRITER
    with exclusive(adios2_build / ".tests.lock"):  # the build, one process at a time
        if not writer.exists():  # configured before openPMD-api was installed: look again
            configure = ["cmake", "-S", str(REPO), "-B", str(adios2_build)]
            configure.append(f"-DopenPMD_DIR={config.parent}")
            build = ["cmake", "--build", str(adios2_build), "--target", WRITER, "-j2"]
            for cmd in (configure, build):
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert writer.exists(), f"{config} found, but the project's CMake did not build {WRITER}"
    return writer


def configuration(path: Path, document: dict[str, object]) -> str:
    """``document`` written as an openPMD JSON file, named as openPMD-api reads one (``@``)."""
    path.write_text(json.dumps(document))
    return f"@{path}"


@pytest.fixture(scope="module")
def bp5_reference(openpmd_writer: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the openPMD writer writes with BP5, on 4 ranks."""
    work = tmp_path_factory.mktemp("openpmd-bp5")
    config = configuration(work / "bp5.json", BP5)
    cmd = mpirun(RANKS, str(openpmd_writer), str(work / "out.bp"), config, str(ITERATIONS))
    proc = subprocess.run(cmd, env=test_env(), cwd=work, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"openpmd writer: {RANKS} ranks, {ITERATIONS} iterations" in proc.stdout
    return work / "out.bp"


def test_bp5_output_is_what_the_writer_computes(bp5_reference: Path) -> None:
    """The writer's BP5 output, read back with the ``adios2`` wheel: one ADIOS2 step per
    iteration (variable-based), every record bitwise what the formulas give, the species'
    count changing every iteration, each rank's two chunks of every mesh component, and the
    iteration's time as a step attribute."""
    import adios2

    names = sorted([*MESHES, *PARTICLES])
    counts = []
    with adios2.Stream(str(bp5_reference), "r") as stream:
        for it, _ in enumerate(stream.steps()):
            assert sorted(stream.available_variables()) == names, stream.available_variables()
            expected = expected_records(it)
            for name in names:
                got, want = stream.read(name), expected[name]
                assert got.dtype == want.dtype and got.shape == want.shape, (name, it, got)
                assert got.tobytes() == want.tobytes(), (name, it, got, want)
            counts.append(stream.read(f"{SPECIES}/id").size)
            assert stream.read_attribute("/data/time") == 0.5 * it
    assert counts == [sum(particle_counts(it)) for it in range(ITERATIONS)]
    assert len(set(counts)) == ITERATIONS, counts  # a new count every iteration
    drop_reader_profile(bp5_reference)
    reader = adios2.FileReader(str(bp5_reference))
    for step in reader.all_blocks_info("/data/meshes/E/x"):
        writers = [int(block["WriterID"]) for block in step]
        assert sorted(writers) == sorted(2 * list(range(RANKS))), step  # two chunks a rank
    reader.close()
    drop_reader_profile(bp5_reference)


def in_situ(
    writer: Path, reference: Path, tmp_path: Path, *flags: str, names: list[str] | None = None
) -> tuple[subprocess.CompletedProcess[str], str]:
    """The writer with the deisa engine's configuration under deisa-run (4 ranks, 2 workers),
    the analytics comparing every iteration of ``names`` (all the reference's records) with
    ``reference``: deisa-run's result and the simulation's log, which must show the engine
    past Open, openPMD-api's own parameters ignored in one line."""
    config = configuration(tmp_path / "deisa.json", DEISA)
    script = tmp_path / "openpmd_checker.py"
    script.write_text(CHECKER)
    analytics = f"{script} {reference} {ITERATIONS}" + (f" {','.join(names)}" if names else "")
    out = tmp_path / "out"
    proc = deisa_run(
        "--ranks", str(RANKS), "--workers", "2", "--timeout", "240", "--output", str(out),
        "--analytics", analytics,
        "--", str(writer), str(tmp_path / "ignored.bp"), config, str(ITERATIONS), *flags,
        timeout=600,
    )  # fmt: skip
    (log,) = out.rglob("simulation.log")
    text = log.read_text()
    notices = [line for line in text.splitlines() if "deisa ADIOS2 engine: ignored" in line]
    assert notices == [
        "deisa ADIOS2 engine: ignored, as meant for ADIOS2's own engines or openPMD-api: "
        "parameters AsyncWrite, CollectiveMetadata, Profile, StatsLevel"
    ], text[-3000:]  # past Open: openPMD's parameters accepted
    assert not (tmp_path / "ignored.bp").exists()  # nothing written to a file
    return proc, text


@pytest.mark.timeout(600)
def test_meshes_in_one_chunk_per_rank_go_in_situ_bitwise(
    openpmd_writer: Path, bp5_reference: Path, tmp_path: Path
) -> None:
    """The fixed path (one block per rank, on a grid): the writer with --one-chunk --meshes-only
    (each rank's two boxes stored as one chunk, the same arrays; no species), its
    configuration alone swapped for the deisa engine's: every component of E and B of every
    iteration arrives bitwise as the two-chunk BP5 run wrote it, in the ranks' columns, and
    nothing else is published."""
    proc, _ = in_situ(openpmd_writer, bp5_reference, tmp_path, "--one-chunk", "--meshes-only",
                      names=MESHES)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert f"openpmd checker: {len(MESHES)} records, {ITERATIONS} iterations bitwise" in (
        proc.stdout
    )
    assert "iteration 0: 6 records bitwise, E/x in ((8,), (2, 3, 4, 2), (6,))" in proc.stdout


@pytest.mark.timeout(600)
def test_only_its_configuration_changed_the_writer_goes_in_situ_bitwise(
    openpmd_writer: Path, bp5_reference: Path, tmp_path: Path
) -> None:
    """The same writer, its openPMD configuration alone swapped for the deisa engine's
    (``type: plugin``, ``pretend_engine: sst``, PluginName, PluginLibrary), under deisa-run:
    openPMD-api's own parameters are ignored in one line at Open, and every mesh and particle
    record of every iteration (two chunks per rank, counts that change, a rank with none)
    arrives bitwise as the BP5 output has it."""
    proc, _ = in_situ(openpmd_writer, bp5_reference, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    records = len(MESHES) + len(PARTICLES)
    assert f"openpmd checker: {records} records, {ITERATIONS} iterations bitwise" in proc.stdout
    # the meshes in the ranks' boxes, the particles in the ranks' counts (none on rank 3 at 1)
    for it in range(ITERATIONS):
        counts = tuple(count for count in particle_counts(it) if count)
        assert (
            f"iteration {it}: {records} records bitwise, B/x in ((3, 5), "
            f"(2, 3, 4, 2), (6,)), electrons/weighting in ({counts},); attributes equal, "
            f"time {0.5 * it}"
        ) in proc.stdout, proc.stdout
