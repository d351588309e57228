"""The one pass from the command line to settings: options > config file > defaults, checked.

:func:`run_settings` turns the words of ``deisa-run`` or ``deisa-run slurm`` into frozen
:class:`~deisa.launcher.settings.RunSettings` before anything starts, and
:func:`analytics_settings` those of ``deisa-run analytics`` into
:class:`~deisa.launcher.settings.AnalyticsSettings`. Every option is declared once
(:data:`deisa.launcher.options.OPTIONS`: its flags, the key of the defaults it falls back to,
its check); this pass reads each value, given or from the defaults in force
(:func:`~deisa.launcher.defaults.load_defaults`), checks it by its declaration, then the values
that go together: the simulation's with the Python solver's own
:class:`~deisa_simulation.heat.HeatConfig`, the Bridge's with
:class:`~deisa.bridge.options.BridgeOptions`, the solver that can run
(:func:`deisa.launcher.solver.c_solver_problem`), the protocol
(:func:`deisa.launcher.ucx.check_protocol`). A mistake is one
:class:`~deisa.launcher.defaults.UsageError` naming the option, or where its key came from
(exit status 2).
"""

from __future__ import annotations

import argparse
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..bridge.options import BridgeOptionError, BridgeOptions
from . import checks, solver, ucx
from .adios2_engine import ENGINE_FILE, GUARD_FILE
from .dask_processes import memory_limit
from .defaults import PACKAGED, Defaults, UsageError, load_defaults, read_yaml
from .options import ANALYTICS, OPTIONS, RUN, SLURM, build_parser, option
from .settings import (
    REPO,
    AnalyticsSettings,
    RunSettings,
    SlurmSettings,
    find_path,
    squarest_grid,
)

DEMO_ONLY = ("process_grid", "global_size", "steps", "output_period", "solver", "config",
             "pdi_config")  # fmt: skip
"""Options of the heat demo's simulation: refused beside a user's simulation command."""

_SLURM_KEYS = (
    *("nodes", "worker_nodes", "scheduler_node", "time", "partition", "account", "job_name"),
    *("workdir", "python", "mpi", "interface", "srun_args"),
)

_ANALYTICS_KEYS = ("array", "n_components", "output", "timeout", "buffer_nb",
                   "stop_when_converged", "step_timeout", "dashboard", "scheduler_file",
                   "replay", "timings", "shutdown", "verbose")  # fmt: skip


class Values(dict[str, Any]):
    """Every option of one command, resolved in one pass over
    :data:`~deisa.launcher.options.OPTIONS`: as given, else its key in the defaults in force,
    each checked by its declaration's ``check``; a ``dict`` of ``{key: value}``.

    Attributes
    ----------
    names
        ``{key: name}``: how messages name each value, its flag if given, else where its key
        came from (``deisa/templates/defaults.yml: run.workers``, ``DASK_DEISA__RUN__WORKERS:
        run.workers``, ``my.yml: run.workers``...).
    given
        The keys given on the command line.
    command
        The words after ``--`` (``run`` and ``slurm``: the user's simulation; empty: the heat
        demo).
    """

    def __init__(
        self,
        values: Mapping[str, Any],
        names: Mapping[str, str],
        given: frozenset[str],
        command: Sequence[str] = (),
    ) -> None:
        super().__init__(values)
        self.names = dict(names)
        self.given = given
        self.command = list(command)

    def name(self, key: str) -> str:
        return self.names[key]


