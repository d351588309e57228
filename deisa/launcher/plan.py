"""The plan of a run: every process it starts, built once from the settings.

:func:`make_plan` turns checked :class:`~deisa.launcher.settings.RunSettings` into a
:class:`RunPlan`: for each process (the scheduler, the workers, the analytics, the simulation) its
name, its command, what its environment adds (variables set, directories put first in a search
path), its nodes, tasks and cores; and the files the run writes first (the simulation's YAML,
the C solver's PDI YAML). The local run (:mod:`.local`) starts the plan on this machine; the
Slurm writer (:mod:`.slurm`) renders the same plan into its one template, as dask-jobqueue's
``Job`` renders its own. What differs between the two is only how paths are spelled
(:class:`Where`: real paths here, the job's shell words ``"$OUT/..."`` there) and where the
processes go (a local run: one node; a job: :func:`deisa.launcher.slurm_layout.layout`).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .adios2_engine import ENGINE_FILE, GUARD_FILE, PRELOAD, find_engine, find_guard
from .adios2_engine import PLUGIN_PATH as ADIOS2_PLUGIN_PATH
from .commands import analytics_argv, python_script, simulation_command
from .dask_processes import LOOPBACK, dashboard_available, scheduler_command, worker_command
from .defaults import UsageError
from .libraries import LOADER_VARIABLES, found_problem, handed_problem
from .processes import python_argv
from .security import Credentials
from .settings import RunSettings, SlurmSettings
from .slurm_layout import Node, allocation
from .solver import PLUGIN_FILE, SCHEDULER_FILE_OVERRIDE, Plugin, find_plugin
from .ucx import UCX

JOB_ID = "__SLURM_JOB_ID__"
"""In the C solver's PDI YAML of a job, replaced by ``$SLURM_JOB_ID`` when the job starts: the
scheduler file is per job, and the YAML cannot go through an unquoted heredoc (PDI's ``$``
expressions)."""

USER_PYTHON = "\0$PYTHON"
"""Stands for the job's interpreter in a user's command (:attr:`Process.user`): no argument
holds a NUL, so no word a user gives is taken for it."""


@dataclass(frozen=True)
class Where:
    """How a plan spells the run's paths and where its processes go.

    Attributes
    ----------
    python
        The interpreter of the processes deisa starts (``"$PYTHON"`` in a job).
    user_python
        The same, before a user's ``.py`` script (:data:`USER_PYTHON` in a job).
    output
        The directory of the run's files (``"$OUT"`` in a job).
    scheduler_file
        The scheduler file, as a command line spells it.
    pdi_scheduler_file
        The scheduler file as the C solver's PDI YAML names it (no shell expands it).
    job
        Whether the plan is a Slurm job's.
    listen
        ``dask scheduler`` and ``dask worker`` options saying where they listen.
    comm
        Their options of the protocol (``--protocol tls``, ``--protocol ucx``, the TLS files).
    nodes
        ``((first, count), (first, count))`` of the worker and the simulation nodes.
    """

    python: str
    user_python: str
    output: str
    scheduler_file: str
    pdi_scheduler_file: str
    job: bool = False
    listen: tuple[str, ...] = ()
    comm: tuple[str, ...] = ()
    nodes: tuple[tuple[int, int], tuple[int, int]] = ((0, 1), (0, 1))

    def file(self, name: str) -> str:
        """The run's file ``name``, in :attr:`output`."""
        return f"{self.output}/{name}"


def local_where(output: Path, comm: list[str]) -> Where:
    """A local run's :class:`Where`: real paths, this interpreter, loopback."""
    scheduler_file = str((output / "scheduler.json").absolute())
    return Where(sys.executable, sys.executable, str(output), scheduler_file, scheduler_file,
                 listen=("--host", LOOPBACK), comm=tuple(comm))  # fmt: skip


def _local_comm(settings: RunSettings) -> list[str]:
    """The options of the protocol of a local run's Dask processes: TLS with the run's
    credentials (made in ``<output>/tls`` before they start), UCX, or none (plain TCP)."""
    if settings.tls:
        return Credentials(settings.output / "tls").cli_args()
    return UCX().cli_args() if settings.protocol == "ucx" else []


