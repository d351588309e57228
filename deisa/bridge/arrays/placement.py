"""Placement policies: which Dask worker receives each rank's block.

A placement is fixed for the whole run, so a rank always sends an array's blocks to the same
worker. Three policies:

``round_robin``
    The DEISA paper's default: rank ``r`` sends to worker ``r % W``. Balances memory; neighbouring
    blocks usually end up on different workers.
``locality``
    Contiguous ranges of blocks, in row-major grid order, go to the same worker, so that the
    blocks of a row band share a worker whenever there are at least as many row bands as
    workers. A local reduction over whole rows (PCA: samples are rows) then moves no data.
``node_local``
    Each rank sends to a worker on its own node, so no block crosses the network: the ranks of
    a node are spread over that node's workers as ``locality`` spreads all ranks over all
    workers (whole row bands per worker where the node holds enough of them). A worker is on a
    rank's node when the host of its address is one of the node's IP addresses or its host
    name (:class:`Host`). When no worker shares a node with any rank (workers on nodes of their
    own), there is nothing local to keep and the policy places as ``locality``; when some
    nodes with ranks have workers and others have none, it is an error naming those nodes.

``round_robin`` and ``locality`` need only the decomposition and the workers
(:data:`Placement`); ``node_local`` also needs each rank's :class:`Host`
(:func:`needs_hosts`). :func:`place` calls any of them.

Runs in a simulation rank: pure decisions, no thread of its own, made on its main thread (rank
0's loop thread places again when a worker joins or leaves).

Imports numpy, :mod:`.decomposition` and, for a rank's host (``node_local``), psutil.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

from .decomposition import Decomposition

Placement = Callable[[Decomposition, Sequence[str]], list[str]]


@dataclass(frozen=True)
class Host:
    """The machine a rank runs on: its host name and the IP addresses of its interfaces.

    Two ranks are on the same node when their hosts are equal. See :func:`this_host`.
    """

    name: str
    addresses: frozenset[str] = frozenset()

    def runs(self, worker: str) -> bool:
        """Whether the worker at address ``worker`` (``tcp://10.0.0.3:39211``) is on this host."""
        host = worker_host(worker)
        return host == self.name or host in self.addresses


def this_host() -> Host:
    """The :class:`Host` of the calling process: ``socket.gethostname()`` and every IPv4 and
    IPv6 address of its network interfaces (loopback included)."""
    import psutil  # a dependency of distributed

    families = (socket.AF_INET, socket.AF_INET6)
    addresses = {
        address.address.split("%", 1)[0]  # fe80::1%eth0: the zone is no part of the address
        for interface in psutil.net_if_addrs().values()
        for address in interface
        if address.family in families
    }
    return Host(socket.gethostname(), frozenset(addresses))


def worker_host(address: str) -> str:
    """The host part of a worker address: ``tcp://10.0.0.3:39211`` -> ``10.0.0.3``,
    ``tls://[::1]:80`` -> ``::1``; an address without a scheme is taken as ``host:port``."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    return parts.hostname or address


def round_robin(decomposition: Decomposition, workers: Sequence[str]) -> list[str]:
    """Worker of each rank: ``workers[rank % len(workers)]``."""
    return [workers[rank % len(workers)] for rank in range(decomposition.nranks)]


def locality(decomposition: Decomposition, workers: Sequence[str]) -> list[str]:
    """Worker of each rank: whole row bands per worker when possible, else contiguous ranges."""
    grid = decomposition.grid_shape
    nworkers = len(workers)
    out = []
    for index in decomposition.block_index:
        if grid[0] >= nworkers:
            slot = index[0] * nworkers // grid[0]
        else:
            linear = int(np.ravel_multi_index(index, grid))
            slot = linear * nworkers // int(np.prod(grid))
        out.append(workers[slot])
    return out


def node_local(
    decomposition: Decomposition, workers: Sequence[str], hosts: Sequence[Host]
) -> list[str]:
    """Worker of each rank: one on the rank's node, whole row bands per worker when possible.

    Parameters
    ----------
    decomposition
        The array's blocks; ``block_index[rank]`` places each rank's block on the grid.
    workers
        Worker addresses, in the same order on every rank.
    hosts
        ``hosts[rank]``: where each rank runs (:func:`this_host`, gathered from every rank).

    Returns
    -------
    list of str
        The worker of each rank. The ranks of a node, in row-major order of their blocks, are
        split among the node's workers in contiguous ranges, by row band when the node has at
        least as many row bands as workers. If no worker is on any rank's node, the
        ``locality`` placement over all workers.

    Raises
    ------
    ValueError
        ``hosts`` does not have one entry per rank; a worker is on several of the ranks' nodes
        (a loopback address while the ranks run on several nodes); or some nodes have ranks
        and workers while others, named, have ranks and no worker.

    Examples
    --------
    >>> from deisa.bridge.arrays.decomposition import ArraySpec
    >>> specs = [ArraySpec("f8", (4, 4), (2 * i, 2 * j), (2, 2)) for i in (0, 1) for j in (0, 1)]
    >>> dec = Decomposition.from_specs("t", specs)
    >>> a, b = Host("a", frozenset({"10.0.0.1"})), Host("b", frozenset({"10.0.0.2"}))
    >>> node_local(dec, ["tcp://10.0.0.1:4001", "tcp://10.0.0.2:4001"], [a, a, b, b])
    ['tcp://10.0.0.1:4001', 'tcp://10.0.0.1:4001', 'tcp://10.0.0.2:4001', 'tcp://10.0.0.2:4001']
    """
    if len(hosts) != decomposition.nranks:
        raise ValueError(
            f"placement='node_local': {len(hosts)} host(s) given for {decomposition.nranks} ranks"
        )
    ranks_on: dict[Host, list[int]] = {}
    for rank, host in enumerate(hosts):
        ranks_on.setdefault(host, []).append(rank)
    workers_on: dict[Host, list[str]] = {host: [] for host in ranks_on}
    for worker in workers:
        nodes = [host for host in ranks_on if host.runs(worker)]
        if len(nodes) > 1:
            raise ValueError(
                f"placement='node_local': worker {worker} matches the nodes "
                f"{', '.join(_label(h, ranks_on[h]) for h in nodes)}; give workers an address "
                "of the network between the nodes (dask worker --interface), not loopback"
            )
        if nodes:
            workers_on[nodes[0]].append(worker)
    bare = [host for host, local in workers_on.items() if not local]
    if len(bare) == len(ranks_on):
        return locality(decomposition, workers)
    if bare:
        where = ", ".join(_label(host, ranks_on[host]) for host in bare)
        has = ", ".join(
            f"{host.name} ({len(local)})" for host, local in workers_on.items() if local
        )
        raise ValueError(
            f"placement='node_local': no Dask worker on node {where}, while other nodes with "
            f"ranks have workers: {has}; start workers on every simulation node (or none), or "
            "choose placement='locality'"
        )
    out = [""] * decomposition.nranks
    for host, ranks in ranks_on.items():
        for rank, worker in zip(
            ranks, _spread(decomposition, ranks, workers_on[host]), strict=True
        ):
            out[rank] = worker
    return out


def _spread(
    decomposition: Decomposition, ranks: Sequence[int], workers: Sequence[str]
) -> list[str]:
    """The worker of each of ``ranks`` (one node's): ``locality`` restricted to them."""
    grid = decomposition.grid_shape
    index = decomposition.block_index
    order = sorted(ranks, key=lambda r: int(np.ravel_multi_index(index[r], grid)))
    band = {row: i for i, row in enumerate(sorted({index[r][0] for r in ranks}))}
    nworkers = len(workers)
    slot = {}
    for position, rank in enumerate(order):
        if len(band) >= nworkers:
            slot[rank] = band[index[rank][0]] * nworkers // len(band)
        else:
            slot[rank] = position * nworkers // len(order)
    return [workers[slot[rank]] for rank in ranks]


def _label(host: Host, ranks: Sequence[int]) -> str:
    shown = ", ".join(map(str, ranks[:4])) + (", ..." if len(ranks) > 4 else "")
    return f"{host.name} (ranks {shown})"


PLACEMENTS: dict[str, Callable[..., list[str]]] = {
    "round_robin": round_robin,
    "locality": locality,
    "node_local": node_local,
}
_NEED_HOSTS = frozenset({"node_local"})


def get_placement(name: str) -> Callable[..., list[str]]:
    """The placement policy called ``name``; call it through :func:`place`, which gives the
    hosts to the policies that need them.

    Raises
    ------
    ValueError
        Naming the accepted values.
    """
    try:
        return PLACEMENTS[name]
    except (KeyError, TypeError):  # TypeError: not hashable, so not a name
        raise ValueError(
            f"placement={name!r} is not a placement policy; choose one of {sorted(PLACEMENTS)}"
        ) from None


def needs_hosts(name: str) -> bool:
    """Whether the policy ``name`` needs each rank's :class:`Host` (``node_local``)."""
    return name in _NEED_HOSTS


def place(
    name: str,
    decomposition: Decomposition,
    workers: Sequence[str],
    hosts: Sequence[Host] | None = None,
) -> list[str]:
    """The worker of each rank under the policy ``name``.

    Parameters
    ----------
    hosts
        Each rank's :class:`Host`; needed when :func:`needs_hosts` says so, ignored otherwise.

    Raises
    ------
    ValueError
        An unknown policy, ``hosts`` missing for ``node_local``, or the policy's own errors.
    """
    policy = get_placement(name)
    if not needs_hosts(name):
        return policy(decomposition, workers)
    if hosts is None:
        raise ValueError(f"placement={name!r} needs the host of every rank")
    return policy(decomposition, workers, hosts)