def run_settings(command: str, argv: Sequence[str]) -> RunSettings:
    """The settings of ``deisa-run`` (``command`` ``"run"``) or ``deisa-run slurm``
    (``"slurm"``), every one checked, nothing started.

    Parameters
    ----------
    command
        ``"run"`` or ``"slurm"``: which defaults section ``--timeout`` falls back to, whether
        ``mpirun`` must be here, whether the allocation's options are read.
    argv
        The words after the command; those after the first ``--`` are the user's simulation
        command (none: the heat demo).

    Raises
    ------
    UsageError
        One line naming the option or the file at fault.
    SystemExit
        argparse's: ``--help``, or options it refuses (status 2).
    """
    values, defaults = resolve(command, argv)
    simulation, grid = _checked_simulation(values, defaults)
    build_dir, pdi_config = _build_dir(values), find_path(values["pdi_config"])
    bridge = _bridge_options(values)
    stop_origin = defaults.origin("run", "stop_timeout")
    stop_timeout = checks.seconds(stop_origin, defaults["run"]["stop_timeout"])
    _check_user_code(values)
    builtin = values["analytics"] is None
    preload = checks.parse_preload(
        values["worker_preload"], values.name("worker_preload"), builtin=builtin
    )
    slurm = None
    if command == SLURM:
        slurm = SlurmSettings(**{key: values[key] for key in _SLURM_KEYS})
        checks.one_line(values.name("output"), str(values["output"]))
    # after --python: a job on another interpreter checks distributed-ucxx where it runs
    local = slurm is None or slurm.python is None
    protocol = ucx.check_protocol(
        values["protocol"], values["tls"], values.name("protocol"), local=local
    )
    mpi = defaults["mpi"]
    mpirun = [str(mpi["mpirun"]), *map(str, mpi["args"] or [])]
    if command == RUN and shutil.which(mpirun[0]) is None:
        raise UsageError(f"{defaults.origin('mpi', 'mpirun')}: {mpirun[0]!r} not found")
    chosen, reason = _solver(values, build_dir, pdi_config, bridge)
    memory = values["memory_limit"]
    if memory == "auto" and command == RUN:  # this node: the one the workers run on
        step = 0 if values.command else 8 * math.prod(simulation.get("global_size") or (0,))
        memory = memory_limit(values["workers"], step)
    return RunSettings(
        ranks=grid[0] * grid[1], process_grid=grid, workers=values["workers"],
        threads=values["threads"], simulation=simulation, solver=chosen, solver_reason=reason,
        pdi_config=pdi_config, build_dir=build_dir, array=values["array"], bridge=bridge,
        n_components=values["n_components"], output=values["output"],
        timeout=values["timeout"], stop_timeout=stop_timeout, mpirun=mpirun,
        mpi_env={str(k): str(v) for k, v in (mpi.get("env") or {}).items()},
        stop_when_converged=values["stop_when_converged"], tls=values["tls"],
        protocol=protocol, dashboard=values["dashboard"], step_timeout=values["step_timeout"],
        command=values.command, analytics=values["analytics"], worker_preload=preload,
        slurm=slurm, verbose=values["verbose"], memory_limit=memory,
    )  # fmt: skip


def analytics_settings(argv: Sequence[str]) -> AnalyticsSettings:
    """The settings of ``deisa-run analytics``: the options left unset from the launch
    defaults, every one checked by its declaration.

    Raises
    ------
    UsageError
        ``--defaults`` is unreadable or invalid, a value is refused, or neither
        ``--scheduler-file`` nor ``--replay`` is given.
    """
    values, _ = resolve(ANALYTICS, argv)
    if values["scheduler_file"] is None and values["replay"] is None:
        raise UsageError("give --scheduler-file (the live stream) or --replay FILES (saved steps)")
    if values["replay"] is not None and values["stop_when_converged"] is not None:
        raise UsageError("--stop-when-converged steers a running simulation: not with --replay")
    return AnalyticsSettings(
        workers=values["analytics_workers"], **{key: values[key] for key in _ANALYTICS_KEYS}
    )


