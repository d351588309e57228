"""ADIOS2 attributes through the deisa engine, with real ADIOS2 and real processes
(docs/adios2.md, "Attributes").

The project's own ADIOS2 code (tests/adios2/attributes.cxx: global attributes of every kind,
variable attributes ``T/...``, one that changes every step, one that changes at step 2, one
defined at step 1, one at step 3) is run on 3 ranks with BP5, its output read back with the
``adios2`` bindings, step by step; then with its XML's engine swapped for deisa under
``deisa-run``, where the analytics compares, at every step, each array's attributes
(``adapter[name].attrs_of(step)``, and the xarray view's ``.attrs``) with the BP5 output's,
checks that only what changed travelled with each step, and that ``Replay`` of the BP5 output
gives the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import deisa_run
from test_adios2 import adios2_build, bp5_reference, engine_xml  # noqa: F401  (the fixture)

pytestmark = pytest.mark.adios2

STEPS = 4

CHECKER = r"""
import contextlib
import os
import sys

from adios2 import bindings

from deisa import Adapter, Replay

reference, steps = sys.argv[1], int(sys.argv[2])


def bp5_attributes():
    # each step's attributes as the adios2 bindings read them: a single value as itself, an
    # array as a list
    adios = bindings.ADIOS()
    io = adios.DeclareIO("reference")
    engine = io.Open(reference, bindings.Mode.Read)
    found = []
    while engine.BeginStep() == bindings.StepStatus.OK:
        step = {}
        for name in io.AvailableAttributes():
            attribute = io.InquireAttribute(name)
            if attribute.Type() == "string":
                values = list(attribute.DataString())
            else:
                values = attribute.Data().tolist()
            step[name] = values[0] if attribute.SingleValue() else values
        found.append(step)
        engine.EndStep()
    engine.Close()
    with contextlib.suppress(FileNotFoundError):  # ADIOS2's BP5 reader leaves its profile in /tmp
        os.remove(f"/tmp/{os.path.basename(reference)}_{os.getpid():x}_profiling.json")
    return found


written = bp5_attributes()
assert len(written) == steps, len(written)


def expected(name, step):
    # the global attributes and the array's own (ADIOS2's "T/units" is T's "units")
    attrs = {key: value for key, value in written[step].items() if "/" not in key}
    own = {key[len(name) + 1:]: value for key, value in written[step].items()
           if key.startswith(name + "/")}
    return {**attrs, **own}


def same(a, b):  # equal values of the same types (an int is not a float)
    return a == b and {k: type(v) for k, v in a.items()} == {k: type(v) for k, v in b.items()}


replay = Replay(reference)
with Adapter.from_env() as adapter:
    for name in ("T", "step"):
        array = adapter[name]
        static = array._static_attrs()  # the open metadata's, before any step is taken
        assert same(static, expected(name, 0)), (name, static)
    for step in range(steps):
        for name in ("T", "step"):
            array = adapter[name]
            labelled = array.to_xarray(step)
            want = expected(name, step)
            assert same(array.attrs_of(step), want), (name, step, array.attrs_of(step), want)
            saved = replay[name].attrs_of(step)
            assert same(saved, want), (name, step, saved)
            assert same(labelled.attrs, want), (name, step, labelled.attrs)
        print(f"step {step}: T {sorted(adapter['T'].attrs_of(step))}", flush=True)
    changes = {name: adapter[name]._attr_changes for name in ("T", "step")}
    print(f"travelled with the steps: {changes}", flush=True)
    # a Replay has no open metadata: its first step brings what the live one's opening did
    replayed = {name: replay[name]._attr_changes for name in ("T", "step")}
    assert changes == {name: {s: c for s, c in steps.items() if s > 0}
                       for name, steps in replayed.items()}, replayed
print(f"adios2 attributes checker: {steps} steps equal, live and replayed", flush=True)
"""


def writer(build: Path) -> str:
    return str(build / "tests" / "adios2" / "deisa_adios2_attributes")


@pytest.fixture(scope="module")
def attributes_reference(
    adios2_build: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """What the attributes code writes with BP5, on 3 ranks."""
    return bp5_reference(tmp_path_factory, writer(adios2_build), 3, STEPS)


@pytest.mark.timeout(600)
def test_attributes_under_deisa_run_equal_bp5_and_replay(
    adios2_build: Path,  # noqa: F811
    attributes_reference: Path,
    tmp_path: Path,
) -> None:
    """Every array's attributes at every step, as BP5 writes them: global and the variable's own,
    of every type, those that change at a step from that step on, only the changes sent."""
    xml = engine_xml(tmp_path / "deisa.xml")
    script = tmp_path / "attributes_checker.py"
    script.write_text(CHECKER)
    proc = deisa_run(
        "--ranks", "3", "--workers", "1", "--timeout", "300", "--output", str(tmp_path / "out"),
        "--analytics", f"{script} {attributes_reference} {STEPS}",
        "--", writer(adios2_build), str(xml), "ignored.bp", str(STEPS), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-3000:]
    assert "adios2 attributes checker: 4 steps equal, live and replayed" in proc.stdout, (
        proc.stdout[-3000:]
    )
    # only what changed travelled with each step (the rest in the open metadata)
    assert (
        "travelled with the steps: {'T': {1: {'late': 'defined at step 1', 'time': 0.25}, "
        "2: {'time': 0.5, 'units': 'degC'}, 3: {'time': 0.75, 'counts': [-1, 1099511627776, 3]}}, "
        "'step': {1: {'late': 'defined at step 1', 'time': 0.25}, 2: {'time': 0.5}, "
        "3: {'time': 0.75}}}" in proc.stdout
    ), proc.stdout[-3000:]