def job_where(settings: RunSettings, nodes: tuple[tuple[int, int], tuple[int, int]]) -> Where:
    """How a Slurm job spells the plan: its own variables (``$PYTHON``, ``$OUT``,
    ``$SCHEDULER_FILE``), where its Dask servers listen and which protocol they speak;
    ``nodes``: ``(first, count)`` of the worker and the simulation nodes."""
    slurm = settings.slurm or SlurmSettings()
    # one node: every Dask server on loopback; several: on --interface (or every interface),
    # which TLS keeps to the job's own processes. HTTP servers (dashboard, health) stay local.
    listen: tuple[str, ...] = ("--host", LOOPBACK)
    if slurm.nodes > 1:
        listen = ("--interface", slurm.interface) if slurm.interface else ()
    # TLS: the files come from the environment (the job exports Dask's
    # DASK_DISTRIBUTED__COMM__TLS__* variables and deisa's DEISA_TLS_*, security.tls_env):
    # --tls-* options would make `dask scheduler` refuse --interface
    comm = ("--protocol", "tls") if settings.tls else ()
    if not settings.tls and settings.protocol == "ucx":
        comm = ("--protocol", "ucx")
    # The Python solver reads the job's scheduler file from the script's variable; the C
    # solver's PDI YAML is written by a quoted heredoc, where `sed` puts the job ID in.
    pdi_scheduler_file = f"{settings.output.absolute()}/{JOB_ID}/scheduler.json"
    return Where("$PYTHON", USER_PYTHON, "$OUT", "$SCHEDULER_FILE", pdi_scheduler_file,
                 job=True, listen=listen, comm=comm, nodes=nodes)  # fmt: skip


