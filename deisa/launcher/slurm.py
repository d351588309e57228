"""A Slurm batch script that co-launches the whole DEISA pipeline in one allocation.

:func:`job_script` fills ``deisa/templates/slurm_job.sh``: a Dask scheduler and the analytics
client (``deisa-run analytics``) on node 0, the Dask workers, then the MPI ranks of the heat
simulation (the Python solver, or the C solver through PDI and the deisa plugin), each a
concurrent ``srun --exact`` step, as in the DEISA paper's experiments. The simulation's command
is :func:`deisa.launcher.solver.simulation_command`'s, as for a local run.

Three parameters choose the layout (:func:`layout`): ``nodes``, ``worker_nodes`` (nodes of
their own for the workers, or ``0``: workers beside the ranks on the simulation nodes) and
``scheduler_node`` (whether the scheduler and the client share node 0 with workers and ranks).
The script waits for the scheduler file (the scheduler takes a free port), stops the client if
the simulation fails (and the reverse), and exits non-zero when either failed. Each job writes
into its own directory ``<output>/<job id>/``: ``results.json``, ``explained_variance.png``,
``simulation.yml``, ``timings.json``, ``scheduler.json`` and ``logs/``, one log per task named
after its node (``workers-<node>-<task>.log``...).

From the command line::

    deisa-run slurm --ranks 4 --workers 2 > job.sh
    deisa-run slurm --ranks 4 --solver c > job.sh      # the C solver through PDI
    sbatch job.sh

See ``docs/slurm.md``.
"""

from __future__ import annotations

import shlex
import string
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..bridge.options import BridgeOptionError, BridgeOptions
from .config import find_path, squarest_grid
from .processes import THREAD_PINS
from .solver import resolve_solver, simulation_command

TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "slurm_job.sh"
# In the C solver's PDI YAML, replaced by $SLURM_JOB_ID when the job starts: the scheduler file
# is per job, and the YAML cannot go through an unquoted heredoc (PDI's `$` expressions).
JOB_ID = "__SLURM_JOB_ID__"


class _ScriptTemplate(string.Template):
    delimiter = "@@"  # `$` belongs to bash


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


