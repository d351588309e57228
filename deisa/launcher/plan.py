"""The plan of a run: every process it starts, built once from the settings.

:func:`make_plan` turns checked :class:`~deisa.launcher.settings.RunSettings` into a
:class:`Plan`: for each process (the scheduler, the workers, the analytics, the simulation) its
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
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from ..bridge.options import BridgeOptions
from .adios2_engine import GUARD_FILE, PRELOAD, find_engine, find_guard
from .adios2_engine import PLUGIN_PATH as ADIOS2_PLUGIN_PATH
from .checks import command_words
from .dask_processes import dashboard_available, scheduler_command, worker_command
from .processes import python_argv
from .settings import RunSettings
from .solver import SCHEDULER_FILE_OVERRIDE, Plugin, deisa_pdi_config, find_plugin

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
                 listen=("--host", "127.0.0.1"), comm=tuple(comm))  # fmt: skip


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
class Plan:
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
    """

    scheduler: Process
    workers: Process
    simulation: Process
    analytics: Process | None
    files: Mapping[str, str]
    description: str
    timings: str | None = None
    timings_file: bool = False
    found: tuple[tuple[str, str, Plugin], ...] = ()

    @property
    def processes(self) -> list[Process]:
        """The processes in their starting order."""
        extra = [self.analytics] if self.analytics is not None else []
        return [self.scheduler, self.workers, *extra, self.simulation]


def make_plan(settings: RunSettings, where: Where) -> Plan:
    """The :class:`Plan` of ``settings``, its paths spelled as ``where`` says."""
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
        python=where.python, listen=where.listen, comm=where.comm,
    )  # fmt: skip
    return Plan(
        scheduler=Process("scheduler", scheduler),
        workers=Process(
            "workers", workers, nodes=worker_nodes, tasks=settings.workers, cores=settings.threads
        ),
        simulation=simulation,
        analytics=_analytics(settings, where, timings if timings_file else None),
        files=files,
        description=description,
        timings=timings,
        timings_file=timings_file,
        found=found,
    )


Found = tuple[tuple[str, str, Plugin], ...]
"""``(what, variable, plugin)`` of each plugin looked for a user's command."""


def _user_paths(settings: RunSettings) -> tuple[dict[str, Path], Found]:
    """The search paths a user's process gets (the deisa PDI plugin, the ADIOS2 engine, where
    found), and what was found."""
    found = (
        ("the deisa PDI plugin", "PDI_PLUGIN_PATH", find_plugin(settings.build_dir)),
        ("the deisa ADIOS2 engine", ADIOS2_PLUGIN_PATH, find_engine(settings.build_dir)),
    )
    paths = {var: p.directory for _, var, p in found if p.directory is not None}
    return paths, found


def _simulation_paths(settings: RunSettings) -> tuple[dict[str, Path], Found]:
    """A user's simulation's search paths (:func:`_user_paths`) and, wherever it gets the
    ADIOS2 engine, the memory selection guard beside it first in ``LD_PRELOAD``: the user's
    own preloads after it."""
    paths, found = _user_paths(settings)
    if ADIOS2_PLUGIN_PATH in paths:
        guard = find_guard(paths[ADIOS2_PLUGIN_PATH])
        if guard.directory is not None:
            paths[PRELOAD] = guard.directory / GUARD_FILE
        found = (*found, ("the ADIOS2 memory selection guard", PRELOAD, guard))
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
        return process, files, f"`{' '.join(settings.command)}`", None, False, found
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
    return process, files, sim.description, timings, sim.timings, ()


def _yaml(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def _analytics(settings: RunSettings, where: Where, timings: str | None) -> Process | None:
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


class SolverSettings(Protocol):
    """What :func:`simulation_command` reads (a :class:`RunSettings` has it all)."""

    @property
    def solver(self) -> str: ...
    @property
    def build_dir(self) -> Path: ...
    @property
    def pdi_config(self) -> Path: ...
    @property
    def array(self) -> str: ...
    @property
    def bridge(self) -> BridgeOptions: ...


@dataclass(frozen=True)
class SimulationCommand:
    """What runs under the MPI launcher, and what it needs.

    Attributes
    ----------
    argv
        The solver's command line, without the MPI launcher.
    pdi
        C solver: the PDI configuration to write to the ``pdi_file`` that ``argv`` names.
    plugin_dir
        C solver: the directory of the deisa plugin, to put first in ``PDI_PLUGIN_PATH``.
    timings
        Whether the solver writes the per-step timings file (the Python solver does).
    """

    argv: list[str]
    pdi: dict[str, Any] | None = None
    plugin_dir: Path | None = None
    timings: bool = False

    @property
    def description(self) -> str:
        if self.pdi is None:
            return "the Python solver (deisa_simulation.heat)"
        return f"the C solver ({self.argv[0]}) through PDI and the deisa plugin"


def simulation_command(
    settings: SolverSettings,
    *,
    python: str,
    sim_config: str,
    scheduler_file: str,
    timings: str,
    pdi_file: str,
) -> SimulationCommand:
    """The command of ``settings.solver`` (``"c"`` or ``"python"``) for one run.

    Parameters
    ----------
    settings
        From :func:`resolve_settings`: ``solver`` (``"c"`` or ``"python"``, as
        :func:`resolve_solver` chose), ``build_dir``, ``pdi_config``, ``array``, ``bridge``.
    python, sim_config, scheduler_file, timings, pdi_file
        The interpreter, the simulation YAML, the scheduler file, the Python solver's timings
        file and the C solver's PDI YAML, as the command line must spell them (paths, or
        shell words such as ``$OUT/simulation.yml`` in a batch script).
    """
    if settings.solver == "c":
        heat = settings.build_dir / "simulation" / "heat"
        return SimulationCommand(
            argv=[str(heat), sim_config, pdi_file],
            pdi=deisa_pdi_config(
                settings.pdi_config, scheduler_file, settings.bridge, settings.array
            ),
            plugin_dir=settings.build_dir / "plugin",
        )
    argv = [*python_argv(python), "-m", "deisa_simulation.heat", sim_config]
    argv += ["--scheduler-file", scheduler_file, "--array", settings.array]
    argv += [*settings.bridge.to_argv(), "--timings", timings]
    return SimulationCommand(argv=argv, timings=True)


def analytics_argv(command: str, python: str) -> list[str]:
    """``command`` split as a shell would (no shell runs it,
    :func:`~deisa.launcher.checks.command_words`); a first word ending in ``.py`` runs with
    ``python``, its path made absolute.

    Raises
    ------
    UsageError
        An empty command, or one that shlex cannot split (an open quote).
    """
    return python_script(command_words(command), python)


def python_script(words: list[str], python: str) -> list[str]:
    """``words``, with ``python -P`` before a first word ending in ``.py`` (made absolute):
    neither the current directory nor the script's is on its ``sys.path``
    (:func:`~deisa.launcher.processes.python_argv`)."""
    if words[0].endswith(".py"):
        return [*python_argv(python), str(Path(words[0]).absolute()), *words[1:]]
    return list(words)
