"""The deisa ADIOS2 engine with real ADIOS2 and real processes (docs/adios2.md).

Two ADIOS2 codes, each run once with BP5 (the reference, read back with the serial ``adios2``
wheel) and once with its XML's engine swapped for deisa, every step compared bitwise by the
analytics: the project's own C++ code (tests/adios2/ragged.cxx: a ragged 2-D decomposition, a
sync and a deferred Put, PerformPuts, two single values, 4 ranks) under ``deisa-run`` (async,
shared memory) and in a one-node Slurm job (sync, TCP), and ADIOS2's own Gray-Scott example
(its source untouched, noise 0, with and without its ghost cells) under ``deisa-run`` (sync,
TCP). Memory selections (``SetMemorySelection``: the block is a sub-box of a buffer with ghost
cells) arrive as BP5 writes them, through the C++ API (the ragged code with ``--ghosts``, a
selection reset on the way) and the C API (tests/adios2/ghosts_c.c), the memory selection
guard preloaded by ``deisa-run``; without the guard the engine refuses to open. Span Puts
(the ragged code with ``--span``, Gray-Scott's ``adios_span``: the code writes into the
engine's memory, whose address the guard gives the Span's ``data()``) arrive as BP5 writes
them; without the guard a Span is refused. Bad
configurations stop the code at ``Open`` (or at the Put) with one line naming the problem.

Every test skips, saying why, where ADIOS2 >= 2.12 with MPI is not installed; where it is, a
skipped test here fails the run (tests/conftest.py, ``DEISA_ALLOW_ADIOS2_SKIP=1`` allows it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import REPO, deisa_run, exchanges_recorded, mpirun, test_env
from test_slurm import Slurm, run_job, slurm  # noqa: F401  (slurm: the fixture)

from deisa.doctor.adios2 import adios2_config_file, check_adios2
from deisa.launcher.adios2_engine import ENGINE_FILE, GUARD_FILE

pytestmark = pytest.mark.adios2

STEPS = 5
GRAY_SCOTT = Path("/usr/local/bin/adios2_simulations_gray-scott")
# its XML, where ADIOS2 installs it as a standalone example (an ADIOS2 build with
# -DADIOS2_BUILD_EXAMPLES=ON installs the binary only): else its io, as that XML declares it
GRAY_SCOTT_XML = Path("/usr/local/share/adios2/gray-scott/adios2.xml")

HEAT_TRANSFER = Path("/usr/local/bin/adios2_simulations_heatTransferWrite")
# ADIOS2's heatTransfer writer, built and installed on its own against the install as
# Gray-Scott is (README.md: ADIOS2), its own heat_bp5.xml copied beside Gray-Scott's XML
HEAT_TRANSFER_XML = Path("/usr/local/share/adios2/heatTransfer/heat_bp5.xml")

ENGINE = """<?xml version="1.0"?>
<adios-config>
  <io name="SimulationOutput">
    <engine type="{engine}">
      {parameters}
    </engine>
    {variables}
  </io>
</adios-config>
"""

CHECKER = r"""
import contextlib
import os
import sys

import adios2
import numpy as np

from deisa import Adapter

reference, steps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
every = int(sys.argv[4]) if len(sys.argv) > 4 else 1  # the engine's `Every'
published = list(range(0, steps, every))
expected = {name: [] for name in names}
with adios2.Stream(reference, "r") as stream:
    for _ in stream.steps():
        for name in names:
            expected[name].append(np.atleast_1d(stream.read(name)))
with contextlib.suppress(FileNotFoundError):  # ADIOS2's BP5 reader leaves its profile in /tmp
    os.remove(f"/tmp/{os.path.basename(reference)}_{os.getpid():x}_profiling.json")
assert all(len(values) == steps for values in expected.values()), expected
with Adapter.from_env() as adapter:
    for step in published:
        chunks = None
        for name in names:
            live = adapter[name][step]  # each step of each array taken once
            chunks = chunks or live.chunks
            got = live.compute()
            want = expected[name][step]
            assert got.dtype == want.dtype and got.shape == want.shape, (name, step, got, want)
            assert got.tobytes() == want.tobytes(), (name, step, got, want)
        print(f"step {step}: chunks {chunks}", flush=True)
    streams = adapter.stats()["streams"]  # `Variables' leaves the others unpublished
    assert set(streams) == set(names), sorted(streams)
    assert all(streams[name]["published"] == len(published) for name in names), streams
    calls = adapter.stats()["calls"]  # the registration messages the scheduler received
    print(f"registrations: {calls.get('publish_many', 0)} deisa_publish_many, "
          f"{calls.get('publish', 0)} steps of arrays", flush=True)
