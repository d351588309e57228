"""Placement policies: round robin by rank, and row bands kept on one worker."""

from __future__ import annotations

import pytest
from test_decomposition import grid_specs

from deisa.decomposition import Decomposition
from deisa.placement import get_placement, locality, round_robin

WORKERS = ["w0", "w1", "w2"]


def test_round_robin_cycles_over_workers_by_rank() -> None:
    dec = Decomposition.from_specs("t", grid_specs((8, 8), (2, 4)))
    assert round_robin(dec, WORKERS) == ["w0", "w1", "w2", "w0", "w1", "w2", "w0", "w1"]


def test_locality_keeps_each_row_band_on_one_worker() -> None:
    dec = Decomposition.from_specs("t", grid_specs((12, 12), (6, 2)))
    placed = locality(dec, WORKERS)
    bands = [set(placed[2 * row : 2 * row + 2]) for row in range(6)]
    assert all(len(band) == 1 for band in bands)
    assert [next(iter(b)) for b in bands] == ["w0", "w0", "w1", "w1", "w2", "w2"]


def test_locality_falls_back_to_contiguous_ranges() -> None:
    dec = Decomposition.from_specs("t", grid_specs((8, 9), (2, 3)))  # 2 row bands, 3 workers
    assert locality(dec, WORKERS) == ["w0", "w0", "w1", "w1", "w2", "w2"]


def test_unknown_placement_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"placement='nearest'.*\['locality', 'round_robin'\]"):
        get_placement("nearest")
