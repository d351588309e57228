"""A Fortran code through the deisa ADIOS2 engine: ADIOS2's Fortran bindings call the same C++
engine, so a Fortran code goes in situ by the same one-line swap of its XML (docs/adios2.md).

Apart from tests/test_adios2.py and without its ``adios2`` mark: it needs an ADIOS2 built with
Fortran, and a skip for the lack of it is not a skip of an installed ADIOS2 (which fails the
run, tests/conftest.py).
"""

from __future__ import annotations

import shutil

import pytest

from deisa.doctor.adios2 import adios2_config_file, check_adios2


def test_fortran_code_through_the_engine() -> None:
    """A Fortran code writing through ADIOS2's Fortran bindings reaches the same engine (the
    bindings call the same C++ engine); it needs an ADIOS2 built with Fortran."""
    if adios2_config_file() is None:
        pytest.skip("ADIOS2 >= 2.12 with MPI is not installed (README.md: ADIOS2)")
    finding = check_adios2()
    if not finding.details.get("fortran"):
        pytest.skip(
            "ADIOS2 here is built without Fortran (ADIOS2_HAVE_Fortran off in "
            f"{finding.details['config']}): its Fortran bindings are absent"
        )
    if shutil.which("mpif90") is None:
        pytest.skip("no mpif90 to build a Fortran ADIOS2 code")
    pytest.fail(  # where ADIOS2 has Fortran, this test is still to be written (docs/adios2.md)
        "ADIOS2 has Fortran here: the Fortran test code is not written yet"
    )