def resolve(command: str, argv: Sequence[str]) -> tuple[Values, Defaults]:
    """The options of ``command`` in ``argv`` (its help showing the defaults in force: the
    packaged file, the dask configuration, ``--defaults``), the others from those defaults,
    each checked by its declaration; and the defaults.

    Raises
    ------
    UsageError
        ``--defaults`` is unreadable or invalid, or the first value its check refuses, named
        as :attr:`Values.names` says.
    SystemExit
        argparse's: ``--help``, or options it refuses (status 2).
    """
    argv = list(argv)
    simulation: list[str] = []
    if command != ANALYTICS and "--" in argv:
        at = argv.index("--")
        argv, simulation = argv[:at], argv[at + 1 :]
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--defaults")
    known, _ = pre.parse_known_args(argv)
    defaults = load_defaults(known.defaults)
    args = build_parser(command, defaults).parse_args(argv)
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    given: set[str] = set()
    for opt in OPTIONS:
        if command not in opt.sections:
            continue
        value = getattr(args, opt.dest or opt.key, None)
        section = opt.sections[command]
        if value is not None:
            given.add(opt.key)
        if value is not None or section is None:
            names[opt.key] = opt.flag
        else:
            value = defaults[section][opt.key]
            names[opt.key] = defaults.origin(section, opt.key)
        check = opt.check if opt.checked_in is None or command in opt.checked_in else None
        values[opt.key] = value if check is None else check(names[opt.key], value)
    return Values(values, names, frozenset(given), simulation), defaults


def _solver(
    values: Values, build_dir: Path, pdi_config: Path, bridge: BridgeOptions
) -> tuple[str, str]:
    """``(solver, why)``: the one that runs (``user`` for a command after ``--``); a C
    solver's PDI YAML must publish ``--array`` (a wrong one would only show as a stalled
    run)."""
    if values.command:
        return "user", "the command after --"
    chosen, reason = resolve_solver(values["solver"], build_dir, pdi_config)
    if chosen == "c":
        solver.deisa_pdi_config(pdi_config, "", bridge, values["array"])
    return chosen, reason


def resolve_solver(asked: str, build_dir: Path, pdi_config: Path) -> tuple[str, str]:
    """``("c" | "python", why)``: the solver that ``--solver auto | c | python`` runs.

    Raises
    ------
    UsageError
        ``asked`` is none of the three, or is ``c`` and the C solver cannot run here
        (:func:`~deisa.launcher.solver.c_solver_problem` says why).
    """
    if asked == "python":
        return "python", "--solver python"
    if asked not in ("auto", "c"):
        raise UsageError(f"--solver {asked!r}: one of auto, c, python")
    reason = solver.c_solver_problem(build_dir, pdi_config)
    if reason is None:
        return "c", "C solver built and PDI loads"
    if asked == "c":
        raise UsageError(f"--solver c: {reason}")
    return "python", reason


def _checked_simulation(
    values: Values, defaults: Defaults
) -> tuple[dict[str, Any], tuple[int, int]]:
    """The simulation's settings, checked by the Python solver's own
    :class:`~deisa_simulation.heat.HeatConfig` before any rank starts, and the process grid."""
    from deisa_simulation.heat import HeatConfig

    simulation, origin, config = _simulation_settings(values, defaults)
    grid = _grid(values, simulation, origin, config)
    simulation["process_grid"] = list(grid)
    try:
        HeatConfig(**simulation)
    except (TypeError, ValueError) as exc:
        key = str(exc).split(":", 1)[0]
        raise UsageError(f"{origin.get(key, 'simulation settings')}: {exc}") from None
    return simulation, grid


def _simulation_settings(
    values: Values, defaults: Defaults
) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """The simulation's settings (config file, then options, then defaults), where each came
    from (for error messages), and the config file's name."""
    from deisa_simulation.heat import HeatConfig

    config = values["config"]
    simulation: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if config is not None:
        simulation = read_yaml(find_path(config), f"--config {config}") or {}
        if not isinstance(simulation, dict):
            raise UsageError(f"--config {config}: expected a mapping of settings")
        known = set(HeatConfig.__dataclass_fields__)
        unknown = sorted(set(simulation) - known)
        if unknown:
            raise UsageError(
                f"--config {config}: unknown key(s) {unknown}; valid keys are {sorted(known)}"
            )
        origin = dict.fromkeys(simulation, f"--config {config}")
    for key in ("global_size", "steps", "output_period"):
        value = values[key]
        if key in values.given:
            words = map(str, value) if isinstance(value, (list, tuple)) else [str(value)]
            simulation[key] = list(value) if isinstance(value, (list, tuple)) else value
            origin[key] = f"{option(key).flag} {' '.join(words)}"
        elif key not in simulation:
            simulation[key] = value
            where = defaults.origins.get(("run", key), PACKAGED)
            origin[key] = f"run.{key} of {where}"
    return simulation, origin, config


