"""The Python heat solver: configuration checks and physics (serial reference)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from conftest import run_heat, write_config

from deisa_simulation.heat import HeatConfig, bands, initial_field, reference_field


def test_heat_field_evolves_and_boundaries_hold() -> None:
    config = HeatConfig(global_size=(24, 24), process_grid=(1, 1), steps=3, output_period=20)
    initial = initial_field(config.global_size, (0, 0), config.global_size)
    fields = [reference_field(config, s) for s in range(3)]
    assert not np.array_equal(fields[0], initial) and not np.array_equal(fields[1], fields[0])
    assert all(f.min() >= 0.0 and f.max() <= 1.0 for f in fields)
    heat = [initial.sum(), *(f.sum() for f in fields)]
    # interior diffusion conserves heat; the cold boundary only absorbs it
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(heat))
    assert heat[-1] < 0.99 * heat[0]
    np.testing.assert_allclose(fields[-1], fields[-1].T, rtol=0, atol=1e-15)  # symmetric problem
    assert fields[-1][0].max() < fields[-1][12].max()  # edges stay colder than the centre


def test_heat_mpi_run_without_bridge(tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim.yml", global_size=[9, 7], process_grid=[3, 1], steps=2)
    proc = run_heat(3, config, "--timings", str(tmp_path / "t.json"))
    assert proc.returncode == 0
    assert (tmp_path / "t.json").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("global_size: [8, 8]\nsteps: 2\nstep: 3\n", r"unknown key\(s\) \['step'\]"),
        ("global_size: [8]\n", "global_size: expected two positive integers"),
        ("steps: 0\n", "steps: expected a positive integer, got 0"),
        ("global_size: [2, 8]\nprocess_grid: [4, 1]\n", "process_grid: 4 ranks along axis 0"),
        ("- a list\n", "expected a mapping"),
    ],
)
def test_heat_config_errors_name_the_key(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        HeatConfig.from_yaml(path)


def test_heat_rank_count_must_match_the_grid(tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim.yml", process_grid=[2, 2])
    proc = run_heat(2, config, check=False)
    assert proc.returncode != 0
    assert "process_grid [2, 2] needs 4 ranks, mpirun gave 2" in proc.stderr


def test_a_block_as_boxes_is_bands_of_its_rows_at_their_global_start() -> None:
    """``--boxes N`` (bench.scheduler_messages --boxes): the block cut into N bands of whole
    rows, each at its place in the global array, views of the block; none empty."""
    block = np.arange(5 * 3, dtype=float).reshape(5, 3)
    boxes = bands(block, (10, 6), 3)
    assert [start for start, _ in boxes] == [(10, 6), (11, 6), (13, 6)]
    np.testing.assert_array_equal(np.concatenate([b for _, b in boxes]), block)
    assert all(np.shares_memory(b, block) for _, b in boxes)
    assert len(bands(block, (0, 0), 8)) == 5  # more boxes than rows: a row each
