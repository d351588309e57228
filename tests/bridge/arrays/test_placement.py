"""Placement policies: round robin by rank, row bands kept on one worker, and node-local."""

from __future__ import annotations

import pytest
from test_decomposition import grid_specs

from deisa.bridge.arrays.decomposition import Decomposition
from deisa.bridge.arrays.placement import (
    Host,
    get_placement,
    locality,
    needs_hosts,
    node_local,
    place,
    round_robin,
    this_host,
    worker_host,
)

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
    with pytest.raises(
        ValueError, match=r"placement='nearest'.*\['locality', 'node_local', 'round_robin'\]"
    ):
        get_placement("nearest")


# -- node_local ---------------------------------------------------------------------------------


def node(i: int) -> Host:
    return Host(f"node{i}", frozenset({"127.0.0.1", "::1", f"10.77.0.{10 + i}"}))


def worker(i: int, port: int = 40000) -> str:
    return f"tcp://10.77.0.{10 + i}:{port}"


def test_node_local_keeps_every_rank_on_its_node() -> None:
    # 4x2 grid, ranks 0-3 on node1 and 4-7 on node2 (srun's block distribution), two workers
    # per node, listed interleaved as the scheduler may list them
    dec = Decomposition.from_specs("t", grid_specs((16, 8), (4, 2)))
    hosts = [node(1)] * 4 + [node(2)] * 4
    workers = [worker(1, 1), worker(2, 1), worker(1, 2), worker(2, 2)]
    placed = node_local(dec, workers, hosts)
    assert (
        placed == [worker(1, 1)] * 2 + [worker(1, 2)] * 2 + [worker(2, 1)] * 2 + [worker(2, 2)] * 2
    )
    assert place("node_local", dec, workers, hosts) == placed


def test_node_local_balances_a_node_with_fewer_row_bands_than_workers() -> None:
    # one row band of 4 blocks per node, two workers per node: contiguous halves of the band
    dec = Decomposition.from_specs("t", grid_specs((8, 16), (2, 4)))
    hosts = [node(1)] * 4 + [node(2)] * 4
    workers = [worker(1, 1), worker(1, 2), worker(2, 1), worker(2, 2)]
    placed = node_local(dec, workers, hosts)
    assert (
        placed == [worker(1, 1)] * 2 + [worker(1, 2)] * 2 + [worker(2, 1)] * 2 + [worker(2, 2)] * 2
    )


def test_node_local_follows_the_hosts_not_the_rank_order() -> None:
    # cyclic distribution: even ranks (row bands 0 and 2) on node1, odd ones on node2
    dec = Decomposition.from_specs("t", grid_specs((16, 4), (4, 1)))
    hosts = [node(1), node(2), node(1), node(2)]
    placed = node_local(dec, [worker(2), worker(1)], hosts)
    assert placed == [worker(1), worker(2), worker(1), worker(2)]


def test_node_local_matches_workers_by_host_name_too() -> None:
    dec = Decomposition.from_specs("t", grid_specs((8, 8), (2, 1)))
    hosts = [node(1), node(2)]
    assert node_local(dec, ["tcp://node2:1", "tcp://node1:1"], hosts) == [
        "tcp://node1:1",
        "tcp://node2:1",
    ]


def test_node_local_without_workers_beside_any_rank_is_locality() -> None:
    # workers on nodes of their own: no node-local choice to make
    dec = Decomposition.from_specs("t", grid_specs((12, 12), (6, 2)))
    hosts = [node(2)] * 6 + [node(3)] * 6
    workers = [worker(0), worker(1)]
    assert node_local(dec, workers, hosts) == locality(dec, workers)


def test_node_local_names_a_node_with_ranks_and_no_worker() -> None:
    dec = Decomposition.from_specs("t", grid_specs((12, 8), (3, 2)))
    hosts = [node(1)] * 2 + [node(2)] * 2 + [node(3)] * 2
    with pytest.raises(
        ValueError,
        match=r"no Dask worker on node node2 \(ranks 2, 3\), node3 \(ranks 4, 5\), while other "
        r"nodes with ranks have workers: node1 \(1\)",
    ):
        node_local(dec, [worker(1), worker(0)], hosts)


def test_node_local_refuses_a_worker_on_loopback_between_nodes() -> None:
    dec = Decomposition.from_specs("t", grid_specs((8, 8), (2, 1)))
    with pytest.raises(ValueError, match=r"worker tcp://127.0.0.1:5 matches the nodes node1"):
        node_local(dec, ["tcp://127.0.0.1:5"], [node(1), node(2)])


def test_node_local_needs_one_host_per_rank() -> None:
    dec = Decomposition.from_specs("t", grid_specs((8, 8), (2, 2)))
    with pytest.raises(ValueError, match="3 host\\(s\\) given for 4 ranks"):
        node_local(dec, [worker(1)], [node(1)] * 3)
    with pytest.raises(ValueError, match="placement='node_local' needs the host of every rank"):
        place("node_local", dec, [worker(1)])


def test_one_machine_is_one_node() -> None:
    # a local run: ranks and workers on loopback of the same machine
    here = this_host()
    assert "127.0.0.1" in here.addresses
    dec = Decomposition.from_specs("t", grid_specs((8, 8), (2, 2)))
    workers = ["tcp://127.0.0.1:4001", "tcp://127.0.0.1:4002"]
    assert node_local(dec, workers, [here] * 4) == locality(dec, workers)


def test_only_node_local_needs_hosts() -> None:
    assert needs_hosts("node_local")
    assert not needs_hosts("round_robin") and not needs_hosts("locality")
    dec = Decomposition.from_specs("t", grid_specs((8, 8), (2, 2)))
    assert place("round_robin", dec, WORKERS) == round_robin(dec, WORKERS)


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("tcp://10.0.0.3:39211", "10.0.0.3"),
        ("tls://[::1]:80", "::1"),
        ("ucx://node7:1234", "node7"),
        ("10.0.0.4:1", "10.0.0.4"),
    ],
)
def test_worker_host(address: str, host: str) -> None:
    assert worker_host(address) == host
