"""A Slurm batch script that co-launches the whole DEISA pipeline in one allocation.

:func:`job_script` fills ``deisa/templates/slurm_job.sh``: a Dask scheduler and the analytics
client (``deisa-run analytics``) on the first node, the Dask workers, then the MPI ranks of the
heat simulation (the Python solver, or the C solver through PDI and the deisa plugin), each a
concurrent ``srun --exact`` step, as in the DEISA paper's experiments. The simulation's command
is :func:`deisa.launcher.solver.simulation_command`'s, as for a local run.
The script waits for the scheduler file, stops the client if the simulation fails (and the
reverse), and exits non-zero when either failed; the analytics client leaves ``results.json``
and ``explained_variance.png`` in the output directory.

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

from ..options import BridgeOptionError, BridgeOptions
from .config import find_path, squarest_grid
from .processes import THREAD_PINS
from .solver import resolve_solver, simulation_command

TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "slurm_job.sh"
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
        Bridge settings of the simulation (``buffer_nb=None``: unbounded; ``0`` is refused).
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
        :func:`deisa.launcher.solver.c_solver_problem`). The nodes must see the same build
        and PDI.
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
        ``array`` (:class:`deisa.launcher.config.UsageError`, a ``ValueError``); Bridge
        options that :class:`deisa.options.BridgeOptions` refuses.

    Examples
    --------
    >>> script = job_script(ranks=4, workers=2, time="00:05:00")
    >>> "#SBATCH --ntasks=8" in script
    True
    """
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
    try:
        bridge = BridgeOptions(placement=placement, buffer_nb=buffer_nb)
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
        "$SCHEDULER_FILE" if solver.solver == "python" else f"{output}/scheduler-{JOB_ID}.json"
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


def _nodes(first: int, count: int) -> str:
    return f"node {first}" if count == 1 else f"nodes {first}-{first + count - 1}"
