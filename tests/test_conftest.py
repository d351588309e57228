"""tests/conftest.py's account of the C layer's tests: a skipped PDI, ADIOS2 or openPMD test is
recorded (it fails the run where that part is installed), an expected failure (``xfail``, which
pytest reports as skipped) is not."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import conftest
import numpy as np
import pytest


def report(marker: str, outcome: str, **extra: Any) -> pytest.TestReport:
    """A call report of a test marked ``marker``, as pytest makes it."""
    longrepr = ("tests/test_x.py", 1, "Skipped: why") if outcome == "skipped" else None
    made = pytest.TestReport(
        nodeid=f"tests/test_x.py::test_{marker}",
        location=("tests/test_x.py", 1, f"test_{marker}"),
        keywords={marker: 1, f"test_{marker}": 1},
        outcome=outcome,  # type: ignore[arg-type]
        longrepr=longrepr,
        when="call",
    )
    for key, value in extra.items():
        setattr(made, key, value)
    return made


@pytest.fixture
def tally(monkeypatch: pytest.MonkeyPatch) -> Any:
    fresh = conftest._Tally()
    monkeypatch.setattr(conftest, "_TALLY", fresh)
    return fresh


@pytest.mark.parametrize(
    ("marker", "attribute"),
    [
        ("pdi", "skipped_pdi"),
        ("adios2", "skipped_adios2"),
        ("adios2_fortran", "skipped_adios2_fortran"),
        ("openpmd", "skipped_openpmd"),
    ],
)
def test_a_skip_is_recorded_an_expected_failure_is_not(
    tally: Any, marker: str, attribute: str
) -> None:
    conftest.pytest_runtest_logreport(report(marker, "skipped"))
    assert getattr(tally, attribute) == ["tests/test_x.py::test_" + marker + ": Skipped: why"]
    conftest.pytest_runtest_logreport(report(marker, "skipped", wasxfail="issue 56"))
    conftest.pytest_runtest_logreport(report(marker, "passed", wasxfail="issue 56"))
    assert len(getattr(tally, attribute)) == 1  # the xfail and the xpass are not skips


def test_the_summary_counts_expected_failures_apart(tally: Any) -> None:
    conftest.pytest_runtest_logreport(report("openpmd", "passed"))
    conftest.pytest_runtest_logreport(report("openpmd", "skipped", wasxfail="issue 56"))
    assert "openPMD tests: 1 passed, 1 xfailed" in tally.line()


def test_reader_profile_is_where_adios2s_bp5_reader_leaves_it(tmp_path: Path) -> None:
    """ADIOS2's BP5 reader writes ``/tmp/<file name>_<pid in hex>_profiling.json`` when it
    closes, whatever its parameters say; :func:`conftest.drop_reader_profile` removes it."""
    adios2 = pytest.importorskip("adios2", reason="the adios2 package (pip install adios2)")
    bp = tmp_path / f"profiled-{uuid.uuid4().hex}.bp"
    with adios2.Stream(str(bp), "w") as stream:
        for _ in stream.steps(2):
            stream.write("x", np.arange(4.0), [4], [0], [4])
    with adios2.Stream(str(bp), "r") as stream:
        assert [stream.read("x").tolist() for _ in stream.steps()] == [[0, 1, 2, 3]] * 2
    assert conftest.reader_profile(bp).is_file()
    conftest.drop_reader_profile(bp)
    assert not conftest.reader_profile(bp).exists()
    conftest.drop_reader_profile(bp)  # none left: nothing to do


# a test source opening a BP file for reading with the adios2 bindings (or writing a script
# that does)
_BP_READS = re.compile(r'Stream\(.*"r"\)|FileReader\(|Mode\.Read\b')


def test_every_test_reading_bp_with_the_bindings_removes_the_readers_profile() -> None:
    """So that the suite leaves nothing in /tmp: a test (or an analytics script it runs) that
    reads a BP5 file with the adios2 bindings removes the profile the reader leaves in /tmp
    (:func:`conftest.drop_reader_profile`, or the script's own ``os.remove``)."""
    tests = Path(conftest.__file__).parent
    readers = [p for p in sorted(tests.rglob("*.py")) if _BP_READS.search(p.read_text())]
    assert readers  # the pattern still finds them
    careless = [
        str(p.relative_to(tests))
        for p in readers
        if p.name != "conftest.py"
        and "drop_reader_profile(" not in p.read_text()
        and "_profiling.json" not in p.read_text()
    ]
    assert careless == []


def test_xdist_workers_take_the_longest_unit_first(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-n 2 --dist loadfile``: a file (or a group of XDIST_GROUPS) is one unit, and the units
    go to the workers longest first (UNIT_SECONDS, else by their count of tests)."""
    pytest.importorskip("xdist")
    monkeypatch.setattr(pytestconfig.option, "tx", ["popen", "popen"])  # as -n 2 sets it
    scheduler = conftest.pytest_xdist_make_scheduler(pytestconfig, None)
    nodeids = [
        "tests/test_one.py::test_a",
        *(f"tests/wire/test_many.py::test_{i}" for i in range(50)),
        "tests/launcher/test_local.py::test_slow",
        "tests/test_adios2.py::test_ragged",
        "tests/test_slurm.py::test_job",
    ]

    class Node:
        def send_runtest_some(self, indexes: list[int]) -> None:
            pass

    node = Node()
    scheduler.registered_collections[node] = nodeids
    for nodeid in nodeids:
        scheduler.workqueue.setdefault(scheduler._split_scope(nodeid), {})[nodeid] = False
    while scheduler.workqueue:
        scheduler._assign_work_unit(node)
    assert list(scheduler.assigned_work[node]) == [
        "slurm",  # test_adios2.py and test_slurm.py, one unit
        "tests/launcher/test_local.py",
        "tests/wire/test_many.py",
        "tests/test_one.py",
    ]


def test_each_files_tests_that_need_the_build_run_after_its_others() -> None:
    """While one worker builds (``built``), the other runs the tests of its file that need no
    build first; the files keep their order, and each part of a file its own."""

    def item(nodeid: str, *fixtures: str) -> Any:
        return SimpleNamespace(nodeid=nodeid, fixturenames=["tmp_path", *fixtures])

    items = [
        item("tests/a.py::test_1", "built"),
        item("tests/a.py::test_2"),
        item("tests/a.py::test_3", "built"),
        item("tests/a.py::test_4"),
        item("tests/b.py::test_1", "built"),
        item("tests/b.py::test_2"),
    ]
    assert [i.nodeid for i in conftest.build_last(items)] == [
        "tests/a.py::test_2",
        "tests/a.py::test_4",
        "tests/a.py::test_1",
        "tests/a.py::test_3",
        "tests/b.py::test_2",
        "tests/b.py::test_1",
    ]
