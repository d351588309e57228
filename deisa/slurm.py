"""A Slurm batch script that co-launches the whole DEISA pipeline in one allocation.

:func:`job_script` fills ``deisa/templates/slurm_job.sh``: a Dask scheduler and the analytics
client (``deisa-run analytics``) on the first node, the Dask workers, then the MPI ranks of the
heat simulation (the Python solver, or the C solver through PDI and the deisa plugin), each a
concurrent ``srun --exact`` step, as in the DEISA paper's experiments.
The script waits for the scheduler file, stops the client if the simulation fails (and the
reverse), and exits non-zero when either failed; the analytics client leaves ``results.json``
and ``explained_variance.png`` in the output directory.

From the command line::

    deisa-run slurm --ranks 4 --workers 2 > job.sh     # or: python -m deisa.slurm ...
    deisa-run slurm --ranks 4 --solver c > job.sh      # the C solver through PDI
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
# In the C solver's PDI YAML, replaced by $SLURM_JOB_ID when the job starts: the scheduler file
# is per job, and the YAML cannot go through an unquoted heredoc (PDI's `$` expressions).
JOB_ID = "__SLURM_JOB_ID__"


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
    solver: str = "python",
    build_dir: str | Path = "build",
    pdi_config: str | Path = "configs/heat_deisa.yml",
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
    solver
        ``"python"`` (``deisa_simulation.heat``), ``"c"`` (``build_dir/simulation/heat``
        through PDI and the deisa plugin) or ``"auto"`` (C when it can run here, see
        :func:`deisa.cli.c_solver_problem`). The nodes must see the same build and PDI.
    build_dir, pdi_config
        CMake build directory and PDI YAML of the C solver (relative: from the current
        directory, else from the repository); the script writes the YAML, its deisa block set
        for the job, to ``output/pdi.yml``.

    Returns
    -------
    str
        The script; submit it with ``sbatch``.

    Raises
    ------
    ValueError
        Counts, layout or process grid that cannot work; ``solver="c"`` when the C solver or
        its plugin is not built, PDI does not load, or ``pdi_config`` does not publish
        ``array`` (:class:`deisa.cli.UsageError`, a ``ValueError``).

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
    simulation_fields = _simulation_step(
        solver,
        output=output,
        array=array,
        placement=placement,
        buffer_nb=buffer_nb,
        build_dir=build_dir,
        pdi_config=pdi_config,
    )
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
        **simulation_fields,
    }
    return _ScriptTemplate(TEMPLATE.read_text()).substitute(fields)


def _simulation_step(
    solver: str,
    *,
    output: Path,
    array: str,
    placement: str,
    buffer_nb: int | None,
    build_dir: str | Path,
    pdi_config: str | Path,
) -> dict[str, str]:
    """Template fields of the simulation step: ``solver`` (words), ``solver_setup``,
    ``simulation_command`` and ``timings`` (the client's ``--timings``, Python solver only)."""
    from .cli import deisa_pdi_config, find_path, resolve_solver

    build, pdi_path = find_path(build_dir), find_path(pdi_config)
    solver, _ = resolve_solver(solver, build, pdi_path)
    if solver == "python":
        buffer = "" if buffer_nb is None else f" --buffer-nb {int(buffer_nb)}"
        command = (
            '"$PYTHON" -m deisa_simulation.heat "$OUT/simulation.yml" '
            '--scheduler-file "$SCHEDULER_FILE" \\\n'
            f"    --array {shlex.quote(array)} --placement {shlex.quote(placement)}{buffer} "
            '--timings "$OUT/timings.json"'
        )
        return {
            "solver": "the Python solver (deisa_simulation.heat)",
            "solver_setup": "",
            "simulation_command": command,
            "timings": ' --timings "$OUT/timings.json"',
        }
    # Same settings as the Python solver's options, in the PDI YAML's deisa block.
    pdi = deisa_pdi_config(
        pdi_path, f"{output}/scheduler-{JOB_ID}.json", placement, buffer_nb, array
    )
    heat = build / "simulation" / "heat"
    setup = (
        f"\n# PDI configuration of the C solver: {pdi_path}, its deisa block set for this job\n"
        f'sed "s/{JOB_ID}/$SLURM_JOB_ID/g" > "$OUT/pdi.yml" <<\'DEISA_PDI_YML\'\n'
        f"{yaml.safe_dump(pdi, sort_keys=False, default_flow_style=None)}DEISA_PDI_YML\n"
        f"export PDI_PLUGIN_PATH={shlex.quote(str(build / 'plugin'))}"
        '"${PDI_PLUGIN_PATH:+:$PDI_PLUGIN_PATH}"\n'
    )
    return {
        "solver": f"the C solver ({heat}) through PDI and the deisa plugin",
        "solver_setup": setup,
        "simulation_command": f'{shlex.quote(str(heat))} "$OUT/simulation.yml" "$OUT/pdi.yml"',
        "timings": "",  # the C solver writes no timings.json
    }


def _nodes(first: int, count: int) -> str:
    return f"node {first}" if count == 1 else f"nodes {first}-{first + count - 1}"


def _parser(defaults: dict[str, Any]) -> argparse.ArgumentParser:
    run, slurm = defaults["run"], defaults["slurm"]
    parser = argparse.ArgumentParser(
        prog="deisa-run slurm",
        description="Print a Slurm batch script that runs the scheduler, the workers, the "
        "analytics client and the MPI simulation in one allocation (see docs/slurm.md). The "
        "options shared with deisa-run mean the same. Defaults: deisa/templates/defaults.yml.",
    )
    add = parser.add_argument
    # Left to None, the options of the local run fall back to the `run` section, through the
    # same cli.resolve_settings as `deisa-run`.
    add("--ranks", "-n", type=int, help=f"MPI ranks (default {run['ranks']})")
    add("--process-grid", type=int, nargs=2, metavar=("ROWS", "COLS"), help="rank grid")
    add("--workers", "-w", type=int, help=f"Dask workers (default {run['workers']})")
    add("--threads", "-t", type=int, help=f"threads per worker (default {run['threads']})")
    add("--size", type=int, nargs=2, metavar=("ROWS", "COLS"), help="field size")
    add("--steps", type=int, help=f"published steps (default {run['steps']})")
    add("--output-period", type=int, help="solver iterations per step")
    add("--placement", choices=["round_robin", "locality"], help="block-to-worker placement")
    add("--buffer-nb", help=f"steps in flight at most, or 'none' (default {run['buffer_nb']})")
    add(
        "--solver",
        choices=["auto", "c", "python"],
        help="python, c (the CMake build's simulation/heat through PDI and the deisa plugin) "
        f"or auto (c when it is built and PDI loads here); default {run['solver']}",
    )
    add("--config", help="simulation YAML to start from; options override it")
    add("--pdi-config", help=f"PDI YAML of the C solver (default {run['pdi_config']})")
    add("--build-dir", help=f"CMake build directory of the C solver (default {run['build_dir']})")
    add("--array", help=f"published array name (default {run['array']})")
    add("--n-components", type=int, help=f"PCA components (default {run['n_components']})")
    add("--output", "-o", help=f"output directory, created now (default {run['output']})")
    add(
        "--timeout",
        type=float,
        default=slurm["timeout"],
        help="seconds the client waits without progress, and for the scheduler to start "
        f"(default {slurm['timeout']})",
    )
    add("--nodes", "-N", type=int, default=slurm["nodes"], help="nodes of the allocation")
    add("--worker-nodes", type=int, default=slurm["worker_nodes"], help="nodes for workers")
    add("--time", default=slurm["time"], help="wall-clock limit (#SBATCH --time)")
    add("--partition", "-p", default=slurm["partition"], help="partition")
    add("--job-name", default=slurm["job_name"], help="job name")
    add("--workdir", default=".", help="working directory of the job (default: this one)")
    add("--python", default=slurm["python"], help="interpreter on the compute nodes")
    add("--mpi", default=slurm["mpi"], help="srun --mpi plugin of the simulation")
    add("--interface", help="network interface of scheduler and workers, e.g. ib0")
    add("--srun-arg", action="append", default=[], help="extra option for every srun (repeat)")
    add("--defaults", help="YAML file overriding deisa/templates/defaults.yml")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``deisa-run slurm`` / ``python -m deisa.slurm``: print the batch script on stdout.

    Parameters
    ----------
    argv
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        Exit status: 0, or 2 for options that cannot work (the reason on stderr).
    """
    from .cli import load_defaults, resolve_settings

    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--defaults")
    try:
        defaults = load_defaults(pre.parse_known_args(argv)[0].defaults)
        args = _parser(defaults).parse_args(argv)
        settings = resolve_settings(args)
        script = job_script(
            ranks=settings.ranks,
            workers=settings.workers,
            threads=settings.threads,
            nodes=args.nodes,
            worker_nodes=args.worker_nodes,
            time=args.time,
            partition=args.partition,
            output=settings.output,
            workdir=args.workdir,
            python=args.python,
            simulation=settings.simulation,
            job_name=args.job_name,
            mpi=args.mpi,
            placement=settings.placement,
            buffer_nb=settings.buffer_nb,
            array=settings.array,
            n_components=settings.n_components,
            timeout=settings.timeout,
            interface=args.interface,
            srun_args=args.srun_arg,
            solver=settings.solver,
            build_dir=settings.build_dir,
            pdi_config=settings.pdi_config,
        )
    except ValueError as exc:  # cli.UsageError included
        print(f"deisa-run slurm: error: {exc}", file=sys.stderr)
        return 2
    settings.output.mkdir(parents=True, exist_ok=True)  # sbatch --output needs it
    print(
        f"deisa-run slurm: {settings.ranks} ranks of the {settings.solver} solver "
        f"({settings.solver_reason}), {settings.workers} workers x {settings.threads} threads, "
        f"{args.nodes} node(s); output in {settings.output}",
        file=sys.stderr,
    )
    sys.stdout.write(script)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
