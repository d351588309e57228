"""Tests of deisa.analysis.splitter on a real 2-process LocalCluster."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from conftest import scatter_blocks
from distributed import Client, wait

from deisa.analysis.splitter import (
    Factoring,
    OverDecomposition,
    Static,
    measure_incoming_transfers,
    split,
)

pytestmark = pytest.mark.timeout(60)

ROW_CHUNKS = (3, 5, 2, 4, 1, 6)  # uneven on purpose
COL_CHUNKS = (2, 3)


@pytest.fixture(scope="module")
def client(local_client: Client) -> Client:
    return local_client


def indexed_field() -> np.ndarray:
    """field[r, c] = 1000 r + c, so every value tells its global position."""
    rows, cols = sum(ROW_CHUNKS), sum(COL_CHUNKS)
    return 1000.0 * np.arange(rows)[:, None] + np.arange(cols)[None, :]


def place(client: Client, name: str, by_row_band: bool = True) -> da.Array:
    """Scatter the indexed field: contiguous row bands per worker, or columns across workers."""
    workers = sorted(client.nthreads())
    n_bands = len(ROW_CHUNKS)

    def owner(i: int, j: int) -> str:
        if by_row_band:
            return workers[i * len(workers) // n_bands]
        return workers[j % len(workers)]

    return scatter_blocks(client, indexed_field(), (ROW_CHUNKS, COL_CHUNKS), owner, name)


def _rows_and_columns(blocks: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    rows = np.concatenate([b[:, 0] // 1000 for b in blocks]).astype(np.int64)
    cols = np.concatenate([b[0, :] % 1000 for b in blocks]).astype(np.int64)
    return rows, cols


def test_split_covers_every_block_exactly_once(client: Client) -> None:
    x = place(client, "cover")
    for keep_rows_whole in (False, True):
        parts = split(x, keep_rows_whole=keep_rows_whole)
        indexes = [i for part in parts for i in part.get_indexes()]
        assert sorted(indexes) == sorted(np.ndindex(*x.numblocks))


def test_partition_indexes_match_blocks_received(client: Client) -> None:
    x = place(client, "indexes")
    parts = split(x, keep_rows_whole=True)
    assert len(parts) == 2  # static: one partition per worker thread
    futures = parts.map(_rows_and_columns)
    for part, (rows, cols) in zip(parts, client.gather(futures), strict=True):
        np.testing.assert_array_equal(part.get_item_indexes(axis=0), rows)
        np.testing.assert_array_equal(part.get_item_indexes(axis=1), cols)
        assert all(client.who_has([f])[f.key] == (part.worker,) for f in part.futures)


def test_listing5_loop_reads_naturally(client: Client) -> None:
    x = place(client, "listing5")
    partials = []
    for partition in split(x):
        partials.append(partition.submit(lambda blocks: sum(float(b.sum()) for b in blocks)))
    assert sum(client.gather(partials)) == pytest.approx(indexed_field().sum())


@pytest.mark.parametrize(
    ("policy", "n_units", "n_threads", "expected"),
    [
        (Static(), 10, 2, [5, 5]),
        (Static(), 1, 4, [1]),
        (OverDecomposition(per_thread=3), 10, 2, [2, 2, 2, 2, 1, 1]),
        (Factoring(), 16, 2, [4, 4, 2, 2, 1, 1, 1, 1]),
        (Factoring(), 3, 1, [2, 1]),
    ],
)
def test_policy_sizes(policy, n_units: int, n_threads: int, expected: list[int]) -> None:
    assert policy.sizes(n_units, n_threads) == expected


def test_policy_by_name_and_errors(client: Client) -> None:
    x = place(client, "policy")
    assert len(split(x, "overdecomposition", keep_rows_whole=True)) == 4  # 2 per thread
    factored = split(x, "factoring", keep_rows_whole=False)
    for worker in {p.worker for p in factored}:
        sizes = [len(p) for p in factored if p.worker == worker]
        assert sizes == sorted(sizes, reverse=True) and sum(sizes) == 6
    with pytest.raises(ValueError, match=r"policy='guided' is not one of"):
        split(x, "guided")
    with pytest.raises(ValueError, match=r"per_thread=0 must be ≥ 1"):
        OverDecomposition(per_thread=0)


def test_local_phase_moves_no_data_when_row_bands_share_a_worker(client: Client) -> None:
    x = place(client, "local")
    parts = split(x, keep_rows_whole=True)
    assert parts.bytes_to_move == 0
    with measure_incoming_transfers(client) as moved:
        wait(parts.map(_rows_and_columns))
    assert (moved.count, moved.nbytes, moved.exact) == (0, 0, True)


def test_spread_row_bands_move_the_reported_bytes(client: Client) -> None:
    x = place(client, "spread", by_row_band=False)
    parts = split(x, keep_rows_whole=True)
    # every band has one block per worker; the smaller column block (2 of 5 columns) moves
    expected = sum(rows * COL_CHUNKS[0] * 8 for rows in ROW_CHUNKS)
    assert parts.bytes_to_move == expected
    with measure_incoming_transfers(client) as moved:
        wait(parts.map(_rows_and_columns))
    assert moved.count > 0
    assert moved.nbytes == expected


def test_split_refuses_blocks_not_in_memory(client: Client) -> None:
    lazy = da.ones((8, 4), chunks=(2, 4)) + 1
    with pytest.raises(ValueError, match="persist the array first"):
        split(lazy, client=client)
    persisted = client.persist(lazy)
    assert sum(len(p) for p in split(persisted, client=client)) == 4
