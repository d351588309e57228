"""tests/conftest.py's account of the C layer's tests: a skipped PDI, ADIOS2 or openPMD test is
recorded (it fails the run where that part is installed), an expected failure (``xfail``, which
pytest reports as skipped) is not."""

from __future__ import annotations

from typing import Any

import conftest
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
