"""Where the processes of a Slurm job go: its layout, node by node.

:func:`layout` splits the allocation into the scheduler's node, the worker nodes and the
simulation nodes; :func:`allocation` says what each node runs and the CPUs it takes (the job's
``#SBATCH`` header asks for them), :func:`describe_layout` the same as the job script's comment
lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from .settings import RunSettings, SlurmSettings

SCHEDULER_NODES = ("auto", "own", "shared")


def layout(
    nodes: int, worker_nodes: int | None = None, scheduler_node: str = "auto"
) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((first, count), (first, count))`` of the worker nodes and the simulation nodes.

    The scheduler and the analytics client always run on node 0; the worker nodes come next,
    then the simulation nodes.

    Parameters
    ----------
    nodes
        Nodes of the allocation; ``1`` runs everything on one node.
    worker_nodes
        Nodes that run the workers and no rank; ``0``: the workers run on the simulation nodes,
        beside the ranks (co-located). Default: ``max(1, (nodes - 1) // 2)``, or ``0`` on one
        node.
    scheduler_node
        ``"own"``: node 0 runs only the scheduler and the client; ``"shared"``: node 0 is also
        the first worker node (co-located: the first simulation node); ``"auto"``: ``"own"``
        when ``nodes >= 3`` and the other nodes are enough, else ``"shared"``.

    Raises
    ------
    ValueError
        Counts that leave no node for the simulation, or an unknown ``scheduler_node``.

    Examples
    --------
    >>> layout(3, 1)  # node 0: scheduler + client; node 1: workers; node 2: ranks
    ((1, 1), (2, 1))
    >>> layout(2, 1)  # node 0: scheduler + client + workers; node 1: ranks
    ((0, 1), (1, 1))
    >>> layout(2, 0)  # both nodes: ranks + workers; node 0 also the scheduler + client
    ((0, 2), (0, 2))
    """
    if scheduler_node not in SCHEDULER_NODES:
        raise ValueError(f"scheduler_node={scheduler_node!r}: one of {', '.join(SCHEDULER_NODES)}")
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes={nodes!r} must be a positive integer")
    if worker_nodes is None:
        worker_nodes = max(1, (nodes - 1) // 2) if nodes > 1 else 0
    if not isinstance(worker_nodes, int) or not 0 <= worker_nodes <= nodes - 1:
        raise ValueError(
            f"worker_nodes={worker_nodes!r} must be between 0 (workers beside the ranks) and "
            f"nodes - 1 = {nodes - 1}, so that at least one node runs the simulation"
        )
    if scheduler_node == "auto":
        own = nodes >= 3 and nodes >= worker_nodes + 2
    else:
        own = scheduler_node == "own"
    first = 1 if own else 0
    if own and nodes < worker_nodes + 2:
        others = f"{worker_nodes} worker node(s), " if worker_nodes else ""
        raise ValueError(
            f"scheduler_node='own' with worker_nodes={worker_nodes} needs nodes >= "
            f"{worker_nodes + 2} (node 0 for the scheduler, {others}at least one simulation "
            f"node); nodes={nodes}"
        )
    if worker_nodes == 0:
        return (first, nodes - first), (first, nodes - first)
    return (first, worker_nodes), (first + worker_nodes, nodes - first - worker_nodes)


@dataclass(frozen=True)
class Node:
    """What one node of the allocation runs."""

    index: int
    scheduler: bool
    workers: int
    ranks: int
    cpus: int


def _even(total: int, count: int) -> list[int]:
    """``total`` tasks over ``count`` nodes as Slurm spreads a step's tasks: evenly, the first
    nodes taking one more."""
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


def _on_nodes(
    nodes: int,
    worker_nodes: tuple[int, int],
    simulation_nodes: tuple[int, int],
    workers: int,
    threads: int,
    ranks: int,
) -> list[Node]:
    """Every node's scheduler (node 0), workers and ranks, and the CPUs they take."""
    on_node = {i: [0, 0] for i in range(nodes)}
    for (first, count), total, slot in ((worker_nodes, workers, 0), (simulation_nodes, ranks, 1)):
        for offset, n in enumerate(_even(total, count)):
            on_node[first + offset][slot] = n
    return [
        Node(i, i == 0, w, r, (2 if i == 0 else 0) + w * threads + r)
        for i, (w, r) in on_node.items()
    ]


def describe_layout(plan: list[Node], threads: int) -> str:
    """The layout as comment lines, one per node (or per run of identical nodes)."""
    lines: list[tuple[list[int], str]] = []
    for node in plan:
        parts = ["scheduler + client"] if node.scheduler else []
        if node.workers:
            worker = "worker" if node.workers == 1 else "workers"
            thread = "thread" if threads == 1 else "threads"
            parts.append(f"{node.workers} {worker} x {threads} {thread}")
        if node.ranks:
            parts.append(f"{node.ranks} rank{'s' if node.ranks > 1 else ''}")
        text = f"{', '.join(parts)} ({node.cpus} CPUs)"
        if lines and lines[-1][1] == text and not node.scheduler:
            lines[-1][0].append(node.index)
        else:
            lines.append(([node.index], text))
    return "\n".join(f"#   {_nodes(indices[0], len(indices))}: {text}" for indices, text in lines)


def allocation(
    settings: RunSettings, slurm: SlurmSettings
) -> tuple[list[Node], tuple[int, int], tuple[int, int]]:
    """What each node runs, and the (first, count) of the worker and the simulation nodes.

    Raises
    ------
    ValueError
        A layout that cannot work (see :func:`layout`), or a node left without a task.
    """
    worker_nodes, sim_nodes = layout(slurm.nodes, slurm.worker_nodes, slurm.scheduler_node)
    workers, ranks = settings.workers, settings.ranks
    if workers < worker_nodes[1] or ranks < sim_nodes[1]:
        raise ValueError(
            f"{workers} workers on {worker_nodes[1]} nodes and {ranks} ranks on {sim_nodes[1]} "
            "nodes: every node needs at least one task"
        )
    plan = _on_nodes(slurm.nodes, worker_nodes, sim_nodes, workers, settings.threads, ranks)
    return plan, worker_nodes, sim_nodes


def _nodes(first: int, count: int) -> str:
    return f"node {first}" if count == 1 else f"nodes {first}-{first + count - 1}"