def job_script(
    *,
    ranks: int = 4,
    workers: int = 2,
    threads: int = 1,
    nodes: int = 1,
    worker_nodes: int | None = None,
    scheduler_node: str = "auto",
    time: str = "00:10:00",
    partition: str | None = None,
    output: str | Path = "deisa-output",
    workdir: str | Path = ".",
    python: str | None = None,
    simulation: dict[str, Any] | None = None,
    job_name: str = "deisa",
    mpi: str = "pmix",
    placement: str = "round_robin",
    buffer_nb: int | None = 2,
    array: str = "gtemp",
    n_components: int = 4,
    timeout: float = 300.0,
    interface: str | None = None,
    srun_args: Sequence[str] = (),
    solver: str = "python",
    build_dir: str | Path = "build",
    pdi_config: str | Path = "configs/heat_deisa.yml",
    stop_when_converged: float | None = None,
) -> str:
    """The text of a batch script running scheduler, workers, client and simulation together.

    Parameters
    ----------
    ranks
        MPI ranks of the simulation; must equal the product of ``simulation["process_grid"]``
        when that is given.
    workers, threads
        Dask workers, and threads (CPUs) per worker.
    nodes, worker_nodes, scheduler_node
        Nodes of the allocation, how many run the workers alone (``0``: the workers run
        beside the ranks), and whether the scheduler and the client get a node of their own
        (see :func:`layout`). The script's comments draw the layout, node by node.
    time, partition, job_name
        ``#SBATCH --time``, ``--partition`` (``None``: the cluster's default) and ``--job-name``.
    output, workdir
        Output directory (made absolute) and the job's working directory. The job writes
        ``slurm-<job>.out`` there and everything else into its own directory ``<job>/``
        (``results.json``, ``simulation.yml``, the scheduler file, ``logs/``...), so jobs
        sharing ``output`` do not overwrite each other.
    python
        Interpreter on the compute nodes, with deisa installed; default: this one.
    simulation
        Settings of ``configs/simulation.yml`` (``global_size``, ``process_grid``, ``steps``,
        ``output_period``); ``process_grid`` defaults to the squarest grid of ``ranks``.
    mpi
        ``srun --mpi`` plugin of the simulation step (``pmix`` for OpenMPI 4/5).
    placement, buffer_nb, array
        Bridge settings of the simulation (``buffer_nb=None``: unbounded; ``0`` is refused;
        ``placement="node_local"`` sends each block to a worker on its rank's node). The
        Bridge fixes its placement once all ``workers`` have connected (``min_workers``),
        waiting up to ``timeout``.
    n_components, timeout
        PCA components of the client, and seconds it waits without progress before failing.
    interface
        Network interface of the scheduler and workers (``--interface``) and of Open MPI's
        TCP traffic (``OMPI_MCA_btl_tcp_if_include``), e.g. ``ib0``.
    srun_args
        Extra options for every ``srun`` step, e.g. ``["--mem-per-cpu=2G"]`` where memory
        is a consumable resource.
    solver
        ``"python"`` (``deisa_simulation.heat``), ``"c"`` (``build_dir/simulation/heat``
        through PDI and the deisa plugin) or ``"auto"`` (C when it can run here, see
        :func:`deisa.launcher.solver.c_solver_problem`). The nodes must see the same build
        and PDI.
    build_dir, pdi_config
        CMake build directory and PDI YAML of the C solver (relative: from the current
        directory, else from the repository); the script writes the YAML, its deisa block set
        for the job, to ``output/<job>/pdi.yml``.
    stop_when_converged
        The client's ``--stop-when-converged EPS``: it stops the simulation once the PCA has
        converged (:func:`deisa.launcher.pipeline.analyze_stream`); ``None``: never.

    Returns
    -------
    str
        The script; submit it with ``sbatch``.

    Raises
    ------
    ValueError
        Counts, layout or process grid that cannot work; ``solver="c"`` when the C solver or
        its plugin is not built, PDI does not load, or ``pdi_config`` does not publish
        ``array`` (:class:`deisa.launcher.config.UsageError`, a ``ValueError``); Bridge
        options that :class:`deisa.bridge.options.BridgeOptions` refuses.

    Examples
    --------
    >>> script = job_script(ranks=4, workers=2, time="00:05:00")
    >>> "#SBATCH --ntasks=8" in script
    True
    """
    for name, value in (("ranks", ranks), ("workers", workers), ("threads", threads)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    (worker_first, n_worker_nodes), (sim_first, sim_nodes) = layout(
        nodes, worker_nodes, scheduler_node
    )
    if workers < n_worker_nodes or ranks < sim_nodes:
        raise ValueError(
            f"{workers} workers on {n_worker_nodes} nodes and {ranks} ranks on {sim_nodes} "
            "nodes: every node needs at least one task"
        )
    settings: dict[str, Any] = {"global_size": [256, 256], "steps": 10, "output_period": 10}
    settings.update(simulation or {})
    grid = settings.setdefault("process_grid", list(squarest_grid(ranks)))
    if grid[0] * grid[1] != ranks:
        raise ValueError(f"process_grid {grid} has {grid[0] * grid[1]} ranks, ranks={ranks}")
    output = Path(output).absolute()
    plan = _plan(
        nodes, (worker_first, n_worker_nodes), (sim_first, sim_nodes), workers, threads, ranks
    )
    extra = [f"#SBATCH --partition={partition}"] if partition else []
    if nodes > 1:
        # whole nodes, each with the CPUs its busiest node needs (steps split evenly)
        extra += ["#SBATCH --exclusive", f"#SBATCH --mincpus={max(n.cpus for n in plan)}"]
    quoted_interface = f" --interface {shlex.quote(interface)}" if interface else ""
    try:
        # the placement is fixed once every worker is there, however slowly they start
        bridge = BridgeOptions(
            placement=placement,
            buffer_nb=buffer_nb,
            min_workers=workers,
            connect_timeout=timeout,
        )
    except BridgeOptionError as exc:
        raise ValueError(str(exc)) from None
    build, pdi_path = find_path(build_dir), find_path(pdi_config)
    solver, _ = resolve_solver(solver, build, pdi_path)
    simulation_fields = _simulation_step(
        _Solver(solver, build, pdi_path, array, bridge), output=output
    )
    fields = {
        "job_name": job_name,
        "nodes": nodes,
        "ntasks": sum(node.cpus for node in plan),
        "time": time,
        "workdir": shlex.quote(str(Path(workdir).absolute())),
        "output": shlex.quote(str(output)),
        "extra_sbatch": "".join(line + "\n" for line in extra),
        "layout": _describe(plan, threads),
        "workers": workers,
        "threads": threads,
        "ranks": ranks,
        "python": shlex.quote(python or sys.executable),
        "simulation_yaml": yaml.safe_dump(settings, sort_keys=False, default_flow_style=None),
        "start_timeout": int(timeout),
        "srun_args": "".join(f" {shlex.quote(a)}" for a in srun_args),
        "interface": quoted_interface,
        "mpi_interface": _mpi_interface(interface),
        "worker_nodes": n_worker_nodes,
        "worker_first": worker_first,
        "simulation_nodes": sim_nodes,
        "simulation_first": sim_first,
        "array": shlex.quote(array),
        "n_components": n_components,
        "timeout": timeout,
        "stop_when_converged": (
            "" if stop_when_converged is None else f" --stop-when-converged {stop_when_converged}"
        ),
        "mpi": shlex.quote(mpi),
        "thread_pins": " ".join(f"{k}={v}" for k, v in THREAD_PINS.items()),
        **simulation_fields,
    }
    return _ScriptTemplate(TEMPLATE.read_text()).substitute(fields)


@dataclass(frozen=True)
class _Solver:
    solver: str
    build_dir: Path
    pdi_config: Path
    array: str
    bridge: BridgeOptions


def _shell_word(word: str) -> str:
    """``word`` for bash: a ``$VARIABLE...`` word in double quotes (expanded by the job),
    anything else quoted as it is."""
    return f'"{word}"' if word.startswith("$") else shlex.quote(word)


def _simulation_step(solver: _Solver, *, output: Path) -> dict[str, str]:
    """Template fields of the simulation step: ``solver`` (words), ``solver_setup``,
    ``simulation_command`` and ``timings`` (the client's ``--timings``, Python solver only)."""
    # The Python solver reads the job's scheduler file from the script's variable; the C
    # solver's PDI YAML is written by a quoted heredoc, where `sed` puts the job ID in.
    scheduler_file = (
        "$SCHEDULER_FILE" if solver.solver == "python" else f"{output}/{JOB_ID}/scheduler.json"
    )
    sim = simulation_command(
        solver,
        python="$PYTHON",
        sim_config="$OUT/simulation.yml",
        scheduler_file=scheduler_file,
        timings="$OUT/timings.json",
        pdi_file="$OUT/pdi.yml",
    )
    words = [_shell_word(w) for w in sim.argv]
    if "--array" in sim.argv:  # the Python solver's options, on a line of their own
        at = sim.argv.index("--array")
        command = " ".join(words[:at]) + " \\\n    " + " ".join(words[at:])
    else:
        command = " ".join(words)
    setup = ""
    if sim.pdi is not None and sim.plugin_dir is not None:
        # as the Python solver's flags: wait for every worker, as long as the job waits
        sim.pdi["plugins"]["deisa"].update(
            min_workers=solver.bridge.min_workers, connect_timeout=solver.bridge.connect_timeout
        )
        setup = (
            f"\n# PDI configuration of the C solver: {solver.pdi_config}, its deisa block set "
            "for this job\n"
            f'sed "s/{JOB_ID}/$SLURM_JOB_ID/g" > "$OUT/pdi.yml" <<\'DEISA_PDI_YML\'\n'
            f"{yaml.safe_dump(sim.pdi, sort_keys=False, default_flow_style=None)}DEISA_PDI_YML\n"
            f"export PDI_PLUGIN_PATH={shlex.quote(str(sim.plugin_dir))}"
            '"${PDI_PLUGIN_PATH:+:$PDI_PLUGIN_PATH}"\n'
        )
    return {
        "solver": sim.description,
        "solver_setup": setup,
        "simulation_command": command,
        # the C solver writes no timings.json: the client must not wait for one
        "timings": ' --timings "$OUT/timings.json"' if sim.timings else "",
    }


@dataclass(frozen=True)
class _Node:
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


def _plan(
    nodes: int,
    worker_nodes: tuple[int, int],
    simulation_nodes: tuple[int, int],
    workers: int,
    threads: int,
    ranks: int,
) -> list[_Node]:
    """Every node's scheduler (node 0), workers and ranks, and the CPUs they take."""
    on_node = {i: [0, 0] for i in range(nodes)}
    for (first, count), total, slot in ((worker_nodes, workers, 0), (simulation_nodes, ranks, 1)):
        for offset, n in enumerate(_even(total, count)):
            on_node[first + offset][slot] = n
    return [
        _Node(i, i == 0, w, r, (2 if i == 0 else 0) + w * threads + r)
        for i, (w, r) in on_node.items()
    ]


def _describe(plan: list[_Node], threads: int) -> str:
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


def _mpi_interface(interface: str | None) -> str:
    """The line keeping Open MPI's TCP traffic on ``interface`` (empty without one)."""
    if not interface:
        return ""
    quoted = shlex.quote(interface)
    return f"export OMPI_MCA_btl_tcp_if_include={quoted} OMPI_MCA_oob_tcp_if_include={quoted}\n"


def _nodes(first: int, count: int) -> str:
    return f"node {first}" if count == 1 else f"nodes {first}-{first + count - 1}"