print(f"adios2 checker: {','.join(names)} steps {published} bitwise", flush=True)
"""


def engine_xml(path: Path, **parameters: str) -> Path:
    """The ragged code's XML with the deisa engine and ``parameters``."""
    words = {"PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine", **parameters}
    lines = "\n      ".join(f'<parameter key="{k}" value="{v}"/>' for k, v in words.items())
    path.write_text(ENGINE.format(engine="plugin", parameters=lines, variables=""))
    return path


def bp5_xml(path: Path) -> Path:
    path.write_text(ENGINE.format(engine="BP5", parameters="", variables=""))
    return path


@pytest.fixture(scope="module")
def adios2_build(built: Path) -> Path:
    """The project's build with the engine and the ragged code; skips without ADIOS2."""
    config = adios2_config_file()
    if config is None:
        pytest.skip("ADIOS2 >= 2.12 with MPI is not installed (README.md: ADIOS2)")
    finding = check_adios2()
    if not finding.details.get("mpi"):
        pytest.skip(f"ADIOS2 without MPI: {finding.found}")
    engine = built / "plugin" / "adios2" / ENGINE_FILE
    if not engine.exists():  # configured before ADIOS2 was installed: look again
        for cmd in (["cmake", "-S", str(REPO), "-B", str(built), f"-DADIOS2_DIR={config.parent}"],
                    ["cmake", "--build", str(built), "-j2"]):  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert engine.exists() and engine.with_name(GUARD_FILE).exists()
    return built


def ragged(build: Path) -> str:
    return str(build / "tests" / "adios2" / "deisa_adios2_ragged")


def subcomm(build: Path) -> str:
    return str(build / "tests" / "adios2" / "deisa_adios2_subcomm")


def ghosts_c(build: Path) -> str:
    return str(build / "tests" / "adios2" / "deisa_adios2_ghosts_c")


def guard(build: Path) -> str:
    return str(build / "plugin" / "adios2" / GUARD_FILE)


