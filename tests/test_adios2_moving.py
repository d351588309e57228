"""The deisa ADIOS2 engine with data that moves, real ADIOS2 and real processes (docs/adios2.md,
"Data that moves").

The project's own ADIOS2 code (tests/adios2/moving.cxx, 4 ranks) writes a particle array whose
length and counts change at every step (SetShape, SetSelection, two Puts on a rank, a rank with
no Put, a rank with an empty selection), a joined particle array (JoinedDim), a field in two
boxes per rank that move to the next rank at step 3 (a sync Put, a Span Put on odd steps, a
deferred Put from a buffer with ghost cells, PerformPuts followed by the buffers' overwrite)
and that no rank writes at step 4 (BP5 has no such step of it, nor has the analytics), a field
of one block per rank that is cut in two boxes, then grows (SetShape), an array and a single
value defined after the first step, an array defined before Open and first Put at step 2. Run
once with BP5 (the reference, read back with the ``adios2`` wheel, each step's whole selection)
and once with its XML's engine swapped for
deisa under ``deisa-run`` (a scheduler, workers, the analytics), every step of every variable
compared bitwise by the analytics, which takes them with ``Adapter``; then ``deisa.Replay`` of
the BP5 output gives the live run's arrays, chunks and bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import deisa_run
from test_adios2 import adios2_build, bp5_reference, engine_xml  # noqa: F401  (the fixture)

pytestmark = pytest.mark.adios2

STEPS = 6
NAMES = "px,pj,rho,T,age,nparticles,step,mass"

CHECKER = r"""
import contextlib
import os
import sys

import adios2
import numpy as np

from deisa import Adapter, Replay

reference, names = sys.argv[1], sys.argv[2].split(",")
expected = {name: {} for name in names}  # the steps where BP5 has the variable
with adios2.Stream(reference, "r") as stream:
    for _ in stream.steps():
        step = stream.current_step()
        for name in names:
            variable = stream.inquire_variable(name)
            if variable is None:
                continue
            shape = variable.shape()  # this step's; the whole selection (a joined array's too)
            value = stream.read(name, [0] * len(shape), shape) if shape else stream.read(name)
            expected[name][step] = np.atleast_1d(value)
with contextlib.suppress(FileNotFoundError):  # ADIOS2's BP5 reader leaves its profile in /tmp
    os.remove(f"/tmp/{os.path.basename(reference)}_{os.getpid():x}_profiling.json")
steps = sorted({step for values in expected.values() for step in values})
lived = {}
with Adapter.from_env() as adapter:
    for step in steps:
        for name in names:
            if step not in expected[name]:
                continue
            live = adapter[name][step]  # each step of each array taken once
            got = live.compute()
            want = expected[name][step]
            assert got.dtype == want.dtype and got.shape == want.shape, (name, step, got, want)
            assert got.tobytes() == want.tobytes(), (name, step, got, want)
            lived[name, step] = (got, live.chunks)
            print(f"{name} step {step}: shape {got.shape} chunks {live.chunks}", flush=True)
    paths = {name: "moving" if adapter[name].moving else "fixed" for name in names}
    print(f"declared: {paths}", flush=True)
    streams = adapter.stats()["streams"]
    published = {name: streams[name]["published"] for name in names}
    assert published == {name: len(expected[name]) for name in names}, published
replay = Replay(reference)  # the BP5 output read back by deisa: the live run's arrays and chunks
for (name, step), (got, chunks) in lived.items():
    replayed = replay[name][step]
    assert replayed.chunks == chunks, (name, step, replayed.chunks, chunks)
    assert replayed.compute().tobytes() == got.tobytes(), (name, step)
assert {name: replay[name].steps for name in names} == {n: sorted(expected[n]) for n in names}
first = {name: min(expected[name]) for name in names}
print(f"adios2 moving checker: {len(steps)} steps bitwise, first steps {first}; Replay equal")
"""


def moving(build: Path) -> str:
    return str(build / "tests" / "adios2" / "deisa_adios2_moving")


@pytest.fixture(scope="module")
def moving_reference(
    adios2_build: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """What the moving code writes with BP5, on 4 ranks."""
    return bp5_reference(tmp_path_factory, moving(adios2_build), 4, STEPS)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "parameters",
    [{"Mode": "async", "Transport": "auto"}, {"Mode": "sync", "Transport": "tcp"}],
    ids=["async-shared-memory", "sync-tcp"],
)
def test_moving_data_under_deisa_run_bitwise(
    adios2_build: Path,  # noqa: F811
    moving_reference: Path,
    tmp_path: Path,
    parameters: dict[str, str],
) -> None:
    """Every step of every variable of the moving code arrives as BP5 writes it: the
    particles' changing lengths, the joined array in rank order, the boxes where they moved,
    the field that splits and grows, the variables defined late from their first step."""
    xml = engine_xml(tmp_path / "deisa.xml", **parameters)
    script = tmp_path / "moving_checker.py"
    script.write_text(CHECKER)
    proc = deisa_run(
        "--ranks", "4", "--workers", "2", "--timeout", "300", "--output", str(tmp_path / "out"),
        "--analytics", f"{script} {moving_reference} {NAMES}",
        "--", moving(adios2_build), str(xml), "ignored.bp", str(STEPS), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-3000:]
    assert (
        "adios2 moving checker: 6 steps bitwise, first steps {'px': 0, 'pj': 0, 'rho': 0, "
        "'T': 0, 'age': 2, 'nparticles': 1, 'step': 0, 'mass': 2}; Replay equal" in proc.stdout
    ), proc.stdout[-3000:]
    # the engine's decisions (docs/adios2.md, "Which path"): one block per rank on a grid in the
    # step of its first Put is fixed (T, age, mass from step 2, the value step; px, one particle
    # on rank 0 at step 0: its later steps move and carry their layouts); joined (pj), two boxes
    # per rank (rho), a value first Put once the Bridge exists (nparticles): moving
    assert (
        "declared: {'px': 'fixed', 'pj': 'moving', 'rho': 'moving', 'T': 'fixed', "
        "'age': 'fixed', 'nparticles': 'moving', 'step': 'fixed', 'mass': 'fixed'}" in proc.stdout
    ), proc.stdout[-3000:]
    # the particles' lengths change; the field's boxes are the ranks' (two each, then moved)
    assert "px step 0: shape (15,)" in proc.stdout and "px step 3: shape (8,)" in proc.stdout
    assert "pj step 0: shape (15, 3)" in proc.stdout
    assert "T step 4: shape (20, 12)" in proc.stdout
    assert "T step 0: shape (16, 12) chunks ((4, 4, 4, 4), (12,))" in proc.stdout  # fixed
    assert "rho step 0: shape (16, 12) chunks ((2, 2, 2, 2, 2, 2, 2, 2), (12,))" in proc.stdout
    assert "rho step 3: " in proc.stdout and "rho step 4: " not in proc.stdout  # no Put at 4
    assert "rho step 5: " in proc.stdout