@dataclass(frozen=True)
class Process:
    """One process (or one step of tasks) of the plan.

    Attributes
    ----------
    name
        The part it plays: ``scheduler``, ``workers``, ``analytics``, ``simulation``.
    argv
        Its command line (a job's variables as words: ``$PYTHON``, ``$OUT/simulation.yml``).
    env
        Variables set for it, over the run's environment.
    first_in
        ``{variable: directory}``: search paths it gets with ``directory`` first, then what
        the variable held (``PDI_PLUGIN_PATH``, ``ADIOS2_PLUGIN_PATH``); for ``LD_PRELOAD``, a
        library's path.
    nodes
        ``(first, count)`` of the nodes it runs on.
    tasks
        Its tasks (ranks, workers).
    cores
        Cores per task.
    user
        A user's command: no word of it is a job's variable.
    """

    name: str
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    first_in: Mapping[str, Path] = field(default_factory=dict)
    nodes: tuple[int, int] = (0, 1)
    tasks: int = 1
    cores: int = 1
    user: bool = False

    def environment(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """:attr:`env` and :attr:`first_in` as values over ``environ`` (this process's)."""
        environ = os.environ if environ is None else environ
        paths = {
            var: os.pathsep.join(filter(None, [str(directory), environ.get(var)]))
            for var, directory in self.first_in.items()
        }
        return {**self.env, **paths}


@dataclass(frozen=True)
class BuiltinPCA:
    """The built-in PCA of a run (:class:`deisa.pca_app.driver.Analysis`), run by the launcher
    itself (a local run) or by ``deisa-run analytics`` (a job, :attr:`RunPlan.analytics`).

    Attributes
    ----------
    array, n_components, buffer_nb, stop_when_converged, step_timeout
        As the settings say.
    steps
        The steps the heat demo publishes (``None``: a user's simulation).
    settings
        What ``results.json`` records (:meth:`~deisa.launcher.settings.RunSettings.summary`).
    """

    array: str
    n_components: int
    buffer_nb: int | None
    stop_when_converged: float | None
    step_timeout: float | None
    steps: int | None
    settings: Mapping[str, Any]


@dataclass(frozen=True)
class Job:
    """What only a Slurm job's script needs: the allocation and where each process goes.

    Attributes
    ----------
    slurm
        The allocation's options (``#SBATCH`` lines, ``srun``'s, the job's interpreter).
    nodes
        What each node runs (:func:`deisa.launcher.slurm_layout.allocation`).
    pdi_config
        The C solver's PDI YAML the job's was made from (named in a comment).
    """

    slurm: SlurmSettings
    nodes: tuple[Node, ...]
    pdi_config: Path


@dataclass(frozen=True)
class RunPlan:
    """Every process of a run, and what it writes before starting them.

    Attributes
    ----------
    scheduler, workers, simulation
        The processes.
    analytics
        The user's analytics, or (in a job) ``deisa-run analytics``; ``None``: the built-in
        PCA runs in the launcher itself (a local run).
    files
        ``{name: text}`` of the files written into the output first (``simulation.yml``,
        ``pdi.yml``).
    description
        The simulation, in words.
    timings
        The simulation's timings as the plan spells them (``None``: a user's command);
        ``timings_file``: whether it is one JSON file (the Python solver), not a prefix.
    found
        For a user's command: ``(what, variable, plugin)`` of the deisa PDI plugin and the
        ADIOS2 engine found (:attr:`Plugin.origin` says where).
    output
        The run's directory (a job writes into ``<output>/<job id>/``).
    timeout, stop_timeout
        Seconds to wait for the scheduler, the workers and the simulation's end; seconds a
        process has to stop on SIGTERM (a local run).
    tls, protocol, dashboard
        Whether the Dask processes speak mutual TLS, over ``tcp`` or ``ucx``, and serve the
        dashboard (:class:`~deisa.launcher.settings.RunSettings`).
    mpirun, mpi_env
        A local run's MPI launcher (the simulation's tasks are its ``-np``) and the
        variables its processes get unless set.
    pca
        The built-in PCA, or ``None`` (the user's ``--analytics``).
    job
        A Slurm job's allocation; ``None``: a local run.
    """

    scheduler: Process
    workers: Process
    simulation: Process
    analytics: Process | None
    files: Mapping[str, str]
    description: str
    output: Path
    timeout: float
    stop_timeout: float
    tls: bool
    protocol: str
    dashboard: bool
    mpirun: tuple[str, ...]
    mpi_env: Mapping[str, str]
    pca: BuiltinPCA | None
    timings: str | None = None
    timings_file: bool = False
    found: tuple[tuple[str, str, Plugin], ...] = ()
    job: Job | None = None

    @property
    def processes(self) -> list[Process]:
        """The processes in their starting order."""
        extra = [self.analytics] if self.analytics is not None else []
        return [self.scheduler, self.workers, *extra, self.simulation]


def make_plan(settings: RunSettings, where: Where | None = None) -> RunPlan:
    """The :class:`RunPlan` of ``settings``: a Slurm job's where ``settings.slurm`` is set (the
    layout of its allocation checked), else a local run's; its paths spelled as ``where`` says
    (by default, :func:`job_where` or :func:`local_where`).

    Raises
    ------
    ValueError
        A job's layout that cannot work (:func:`~deisa.launcher.slurm_layout.allocation`).
    """
    job = None
    if settings.slurm is not None:
        nodes, worker_nodes, sim_nodes = allocation(settings, settings.slurm)
        job = Job(settings.slurm, tuple(nodes), settings.pdi_config)
        where = where or job_where(settings, (worker_nodes, sim_nodes))
    where = where or local_where(settings.output, _local_comm(settings))
    return RunPlan(**_processes(settings, where), **_run_facts(settings), job=job)


def _run_facts(settings: RunSettings) -> dict[str, Any]:
    """What the back ends need of the run beside its processes (:class:`RunPlan`'s fields)."""
    pca = None
    if settings.analytics is None:
        steps = None if settings.command else settings.simulation["steps"]
        pca = BuiltinPCA(settings.array, settings.n_components, settings.buffer_nb,
                         settings.stop_when_converged, settings.step_timeout, steps,
                         settings.summary())  # fmt: skip
    return {
        "output": settings.output, "timeout": settings.timeout,
        "stop_timeout": settings.stop_timeout, "tls": settings.tls,
        "protocol": settings.protocol, "dashboard": settings.dashboard,
        "mpirun": tuple(settings.mpirun), "mpi_env": settings.mpi_env, "pca": pca,
    }  # fmt: skip


def _processes(settings: RunSettings, where: Where) -> dict[str, Any]:
    """The processes of the plan, what they write first and what they are (:class:`RunPlan`'s
    fields)."""
    worker_nodes, sim_nodes = where.nodes
    simulation, files, description, timings, timings_file, found = _simulation(settings, where)
    simulation = Process("simulation", simulation.argv, simulation.env, simulation.first_in,
                         sim_nodes, settings.ranks, 1, simulation.user)  # fmt: skip
    scheduler = scheduler_command(
        where.scheduler_file, settings.dashboard and dashboard_available(), None,
        python=where.python, listen=where.listen, comm=where.comm,
    )  # fmt: skip
    workers = worker_command(
        where.scheduler_file, None, settings.threads, preload=settings.worker_preload,
        memory=settings.memory_limit,
        python=where.python, listen=where.listen, comm=where.comm,
    )  # fmt: skip
    analytics = _analytics_process(settings, where, timings if timings_file else None)
    return {
        "scheduler": Process("scheduler", scheduler),
        "workers": Process(
            "workers", workers, nodes=worker_nodes, tasks=settings.workers, cores=settings.threads
        ),
        "simulation": _handed(simulation),
        "analytics": analytics and _handed(analytics),
        "files": files,
        "description": description,
        "timings": timings,
        "timings_file": timings_file,
        "found": found,
    }


Found = tuple[tuple[str, str, Plugin], ...]
"""``(what, variable, plugin)`` of each plugin looked for a user's command."""


def _user_paths(settings: RunSettings) -> tuple[dict[str, Path], Found]:
    """The search paths a user's process gets (the deisa PDI plugin, the ADIOS2 engine, where
    found), and what was found."""
    found = _checked(
        ("the deisa PDI plugin", "PDI_PLUGIN_PATH", find_plugin(settings.build_dir)),
        ("the deisa ADIOS2 engine", ADIOS2_PLUGIN_PATH, find_engine(settings.build_dir)),
    )
    paths = {var: p.directory for _, var, p in found if p.directory is not None}
    return paths, found


LIBRARIES = {"PDI_PLUGIN_PATH": PLUGIN_FILE, ADIOS2_PLUGIN_PATH: ENGINE_FILE, PRELOAD: GUARD_FILE}
"""The library that each variable hands over to a user's process."""


def _checked(*found: tuple[str, str, Plugin]) -> Found:
    """``found``, once each library found is known safe to hand over
    (:func:`~deisa.launcher.libraries.found_problem`: another account cannot change it, make
    it load a library of theirs, or add one where a plugin loader searches by name; in the
    build or installed, one under a root-owned ``/usr/local`` is fine); a
    :class:`~deisa.launcher.defaults.UsageError` naming it and where it was found otherwise."""
    for what, variable, plugin in found:
        if plugin.directory is not None:
            problem = found_problem(variable, plugin.directory / LIBRARIES[variable])
            if problem is not None:
                raise UsageError(f"{what} {plugin.origin}: {problem}")
    return found


def _handed(process: Process) -> Process:
    """``process``, once what it hands the loaders (deisa's directory or library first, then
    what this environment holds) is known safe
    (:func:`~deisa.launcher.libraries.handed_problem`); a
    :class:`~deisa.launcher.defaults.UsageError` naming the variable and the entry otherwise.
    A Slurm job checks its own again (``python -m deisa.launcher.libraries``)."""
    environment = {**os.environ, **process.environment()}
    for variable in LOADER_VARIABLES:
        problem = handed_problem(variable, environment.get(variable, ""))
        if problem is not None:
            raise UsageError(f"the {process.name}'s {problem}")
    return process


def _simulation_paths(settings: RunSettings) -> tuple[dict[str, Path], Found]:
    """A user's simulation's search paths (:func:`_user_paths`) and, wherever it gets the
    ADIOS2 engine, the memory selection guard beside it first in ``LD_PRELOAD``: the user's
    own preloads after it."""
    paths, found = _user_paths(settings)
    if ADIOS2_PLUGIN_PATH in paths:
        guard = find_guard(paths[ADIOS2_PLUGIN_PATH])
        if guard.directory is not None:
            paths[PRELOAD] = guard.directory / GUARD_FILE
        found = (*found, *_checked(("the ADIOS2 memory selection guard", PRELOAD, guard)))
    return paths, found


def user_env(where: Where) -> dict[str, str]:
    """What a user's process is told: the scheduler file, under the name the Bridge and the
    Adapter read and under the one the PDI plugin prefers to its YAML's."""
    path = where.scheduler_file
    return {"DEISA_SCHEDULER_FILE": path, SCHEDULER_FILE_OVERRIDE: path}


def _simulation(
    settings: RunSettings, where: Where
) -> tuple[Process, dict[str, str], str, str | None, bool, Found]:
    """The simulation's process, the files it reads, its description, its timings (and
    whether they are one file) and, for a user's command, the plugins found."""
    # the job's template writes the simulation's YAML whatever runs
    files = {"simulation.yml": _yaml(settings.simulation)} if where.job else {}
    if settings.command:
        searched, found = _simulation_paths(settings)
        argv = python_script(settings.command, where.user_python)
        user = {} if where.job else user_env(where)  # the job exports them for every step
        process = Process("simulation", argv, user, searched, user=True)
        words = shlex.join(settings.command)
        said = f"your command ({words})" if where.job else f"`{' '.join(settings.command)}`"
        return process, files, said, None, False, found
    bridge = settings.bridge
    if where.job:  # the placement is fixed once every worker is there, however slowly they start
        bridge = bridge.replace(min_workers=settings.workers, connect_timeout=settings.timeout)
    sim = simulation_command(
        dataclasses.replace(settings, bridge=bridge),
        python=where.python,
        sim_config=where.file("simulation.yml"),
        scheduler_file=where.pdi_scheduler_file if settings.solver == "c" else where.scheduler_file,
        timings=where.file("timings.json"),
        pdi_file=where.file("pdi.yml"),
    )
    files["simulation.yml"] = _yaml(settings.simulation)
    env: dict[str, str] = {}
    paths: dict[str, Path] = {}
    if sim.pdi is not None:
        if where.job:  # as the Python solver's flags: wait for every worker, as the job waits
            sim.pdi["plugins"]["deisa"].update(
                min_workers=bridge.min_workers, connect_timeout=bridge.connect_timeout
            )
        files["pdi.yml"] = _yaml(sim.pdi)
    if sim.plugin_dir is not None:
        paths["PDI_PLUGIN_PATH"] = sim.plugin_dir
    timings = where.file("timings.json") if sim.timings else where.file("heat-timings")
    if not sim.timings and not where.job:  # the C solver's per-rank files, read by the report
        env["HEAT_TIMINGS"] = timings
    process = Process("simulation", sim.argv, env, paths)
    return process, files, _described(settings, sim.description, where), timings, sim.timings, ()


def _described(settings: RunSettings, solver: str, where: Where) -> str:
    """The heat demo in words: ``solver`` in a job's comment; the solver, why, the field and
    the steps for a local run's first line."""
    if where.job:
        return solver
    simulation = settings.simulation
    return (
        f"the {settings.solver} solver ({settings.solver_reason}), field "
        f"{simulation['global_size']}, {simulation['steps']} steps"
    )


def _yaml(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def _analytics_process(settings: RunSettings, where: Where, timings: str | None) -> Process | None:
    """The user's analytics; in a job, else ``deisa-run analytics`` (the built-in PCA, next
    to the scheduler); ``None``: the built-in PCA in the launcher (a local run)."""
    if settings.analytics is not None:
        paths, _ = _user_paths(settings)
        env = {} if where.job else user_env(where)
        argv = analytics_argv(settings.analytics, where.user_python)
        return Process("analytics", argv, env, paths, user=True)
    if not where.job:
        return None
    argv = [*python_argv(where.python), "-m", "deisa.launcher", "analytics",
            "--scheduler-file", where.scheduler_file, "--workers", str(settings.workers),
            "--array", settings.array, "--n-components", str(settings.n_components),
            "--output", where.output]  # fmt: skip
    if timings is not None:  # the C solver writes no timings.json: not waited for
        argv += ["--timings", timings]
    argv += ["--timeout", str(settings.timeout)]
    if settings.stop_when_converged is not None:
        argv += ["--stop-when-converged", str(settings.stop_when_converged)]
    if settings.step_timeout is not None:
        argv += ["--step-timeout", str(settings.step_timeout)]
    argv += ["--dashboard"] if settings.dashboard else []
    return Process("analytics", [*argv, "--shutdown"])