def run_mpi(
    nranks: int, *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = mpirun(nranks, *argv)
    return subprocess.run(
        cmd, env=env or test_env(), cwd=cwd, capture_output=True, text=True, timeout=300
    )


def bp5_reference(
    factory: pytest.TempPathFactory, program: str, ranks: int, steps: int, *flags: str
) -> Path:
    """The reference a module's tests compare with (module-scoped fixtures: they only read it):
    ``out.bp``, what ``program XML out.bp STEPS FLAGS`` writes with BP5 on ``ranks`` ranks, in a
    directory of its own."""
    work = factory.mktemp(f"{Path(program).name}{''.join(flags)}-bp5")
    proc = run_mpi(ranks, program, str(bp5_xml(work / "bp5.xml")), "out.bp", str(steps), *flags,
                   cwd=work)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return work / "out.bp"


@pytest.fixture(scope="module")
def ragged_reference(adios2_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the ragged code writes with BP5, on 4 ranks."""
    return bp5_reference(tmp_path_factory, ragged(adios2_build), 4, STEPS)


@pytest.fixture(scope="module")
def span_reference(adios2_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the ragged code writes with BP5 through Spans (--span), on 4 ranks."""
    return bp5_reference(tmp_path_factory, ragged(adios2_build), 4, STEPS, "--span")


@pytest.fixture(scope="module")
def ghosts_reference(adios2_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the ragged code writes with BP5 from its buffers with ghost cells, on 4 ranks."""
    return bp5_reference(tmp_path_factory, ragged(adios2_build), 4, STEPS, "--ghosts")


def checker(tmp_path: Path, reference: Path, steps: int, names: str, every: int = 1) -> str:
    """The analytics comparing every published step of ``names`` with ``reference``."""
    script = tmp_path / "adios2_checker.py"
    script.write_text(CHECKER)
    return f"{script} {reference} {steps} {names} {every}"


@pytest.mark.timeout(600)
def test_ragged_code_under_deisa_run_async_shared_memory_bitwise(
    adios2_build: Path, ragged_reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deisa-run -- ./code deisa.xml: deisa-run hands the built engine over
    (ADIOS2_PLUGIN_PATH) and its scheduler file; every step of U (sync Put), V (deferred, and
    overwritten after PerformPuts), step and time arrives bitwise as BP5 writes it, in the
    ragged blocks of the ranks; each step's four variables cost one exchange for the arrays
    and one for rank 0's single values, not four."""
    xml = engine_xml(tmp_path / "deisa.xml", Mode="async", Transport="auto", BufferNb="2")
    out = tmp_path / "out"
    recorded = exchanges_recorded(tmp_path, monkeypatch)
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(out),
        "--analytics", checker(tmp_path, ragged_reference, STEPS, "U,V,step,time"),
        "--", ragged(adios2_build), str(xml), "ignored.bp", str(STEPS), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "adios2 checker: U,V,step,time steps [0, 1, 2, 3, 4] bitwise" in proc.stdout
    assert "step 0: chunks ((10, 3), (8, 2))" in proc.stdout  # the ragged blocks
    # the arrays through shared memory, the single values from rank 0 alone
    assert "U: 5 steps published, 5 taken" in proc.stdout + proc.stderr
    assert "blocks by shared memory (4 ranks)" in proc.stdout + proc.stderr
    assert "time: 5 steps published, 5 taken" in proc.stdout + proc.stderr
    # an EndStep's variables in one Bridge.step scope (issue 56 item 9): one exchange a step
    # for U and V on every rank, and one for rank 0's single values (their Bridge over rank 0),
    # not one per variable (the registration messages the checker prints are the registrar's
    # to batch: early registration may take a step's arrays one by one)
    for rank in range(4):
        lines = (recorded / f"{rank}.txt").read_text().splitlines()
        posted = sorted(json.loads(line) for line in lines)
        arrays = [[["U", "V"], step] for step in range(STEPS)]
        values = [[["step", "time"], step] for step in range(STEPS)] if rank == 0 else []
        assert posted == sorted(arrays + values), (rank, posted)
    engine_dir = adios2_build / "plugin" / "adios2"
    assert f"deisa-run: the deisa ADIOS2 engine: built in {engine_dir}" in proc.stderr
    assert not (REPO / "ignored.bp").exists()  # nothing written to a file


@pytest.mark.timeout(600)
def test_memory_selections_under_deisa_run_sync_tcp_bitwise(
    adios2_build: Path, ghosts_reference: Path, tmp_path: Path
) -> None:
    """The ragged code Puts U (sync) and V (deferred, PerformPuts on odd steps) from buffers
    with uneven ghost cells through SetMemorySelection, and resets V's selection at step 3:
    deisa-run preloads the memory selection guard, and every step arrives bitwise as BP5
    writes it (the garbage of the ghost cells nowhere)."""
    xml = engine_xml(tmp_path / "deisa.xml", Mode="sync", Transport="tcp")
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(tmp_path / "out"),
        "--analytics", checker(tmp_path, ghosts_reference, STEPS, "U,V,step,time"),
        "--", ragged(adios2_build), str(xml), "ignored.bp", str(STEPS), "--ghosts", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "adios2 checker: U,V,step,time steps [0, 1, 2, 3, 4] bitwise" in proc.stdout
    assert "step 0: chunks ((10, 3), (8, 2))" in proc.stdout
    preloaded = f"the ADIOS2 memory selection guard: preloaded from {guard(adios2_build)}"
    assert f"deisa-run: {preloaded} (LD_PRELOAD)" in proc.stderr


@pytest.mark.timeout(600)
def test_column_major_io_arrives_as_a_row_major_reader_sees_it(
    adios2_build: Path, ragged_reference: Path, tmp_path: Path
) -> None:
    """The ragged code with --column-major declares its io column-major (a Fortran code's
    order, ArrayOrdering::ColumnMajor) and gives every dimension reversed, its buffers
    unchanged: a row-major reader of BP5 sees the same arrays as without it, and the engine
    publishes the same, every step bitwise the row-major run's BP5 output, in its blocks
    (docs/adios2.md, "Fortran"; with Fortran itself: tests/test_adios2_fortran.py)."""
    xml = engine_xml(tmp_path / "deisa.xml", Mode="async", Transport="tcp")
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(tmp_path / "out"),
        "--analytics", checker(tmp_path, ragged_reference, STEPS, "U,V,step,time"),
        "--", ragged(adios2_build), str(xml), "ignored.bp", str(STEPS), "--column-major",
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "adios2 checker: U,V,step,time steps [0, 1, 2, 3, 4] bitwise" in proc.stdout
    assert "step 0: chunks ((10, 3), (8, 2))" in proc.stdout


@pytest.mark.timeout(600)
def test_span_puts_under_deisa_run_async_shared_memory_bitwise(
    adios2_build: Path, span_reference: Path, tmp_path: Path
) -> None:
    """The ragged code with --span Puts U and V as Spans and writes into the engine's memory
    (U initialized with a value and written through data() but for one element, V through
    operator[]): the guard preloaded by deisa-run answers the Spans' data(), and every step
    arrives bitwise as BP5 writes it, the initial value included."""
    xml = engine_xml(tmp_path / "deisa.xml", Mode="async", Transport="auto")
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(tmp_path / "out"),
        "--analytics", checker(tmp_path, span_reference, STEPS, "U,V,step,time"),
        "--", ragged(adios2_build), str(xml), "ignored.bp", str(STEPS), "--span", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "adios2 checker: U,V,step,time steps [0, 1, 2, 3, 4] bitwise" in proc.stdout
    assert "step 0: chunks ((10, 3), (8, 2))" in proc.stdout


@pytest.mark.timeout(600)
def test_memory_selection_through_the_c_api_bitwise(adios2_build: Path, tmp_path: Path) -> None:
    """A C code (tests/adios2/ghosts_c.c) sets its selection with adios2_set_memory_selection
    and Puts deferred from its buffer with ghost cells: every step arrives as BP5 writes it."""
    (tmp_path / "bp5").mkdir()
    proc = run_mpi(4, ghosts_c(adios2_build), str(bp5_xml(tmp_path / "bp5.xml")), "c.bp", "3",
                   cwd=tmp_path / "bp5")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    xml = engine_xml(tmp_path / "deisa.xml", Mode="sync", Transport="tcp")
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(tmp_path / "out"),
        "--analytics", checker(tmp_path, tmp_path / "bp5" / "c.bp", 3, "T"),
        "--", ghosts_c(adios2_build), str(xml), "ignored.bp", "3", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "adios2 checker: T steps [0, 1, 2] bitwise" in proc.stdout


@pytest.mark.timeout(600)
@pytest.mark.parametrize("put", ["plain", "ghost-cells", "span"])
def test_gray_scott_example_sync_tcp_bitwise(adios2_build: Path, tmp_path: Path, put: str) -> None:
    """ADIOS2's own Gray-Scott example, its source untouched: its XML's SimulationOutput
    engine swapped for deisa (sync, TCP), every output step (U, V, step) equal to its BP5
    output, bitwise (noise 0); with ``adios_memory_selection`` it Puts U and V from its
    buffers with ghost cells (SetMemorySelection), as BP5 cuts them; with ``adios_span`` it
    Puts them as Spans and writes into the engine's memory."""
    if not GRAY_SCOTT.exists():
        pytest.skip(f"ADIOS2's Gray-Scott example is not installed ({GRAY_SCOTT})")
    base = GRAY_SCOTT_XML
    if not base.exists():
        base = bp5_xml(tmp_path / "adios2.xml")
    settings = (
        '{{"L": 16, "Du": 0.2, "Dv": 0.1, "F": 0.02, "k": 0.048, "dt": 1.0, "plotgap": 5, '
        '"steps": 20, "noise": 0.0, "output": "gs.bp", "checkpoint": false, '
        '"checkpoint_freq": 700, "checkpoint_output": "ckpt.bp", "restart": false, '
        '"restart_input": "ckpt.bp", "adios_config": "{xml}", '
        f'"adios_span": {str(put == "span").lower()}, '
        f'"adios_memory_selection": {str(put == "ghost-cells").lower()}, "mesh_type": "image"}}}}'
    )
    (tmp_path / "bp5").mkdir()
    bp5 = tmp_path / "bp5" / "settings.json"
    bp5.write_text(settings.format(xml=base))
    proc = run_mpi(4, str(GRAY_SCOTT), str(bp5), cwd=bp5.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tree = ET.parse(base)
    engine = tree.getroot().find("io[@name='SimulationOutput']/engine")
    assert engine is not None
    engine.clear()  # BP5's parameters go with BP5
    engine.set("type", "plugin")
    for key, value in {"PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine",
                       "Mode": "sync", "Transport": "tcp"}.items():  # fmt: skip
        ET.SubElement(engine, "parameter", key=key, value=value)
    xml = tmp_path / "adios2-deisa.xml"
    tree.write(xml)
    live = tmp_path / "settings.json"
    live.write_text(settings.format(xml=xml))
    out = tmp_path / "out"
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(out),
        "--analytics", checker(tmp_path, bp5.parent / "gs.bp", 4, "U,V,step"),
        "--", str(GRAY_SCOTT), str(live), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "adios2 checker: U,V,step steps [0, 1, 2, 3] bitwise" in proc.stdout
    assert "blocks by tcp (4 ranks)" in proc.stdout + proc.stderr


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_ragged_code_in_a_slurm_job_sync_tcp(
    slurm: Slurm,  # noqa: F811
    adios2_build: Path,
    ragged_reference: Path,
    tmp_path: Path,
) -> None:
    """deisa-run slurm -- ./code deisa.xml: the job exports ADIOS2_PLUGIN_PATH for the
    simulation's step; sync publication over TCP of every second step (`Every`) of U and step
    only (`Variables`), each bitwise as BP5 writes it, nothing else published."""
    xml = engine_xml(tmp_path / "deisa.xml", Mode="sync", Transport="tcp", Every="2",
                     Variables="U, step")  # fmt: skip
    job = run_job(slurm, tmp_path, STEPS, ragged(adios2_build), str(xml), "x.bp", str(STEPS),
                  analytics=checker(tmp_path, ragged_reference, STEPS, "U,step", every=2),
                  build_dir=adios2_build)  # fmt: skip
    assert job.state == "COMPLETED", job.diagnostics()
    logs = "".join(p.read_text() for p in (job.dir / "logs").glob("analytics-*.log"))
    assert "adios2 checker: U,step steps [0, 2, 4] bitwise" in logs, logs
    script = (tmp_path / "job.sh").read_text()
    assert f"export ADIOS2_PLUGIN_PATH={adios2_build / 'plugin' / 'adios2'}" in script
    # the guard, preloaded in the simulation's step only
    assert f'DEISA_LD_PRELOAD={guard(adios2_build)}"${{LD_PRELOAD:+:$LD_PRELOAD}}"' in script
    assert script.count('LD_PRELOAD="$DEISA_LD_PRELOAD" srun') == 1


BAD = {
    "unknown parameter": (
        {"Scheduler": "s.json"}, "", "",
        "deisa ADIOS2 engine: unknown parameter `Scheduler'",
    ),
    "bad value": (
        {"SchedulerFile": "s.json", "BufferNb": "0"}, "", "",
        "deisa ADIOS2 engine: parameter `BufferNb': buffer_nb=0 must be a positive integer",
    ),
    "no scheduler": ({}, "", "", "deisa ADIOS2 engine: no scheduler file"),
    "operator": (
        {"SchedulerFile": "s.json"}, '<variable name="U"><operation type="null"/></variable>',
        "", "deisa ADIOS2 engine: variable `U' is transformed by an operator (`null')",
    ),
    "local array": (
        {"SchedulerFile": "s.json"}, "", "local",
        "deisa ADIOS2 engine: variable `L' is a local array or value",
    ),
    "read mode": (
        {"SchedulerFile": "s.json"}, "", "read",
        "deisa ADIOS2 engine: io `SimulationOutput' is opened for reading",
    ),
    "span twice": (
        {"SchedulerFile": "s.json"}, "", "span-twice",
        "deisa ADIOS2 engine: variable `U' Put as a Span twice by this rank in step 0: ADIOS2 "
        "gives a plugin engine's Spans of a variable one core Span",
    ),
    "memory selection too small": (
        {"SchedulerFile": "s.json"}, "", "bad-selection",
        "deisa ADIOS2 engine: variable `U': its block (count {10, 10}) at memory start {1, 4} "
        "does not fit in its memory count {13, 13} (axis 1)",
    ),
    "memory selection in a column-major io from C++": (
        {"SchedulerFile": "s.json"}, "", "column-major-selection",
        "deisa ADIOS2 engine: variable `U' is given a memory selection in a column-major io "
        "from a row-major language",
    ),
    "one variable, two types": (
        {"SchedulerFile": "s.json"}, "", "types-differ",
        "deisa ADIOS2 engine: variable `W' is Put at step 0 with dtype 'int32' by rank 1 and "
        "'float64' by rank 0: one variable is one array",
    ),
    "MemorySelections": (
        {"SchedulerFile": "s.json", "MemorySelections": "some"}, "", "",
        "deisa ADIOS2 engine: parameter `MemorySelections'='some' must be one of guard, none",
    ),
    "misspelt parameter": (
        {"SchedulerFile": "s.json", "BuferNb": "2", "Threads": "1"}, "", "",
        "deisa ADIOS2 engine: unknown parameter `BuferNb': did you mean `BufferNb'?",
    ),
    "OpenTimeout": (
        {"SchedulerFile": "s.json", "OpenTimeout": "-1"}, "", "",
        "deisa ADIOS2 engine: parameter `OpenTimeout'='-1' must be a positive number of seconds",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_bad_configuration_stops_with_one_line(
    adios2_build: Path, tmp_path: Path, case: str
) -> None:
    """What the engine cannot publish right stops the code at Open (a Span, a memory selection
    whose buffer cannot hold the block: at its Put), before any step, with one line naming it:
    no Dask is needed to say so."""
    parameters, variables, misuse, message = BAD[case]
    proc = run_bad(adios2_build, tmp_path, parameters, variables, misuse, preload=True)
    errors = [line for line in proc.stderr.splitlines() if "deisa ADIOS2 engine" in line]
    assert len(errors) == 1 and errors[0].startswith(message), proc.stderr
    assert not (tmp_path / "out.bp").exists()


def run_bad(
    build: Path, tmp_path: Path, parameters: dict[str, str], variables: str, misuse: str,
    *, preload: bool,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The ragged code on 2 ranks under plain mpirun (the engine handed over by
    ADIOS2_PLUGIN_PATH alone, the guard preloaded or not, no scheduler): it must fail."""
    words = {"PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine", **parameters}
    lines = "\n".join(f'<parameter key="{k}" value="{v}"/>' for k, v in words.items())
    xml = tmp_path / "bad.xml"
    xml.write_text(ENGINE.format(engine="plugin", parameters=lines, variables=variables))
    env = test_env()
    env["ADIOS2_PLUGIN_PATH"] = str(build / "plugin" / "adios2")
    for key in ("DEISA_SCHEDULER_FILE", "DEISA_SCHEDULER_FILE_OVERRIDE", "LD_PRELOAD"):
        env.pop(key, None)
    if preload:
        env["LD_PRELOAD"] = guard(build)
    argv = [ragged(build), str(xml), "out.bp", "2"]
    proc = run_mpi(2, *argv, *(["--misuse", misuse] if misuse else []), cwd=tmp_path, env=env)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc


def test_without_the_guard_the_engine_refuses_to_open(adios2_build: Path, tmp_path: Path) -> None:
    """Plain mpirun with ADIOS2_PLUGIN_PATH only: the engine cannot see a memory selection,
    and says so at Open in one line naming both fixes (deisa-run, LD_PRELOAD and the guard's
    path) and the parameter of a code that sets none."""
    proc = run_bad(adios2_build, tmp_path, {"SchedulerFile": "s.json"}, "", "", preload=False)
    errors = [line for line in proc.stderr.splitlines() if "deisa ADIOS2 engine" in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(
        "deisa ADIOS2 engine: the memory selection guard is not loaded (ADIOS2's plugin "
        "interface hides a variable's memory selection from an engine"
    ), errors
    assert "deisa-run" in errors[0] and f"LD_PRELOAD={guard(adios2_build)}" in errors[0]
    assert "MemorySelections=none" in errors[0]


def test_memory_selections_none_opens_without_the_guard(adios2_build: Path, tmp_path: Path) -> None:
    """MemorySelections=none (the code sets no selection): the engine opens without the
    guard, and goes on to the next check (here, a local array)."""
    parameters = {"SchedulerFile": "s.json", "MemorySelections": "none"}
    proc = run_bad(adios2_build, tmp_path, parameters, "", "local", preload=False)
    errors = [line for line in proc.stderr.splitlines() if "deisa ADIOS2 engine" in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("deisa ADIOS2 engine: variable `L' is a local array"), errors


def test_an_unknown_parameter_is_one_warning_not_a_stop(adios2_build: Path, tmp_path: Path) -> None:
    """A key that is nobody's (far from the engine's own) is one warning line at Open, on one
    rank; ADIOS2's own engines' parameters one more; Open goes on, to the next check (here, a
    local array, which stops the code)."""
    parameters = {"SchedulerFile": "s.json", "Colour": "blue", "NumAggregators": "2"}
    proc = run_bad(adios2_build, tmp_path, parameters, "", "local", preload=True)
    errors = [line for line in proc.stderr.splitlines() if "deisa ADIOS2 engine" in line]
    assert len(errors) == 3, proc.stderr
    assert errors[0] == (
        "deisa ADIOS2 engine: ignored, as meant for ADIOS2's own engines or openPMD-api: "
        "parameters NumAggregators"
    )
    assert errors[1].startswith("deisa ADIOS2 engine: ignored unknown parameters Colour (")
    assert errors[2].startswith("deisa ADIOS2 engine: variable `L' is a local array")


def test_without_the_guard_a_span_is_refused(adios2_build: Path, tmp_path: Path) -> None:
    """MemorySelections=none, plain mpirun, no guard: nothing answers a Span's data() (ADIOS2's
    PluginEngine does not forward it), and the Span Put is refused in one line naming the
    guard, before the code could write through a null pointer."""
    parameters = {"SchedulerFile": "s.json", "MemorySelections": "none"}
    proc = run_bad(adios2_build, tmp_path, parameters, "", "span", preload=False)
    errors = [line for line in proc.stderr.splitlines() if "deisa ADIOS2 engine" in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(
        "deisa ADIOS2 engine: variable `U' is Put as a Span (Put(variable) returning the "
        "engine's memory), which the deisa engine does not publish: in ADIOS2 2.12 a Span's "
        "data() asks the core engine's BufferData, which ADIOS2's PluginEngine does not forward"
    ), errors
    assert f"LD_PRELOAD={guard(adios2_build)}" in errors[0]


def test_doctor_reports_adios2_and_the_built_engine(adios2_build: Path) -> None:
    finding = check_adios2()
    assert finding.status == "ok", finding
    assert finding.details["mpi"] is True
    assert finding.details["engine"] == str(adios2_build / "plugin" / "adios2")


def test_python_side_of_the_engine_is_importable_in_a_rank() -> None:
    """The engine imports deisa.bridge.engine.parameters in each rank: no analytics there."""
    proc = subprocess.run(
        [sys.executable, "-c", "import deisa.bridge.engine.parameters, sys; "
         "print('deisa.analysis' in sys.modules)"],
        capture_output=True, text=True, env=test_env(), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


def test_step_blocks_checks_every_step_against_the_first(adios2_build: Path) -> None:
    """plugin/adios2/tests/step_blocks_test.cxx (CTest deisa_step_blocks): the arrays declared
    from the first published step, each later one checked against them, errors naming the
    variable, the step and what differs (a count, a new variable, a value missing on rank 0, a
    second Put)."""
    ctest = shutil.which("ctest")
    if ctest is None:
        pytest.skip("ctest (from CMake) is not on PATH")
    cmd = [ctest, "--test-dir", str(adios2_build), "-R", "deisa_step_blocks", "--output-on-failure"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "100% tests passed, 0 tests failed out of 1" in proc.stdout, proc.stdout


def test_the_guard_records_every_selection_and_forgets_a_removed_variables(
    adios2_build: Path,
) -> None:
    """plugin/adios2/tests/guard_test.cxx (CTest deisa_adios2_guard, the guard preloaded): a
    code's SetMemorySelection reaches the guard, what ADIOS2 refuses is not recorded, an empty
    box resets it, and a variable defined in a removed one's memory has no selection; its 14
    DoBufferData_<type> are the process's, give the lent address for the engine's buffer index
    alone, and BP5's own Spans still write what the code wrote."""
    ctest = shutil.which("ctest")
    if ctest is None:
        pytest.skip("ctest (from CMake) is not on PATH")
    cmd = [ctest, "--test-dir", str(adios2_build), "-R", "deisa_adios2_guard", "-V"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "100% tests passed, 0 tests failed out of 1" in proc.stdout, proc.stdout
    # without the preload, the same program fails: the guard is what it checks
    program = adios2_build / "plugin" / "adios2" / "deisa_adios2_guard_test"
    env = {key: value for key, value in test_env().items() if key != "LD_PRELOAD"}
    alone = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=60)
    assert alone.returncode != 0 and "the guard is not loaded" in alone.stderr, alone.stderr


@pytest.fixture(scope="module")
def subcomm_reference(adios2_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the sub-communicator code writes with BP5: 4 ranks, 3 writing."""
    return bp5_reference(tmp_path_factory, subcomm(adios2_build), 4, 4)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("given", ["ADIOS", "Open"])
def test_a_code_writing_on_a_sub_communicator_under_deisa_run_bitwise(
    adios2_build: Path, subcomm_reference: Path, tmp_path: Path, given: str
) -> None:
    """tests/adios2/subcomm.cxx: rank 0 coordinates and never opens the io, ranks 1..3 write
    through their own communicator, given to ``adios2::ADIOS(config, comm)`` or to
    ``IO::Open(name, mode, comm)``: the engine publishes over it (the guard tells it), every
    step of T and of the single value ``time`` (the communicator's rank 0's) as BP5 writes
    them; the coordinator ends the run."""
    xml = engine_xml(tmp_path / "deisa.xml", Mode="sync", Transport="tcp")
    out = tmp_path / "out"
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(out),
        "--analytics", checker(tmp_path, subcomm_reference, 4, "T,time"),
        "--", subcomm(adios2_build), str(xml), "x.bp", "4",
        *(["--open-comm"] if given == "Open" else []), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "adios2 checker: T,time steps [0, 1, 2, 3] bitwise" in proc.stdout
    (log,) = out.rglob("simulation.log")
    assert "coordinator: 3 writers, 4 steps" in log.read_text()


def test_without_the_guard_a_sub_communicator_stops_every_writer_in_bounded_time(
    adios2_build: Path, tmp_path: Path
) -> None:
    """Plain mpirun, no guard (MemorySelections=none): the engine cannot learn the code's
    communicator and falls back on MPI_COMM_WORLD, whose rank 0 never opens: within
    OpenTimeout every writer stops with one line naming the communicator and the fix, where
    it would otherwise hang in its first collective for ever."""
    words = {"PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine",
             "SchedulerFile": "s.json", "MemorySelections": "none", "OpenTimeout": "3"}  # fmt: skip
    lines = "\n".join(f'<parameter key="{k}" value="{v}"/>' for k, v in words.items())
    xml = tmp_path / "bad.xml"
    xml.write_text(ENGINE.format(engine="plugin", parameters=lines, variables=""))
    env = test_env()
    env["ADIOS2_PLUGIN_PATH"] = str(adios2_build / "plugin" / "adios2")
    for key in ("DEISA_SCHEDULER_FILE", "DEISA_SCHEDULER_FILE_OVERRIDE", "LD_PRELOAD"):
        env.pop(key, None)
    proc = run_mpi(3, subcomm(adios2_build), str(xml), "out.bp", "2", cwd=tmp_path, env=env)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    errors = {line.strip() for line in proc.stderr.splitlines() if "deisa ADIOS2 engine" in line}
    assert len(errors) == 1, proc.stderr
    (error,) = errors
    assert error.startswith(
        "what():  deisa ADIOS2 engine: not every rank of MPI_COMM_WORLD (3 ranks) opened io "
        "`SimulationOutput' within 3 s (OpenTimeout): the engine publishes over MPI_COMM_WORLD, "
        "as it cannot learn the communicator the code gave ADIOS2 (the memory selection guard, "
        "which tells it, is not loaded)"
    ), error
    assert f"LD_PRELOAD={guard(adios2_build)}" in error


@pytest.mark.timeout(600)
def test_deisa_run_prints_the_engines_reason(adios2_build: Path, tmp_path: Path) -> None:
    """A rank stopped by the engine (an uncaught std::invalid_argument: std::terminate prints
    its what(), then OpenMPI a backtrace): deisa-run's report is led by that line."""
    xml = engine_xml(tmp_path / "deisa.xml", BuferNb="2")
    waiting = tmp_path / "wait.py"  # an analytics that waits for a step that never comes
    waiting.write_text("from deisa import Adapter\n\nwith Adapter.from_env() as adapter:\n"
                       "    adapter['T'][0].compute()\n")  # fmt: skip
    proc = deisa_run(
        "--ranks", "3", "--workers", "1", "--timeout", "120", "--output", str(tmp_path / "out"),
        "--analytics", str(waiting),
        "--", subcomm(adios2_build), str(xml), "x.bp", "2", timeout=600,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout[-2000:]
    failure = proc.stderr[proc.stderr.index("simulation failed") :].splitlines()
    assert failure[1].startswith(
        "  what():  deisa ADIOS2 engine: unknown parameter `BuferNb': did you mean `BufferNb'? "
        "(valid parameters are ['BufferNb', "
    ), proc.stderr[-3000:]


@pytest.fixture(scope="module")
def heat_transfer(adios2_build: Path) -> tuple[Path, Path]:
    """ADIOS2's heatTransfer example (examples/simulations/heatTransfer), its writer installed
    standalone against the install as the README says: the writer and its heat_bp5.xml."""
    for path in (HEAT_TRANSFER, HEAT_TRANSFER_XML):
        if not path.exists():
            pytest.skip(
                f"ADIOS2's heatTransfer example is not installed ({path}; README.md: ADIOS2)"
            )
    return HEAT_TRANSFER, HEAT_TRANSFER_XML


@pytest.mark.timeout(900)
def test_heat_transfer_example_with_one_line_swapped_bitwise(
    heat_transfer: tuple[Path, Path], tmp_path: Path
) -> None:
    """ADIOS2's heatTransfer example, its source untouched, with its own heat_bp5.xml changed
    in the writer's engine line only (type plugin, PluginName, PluginLibrary): BP5's
    parameters (Threads, ProfileUnits, InitialBufferSize, FlushStepsCount) and its
    ``<transport>`` stay and are listed as ignored in one line, and every step of T arrives
    as its BP5 output has it (4 ranks, its own MPI_Comm_split communicator given to Open)."""
    binary, heat_bp5 = heat_transfer
    argv = ["2", "2", "10", "8", "3", "4"]  # N M nx ny steps iterations: 4 output steps
    (tmp_path / "bp5").mkdir()
    proc = run_mpi(4, str(binary), str(heat_bp5), "heat.bp", *argv,
                   cwd=tmp_path / "bp5")  # fmt: skip
    assert proc.returncode == 0 and (tmp_path / "bp5" / "heat.bp").exists(), proc.stdout
    original = heat_bp5.read_text()
    line = '<engine type="BP5">'
    swapped = original.replace(
        line,
        '<engine type="plugin">'
        '<parameter key="PluginName" value="deisa"/>'
        '<parameter key="PluginLibrary" value="deisa_adios2_engine"/>',
        1,
    )  # fmt: skip  (the first io: the writer's)
    assert swapped != original and original.index(line) < original.index('io name="readerInput"')
    xml = tmp_path / "heat_deisa.xml"
    xml.write_text(swapped)
    out = tmp_path / "out"
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "240", "--output", str(out),
        "--analytics", checker(tmp_path, tmp_path / "bp5" / "heat.bp", 4, "T"),
        "--", str(binary), str(xml), "heat.bp", *argv, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "adios2 checker: T steps [0, 1, 2, 3] bitwise" in proc.stdout
    (log,) = out.rglob("simulation.log")
    notices = [line for line in log.read_text().splitlines() if "deisa ADIOS2 engine" in line]
    assert len(notices) == 1 and notices[0].endswith(
        "deisa ADIOS2 engine: ignored, as meant for ADIOS2's own engines or openPMD-api: "
        "parameters FlushStepsCount, InitialBufferSize, ProfileUnits, Threads; "
        "transport File (Library, ProfileUnits)"
    ), log.read_text()[-3000:]
