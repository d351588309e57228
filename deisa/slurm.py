"""A Slurm batch script that co-launches the whole DEISA pipeline in one allocation.

:func:`job_script` fills ``deisa/templates/slurm_job.sh``: a Dask scheduler and the analytics
client (``deisa-run analytics``) on the first node, the Dask workers, then the MPI ranks of the
heat simulation, each a concurrent ``srun --exact`` step, as in the DEISA paper's experiments.
The script waits for the scheduler file, stops the client if the simulation fails (and the
reverse), and exits non-zero when either failed; the analytics client leaves ``results.json``
and ``explained_variance.png`` in the output directory.

From the command line::

    deisa-run slurm --ranks 4 --workers 2 > job.sh     # or: python -m deisa.slurm ...
    sbatch job.sh

See ``docs/slurm.md``.
"""

from __future__ import annotations

import argparse
import shlex
import string
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

TEMPLATE = Path(__file__).with_name("templates") / "slurm_job.sh"


class _ScriptTemplate(string.Template):
    delimiter = "@@"  # `$` belongs to bash


def layout(nodes: int, worker_nodes: int | None) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((first, count), (first, count))`` of the worker nodes and the simulation nodes.

    One node runs everything. Otherwise node 0 runs the scheduler and the client,
    ``worker_nodes`` nodes after it the workers (``0``: node 0 too; default
    ``(nodes - 1) // 2``), and the remaining nodes the simulation.

    Raises
    ------
    ValueError
        The counts leave no node for the simulation.
    """
    if nodes < 1:
        raise ValueError(f"nodes={nodes} must be ≥ 1")
    if nodes == 1:
        return (0, 1), (0, 1)
    if worker_nodes is None:
        worker_nodes = (nodes - 1) // 2
    if not 0 <= worker_nodes <= nodes - 2:
        raise ValueError(
            f"worker_nodes={worker_nodes} must be between 0 and nodes - 2 = {nodes - 2}, so that "
            "node 0 runs the scheduler and at least one node runs the simulation"
        )
    workers = (1, worker_nodes) if worker_nodes else (0, 1)
    return workers, (1 + worker_nodes, nodes - 1 - worker_nodes)


def job_script(
    *,
    ranks: int = 4,
    workers: int = 2,
    threads: int = 1,
    nodes: int = 1,
    worker_nodes: int | None = None,
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
) -> str:
    """The text of a batch script running scheduler, workers, client and simulation together.

    Parameters
    ----------
    ranks
        MPI ranks of the simulation; must equal the product of ``simulation["process_grid"]``
        when that is given.
    workers, threads
        Dask workers, and threads (CPUs) per worker.
    nodes, worker_nodes
        Nodes of the allocation and how many hold the workers (see :func:`layout`).
    time, partition, job_name
        ``#SBATCH --time``, ``--partition`` (``None``: the cluster's default) and ``--job-name``.
    output, workdir
        Output directory (results, logs, ``slurm-<job>.out``; made absolute) and the job's
        working directory.
    python
        Interpreter on the compute nodes, with deisa installed; default: this one.
    simulation
        Settings of ``configs/simulation.yml`` (``global_size``, ``process_grid``, ``steps``,
        ``output_period``); ``process_grid`` defaults to the squarest grid of ``ranks``.
    mpi
        ``srun --mpi`` plugin of the simulation step (``pmix`` for OpenMPI 4/5).
    placement, buffer_nb, array
        Bridge settings of the simulation.
    n_components, timeout
        PCA components of the client, and seconds it waits without progress before failing.
    interface
        Network interface of the scheduler and workers (``--interface``), e.g. ``ib0``.
    srun_args
        Extra options for every ``srun`` step, e.g. ``["--mem-per-cpu=2G"]`` where memory
        is a consumable resource.

    Returns
    -------
    str
        The script; submit it with ``sbatch``.

    Examples
    --------
    >>> script = job_script(ranks=4, workers=2, time="00:05:00")
    >>> "#SBATCH --ntasks=8" in script
    True
    """
    from .cli import squarest_grid

    for name, value in (("ranks", ranks), ("workers", workers), ("threads", threads)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    (worker_first, n_worker_nodes), (sim_first, sim_nodes) = layout(nodes, worker_nodes)
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
    if nodes == 1:
        where = "everything on one node"
    else:
        where = (
            f"node 0: scheduler + client; {_nodes(worker_first, n_worker_nodes)}: workers; "
            f"{_nodes(sim_first, sim_nodes)}: simulation"
        )
    extra = [f"#SBATCH --partition={partition}"] if partition else []
    if nodes > 1:
        extra.append("#SBATCH --exclusive")
    quoted_interface = f" --interface {shlex.quote(interface)}" if interface else ""
    fields = {
        "job_name": job_name,
        "nodes": nodes,
        "ntasks": 2 + workers * threads + ranks,
        "time": time,
        "workdir": shlex.quote(str(Path(workdir).absolute())),
        "output": shlex.quote(str(output)),
        "extra_sbatch": "".join(line + "\n" for line in extra),
        "layout": where,
        "workers": workers,
        "threads": threads,
        "ranks": ranks,
        "python": shlex.quote(python or sys.executable),
        "simulation_yaml": yaml.safe_dump(settings, sort_keys=False, default_flow_style=None),
        "start_timeout": int(timeout),
        "srun_args": "".join(f" {shlex.quote(a)}" for a in srun_args),
        "interface": quoted_interface,
        "worker_nodes": n_worker_nodes,
        "worker_first": worker_first,
        "simulation_nodes": sim_nodes,
        "simulation_first": sim_first,
        "array": shlex.quote(array),
        "n_components": n_components,
        "timeout": timeout,
        "mpi": shlex.quote(mpi),
        "placement": shlex.quote(placement),
        "buffer_nb": "" if buffer_nb is None else f" --buffer-nb {int(buffer_nb)}",
    }
    return _ScriptTemplate(TEMPLATE.read_text()).substitute(fields)


def _nodes(first: int, count: int) -> str:
    return f"node {first}" if count == 1 else f"nodes {first}-{first + count - 1}"


def _parser(defaults: dict[str, Any]) -> argparse.ArgumentParser:
    run, slurm = defaults["run"], defaults["slurm"]
    parser = argparse.ArgumentParser(
        prog="deisa-run slurm",
        description="Print a Slurm batch script that runs the scheduler, the workers, the "
        "analytics client and the MPI simulation in one allocation (see docs/slurm.md). "
        "Defaults: deisa/templates/defaults.yml.",
    )
    add = parser.add_argument
    add("--ranks", "-n", type=int, help=f"MPI ranks (default {run['ranks']})")
    add("--workers", "-w", type=int, default=run["workers"], help="Dask workers")
    add("--threads", "-t", type=int, default=run["threads"], help="threads per worker")
    add("--nodes", "-N", type=int, default=slurm["nodes"], help="nodes of the allocation")
    add("--worker-nodes", type=int, default=slurm["worker_nodes"], help="nodes for workers")
    add("--time", default=slurm["time"], help="wall-clock limit (#SBATCH --time)")
    add("--partition", "-p", default=slurm["partition"], help="partition")
    add("--job-name", default=slurm["job_name"], help="job name")
    add("--output", "-o", default=run["output"], help="output directory (created now)")
    add("--workdir", default=".", help="working directory of the job")
    add("--python", default=slurm["python"], help="interpreter on the compute nodes")
    add("--mpi", default=slurm["mpi"], help="srun --mpi plugin of the simulation")
    add("--config", default=run["config"], help="simulation YAML to start from")
    add("--size", type=int, nargs=2, metavar=("ROWS", "COLS"), help="field size")
    add("--steps", type=int, help="published steps")
    add("--output-period", type=int, help="solver iterations per step")
    add("--placement", default=run["placement"], choices=["round_robin", "locality"])
    add("--buffer-nb", type=int, default=run["buffer_nb"], help="steps in flight at most")
    add("--array", default=run["array"], help="published array name")
    add("--n-components", type=int, default=run["n_components"], help="PCA components")
    add("--timeout", type=float, default=300.0, help="client's seconds without progress")
    add("--interface", help="network interface of scheduler and workers, e.g. ib0")
    add("--srun-arg", action="append", default=[], help="extra option for every srun (repeat)")
    add("--defaults", help="YAML file overriding deisa/templates/defaults.yml")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``deisa-run slurm`` / ``python -m deisa.slurm``: print the batch script on stdout."""
    from .cli import UsageError, load_defaults

    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--defaults")
    try:
        defaults = load_defaults(pre.parse_known_args(argv)[0].defaults)
    except UsageError as exc:
        print(f"deisa-run slurm: error: {exc}", file=sys.stderr)
        return 2
    args = _parser(defaults).parse_args(argv)
    simulation: dict[str, Any] = {}
    if args.config:
        simulation = yaml.safe_load(Path(args.config).read_text()) or {}
    grid = simulation.get("process_grid")
    ranks = args.ranks or (grid[0] * grid[1] if grid else defaults["run"]["ranks"])
    if grid and grid[0] * grid[1] != ranks:
        simulation.pop("process_grid")  # --ranks wins: the squarest grid of it
    for key, value in (
        ("global_size", args.size),
        ("steps", args.steps),
        ("output_period", args.output_period),
    ):
        if value is not None:
            simulation[key] = value
    try:
        script = job_script(
            ranks=ranks,
            workers=args.workers,
            threads=args.threads,
            nodes=args.nodes,
            worker_nodes=args.worker_nodes,
            time=args.time,
            partition=args.partition,
            output=args.output,
            workdir=args.workdir,
            python=args.python,
            simulation=simulation,
            job_name=args.job_name,
            mpi=args.mpi,
            placement=args.placement,
            buffer_nb=args.buffer_nb,
            array=args.array,
            n_components=args.n_components,
            timeout=args.timeout,
            interface=args.interface,
            srun_args=args.srun_arg,
        )
    except ValueError as exc:
        print(f"deisa-run slurm: error: {exc}", file=sys.stderr)
        return 2
    Path(args.output).mkdir(parents=True, exist_ok=True)  # sbatch --output needs it
    sys.stdout.write(script)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