def _grid(
    values: Values, simulation: Mapping[str, Any], origin: dict[str, str], config: str | None
) -> tuple[int, int]:
    """The process grid: ``--process-grid``, else the config file's (without ``--ranks``),
    else the defaults' (without ``--ranks``), else the squarest grid of the ranks."""
    ranks_given = "ranks" in values.given
    grid: tuple[int, int] | None
    if "process_grid" in values.given:
        grid = values["process_grid"]
        assert grid is not None
        origin["process_grid"] = f"--process-grid {grid[0]} {grid[1]}"
    elif not ranks_given and "process_grid" in simulation:
        grid = checks.pair(f"process_grid of {config}", simulation["process_grid"])
    elif not ranks_given and values["process_grid"] is not None:
        grid = values["process_grid"]
        origin["process_grid"] = values.name("process_grid")
    else:
        grid = squarest_grid(values["ranks"])
        origin["process_grid"] = f"--ranks {values['ranks']}"
    assert grid is not None
    if ranks_given and grid[0] * grid[1] != values["ranks"]:
        raise UsageError(
            f"--process-grid {grid[0]} {grid[1]} has {grid[0] * grid[1]} ranks, --ranks is "
            f"{values['ranks']}"
        )
    return grid


def _build_dir(values: Values) -> Path:
    """The packaged default is this project's build, wherever the user stands (their own
    code's build/ must not hide it); a --build-dir they type is relative to where they are.

    Refused (before anything of it is looked at, ``ldd`` included) where another account could
    change it, one of its parents, or what the run would take from it: the C solver, the deisa
    PDI plugin, the ADIOS2 engine and its guard, which the simulation preloads
    (:func:`~deisa.launcher.checks.safe_path`), or make them load a library of theirs (an
    empty, relative or open ``RUNPATH`` entry: :func:`~deisa.launcher.checks.safe_library`);
    and where another account could add a file to ``plugin/`` or ``plugin/adios2``, which PDI
    and ADIOS2 search by name (:func:`~deisa.launcher.checks.private_dir`)."""
    if "build_dir" in values.given:
        written = Path(values["build_dir"]).absolute()  # its links' directories checked too
        build = written.resolve()
    else:
        written = build = find_path(REPO / values["build_dir"])
    engine = build / "plugin" / "adios2"
    built = (build / "simulation" / "heat", build / "plugin" / solver.PLUGIN_FILE,
             engine / ENGINE_FILE, engine / GUARD_FILE)  # fmt: skip
    label = values.name("build_dir")
    checks.safe_path(label, written)
    for path in built:  # the libraries and the program, their RUNPATH too
        checks.safe_library(label, path)
    for directory in (build / "plugin", engine):  # searched by name by PDI, ADIOS2
        if directory.exists():
            checks.private_dir(label, directory)
    return build


def _bridge_options(values: Values) -> BridgeOptions:
    """The Bridge options that ``deisa-run`` sets, checked by
    :class:`~deisa.bridge.options.BridgeOptions`."""
    given = {"mode": values["mode"], "max_in_flight": values["max_in_flight"]}
    try:
        return BridgeOptions(placement=values["placement"], buffer_nb=values["buffer_nb"], **given)
    except BridgeOptionError as exc:
        if exc.option in given:
            label = f"{values.name(exc.option)} {given[exc.option]}"
        elif "placement" in values.given:
            label = f"--placement {values['placement']}"
        else:
            label = values.name("placement")
        raise UsageError(f"{label}: {exc}") from None


def _check_user_code(values: Values) -> None:
    """Beside a user's simulation command, the heat demo's options are refused."""
    if not values.command:
        return
    demo = [option(key).flag for key in DEMO_ONLY if key in values.given]
    if demo:
        raise UsageError(
            f"{', '.join(demo)} set the heat demo's simulation, not a command given after "
            "--: pass your program its own settings"
        )
