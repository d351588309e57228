"""The process grid of a run: ``MPI.Compute_dims`` in an MPI program, its equal elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import STARTUP, modules_loaded, mpirun, test_env

from deisa_simulation.grid import process_grid, squarest

# the rank counts the tests and the demo use, and the grids deisa-run has always given them
GRIDS = {1: (1, 1), 2: (2, 1), 3: (3, 1), 4: (2, 2), 6: (3, 2), 7: (7, 1), 8: (4, 2), 12: (4, 3)}


@pytest.mark.parametrize(("ranks", "grid"), sorted(GRIDS.items()))
def test_process_grid_outside_mpi_is_the_squarest(ranks: int, grid: tuple[int, int]) -> None:
    assert process_grid(ranks) == squarest(ranks) == grid


def test_process_grid_needs_a_rank() -> None:
    with pytest.raises(ValueError, match="at least 1 rank, not 0"):
        process_grid(0)


def test_asking_for_a_grid_does_not_start_mpi() -> None:
    loaded = modules_loaded("from deisa_simulation.grid import process_grid\nprocess_grid(6)")
    assert "deisa_simulation.grid" in loaded and "mpi4py.MPI" not in loaded


PROBE = """
import json
from mpi4py import MPI
from deisa_simulation.grid import process_grid, squarest
grids = {n: [process_grid(n), list(MPI.Compute_dims(n, 2)), squarest(n)] for n in range(1, 72)}
print(json.dumps(grids))
"""


def test_process_grid_in_an_mpi_program_is_compute_dims_and_agrees_up_to_71_ranks() -> None:
    proc = subprocess.run(
        mpirun(1, sys.executable, "-c", PROBE),
        env=test_env(),
        capture_output=True,
        text=True,
        timeout=STARTUP,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    grids = json.loads(proc.stdout.splitlines()[-1])
    for n, (ours, library, fallback) in grids.items():
        assert ours == library == fallback, n
