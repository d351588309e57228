"""Launch settings: the defaults file, the one declaration of every option, and their checks.

Every option of ``deisa-run``, ``deisa-run slurm`` and ``deisa-run analytics`` is declared once,
in :data:`OPTIONS`, with the defaults section it falls back to for each command. Its help is
the comment after its key in ``deisa/templates/defaults.yml``, followed by the value in force
(the packaged one, or that of ``--defaults FILE``). :func:`resolve_settings` turns the parsed
options into :class:`RunSettings` and checks all of them, the simulation's settings with the
Python solver's own :class:`~deisa_simulation.heat.HeatConfig` and the Bridge's with
:class:`~deisa.bridge.options.BridgeOptions`, before anything starts: a mistake is one
:class:`UsageError` naming the option or the file it came from.
"""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ..bridge.options import MODES, BridgeOptionError, BridgeOptions
from ..bridge.placement import PLACEMENTS

DEFAULTS_FILE = Path(__file__).resolve().parents[1] / "templates" / "defaults.yml"
REPO = Path(__file__).resolve().parents[2]

# The Bridge options that deisa-run sets; the others keep the Python solver's defaults, or the
# values of the C solver's PDI YAML.
LAUNCHER_BRIDGE_OPTIONS = ("placement", "buffer_nb", "mode", "max_in_flight")


class UsageError(ValueError):
    """Options or configuration files that cannot work together; exit status 2."""


# -- the defaults file --------------------------------------------------------------------------


def read_yaml(path: Path, option: str) -> Any:
    """The YAML document in ``path``; an unreadable or invalid file is a usage error of
    ``option`` (e.g. ``"--config FILE"``)."""
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{option}: {exc}") from exc


def load_defaults(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The packaged launch defaults, updated section by section with those of ``path``.

    Raises
    ------
    UsageError
        ``path`` is unreadable or has a section or key the packaged file does not.
    """
    defaults: dict[str, dict[str, Any]] = yaml.safe_load(DEFAULTS_FILE.read_text())
    if path is None:
        return defaults
    user = read_yaml(Path(path), f"--defaults {path}") or {}
    if not isinstance(user, dict):
        raise UsageError(f"--defaults {path}: expected sections {sorted(defaults)}")
    for section, values in user.items():
        if section not in defaults or not isinstance(values, dict):
            raise UsageError(
                f"--defaults {path}: unknown section {section!r}; sections are {sorted(defaults)}"
            )
        unknown = sorted(set(values) - set(defaults[section]))
        if unknown:
            raise UsageError(
                f"--defaults {path}: unknown key(s) {unknown} in {section!r}; valid keys are "
                f"{sorted(defaults[section])}"
            )
        defaults[section].update(values)
    return defaults


_SECTION = re.compile(r"^(\w+):")
_KEY = re.compile(r"^  (\w+):[^#]*?(?:#\s?(.*))?$")
_MORE = re.compile(r"^(\s+)#\s?(.*)$")


@cache
def default_comments() -> dict[str, dict[str, str]]:
    """``{section: {key: comment}}`` of the packaged defaults file: the text after the ``#``
    of each key's line, with the comment lines indented under it (continuations)."""
    comments: dict[str, dict[str, str]] = {}
    section = key = None
    for line in DEFAULTS_FILE.read_text().splitlines():
        if match := _SECTION.match(line):
            section, key = match.group(1), None
            comments[section] = {}
        elif section and (match := _KEY.match(line)):
            key = match.group(1)
            comments[section][key] = (match.group(2) or "").strip()
        elif section and key and (match := _MORE.match(line)) and len(match.group(1)) > 2:
            comments[section][key] += " " + match.group(2).strip()
        else:
            key = None
    return comments


# -- the options ----------------------------------------------------------------------------------

RUN, SLURM, ANALYTICS = "run", "slurm", "analytics"


@dataclass(frozen=True)
class Option:
    """One command-line option of the launcher.

    Attributes
    ----------
    key
        Attribute of the parsed namespace, and key in the defaults file.
    flags
        ``("--ranks", "-n")``.
    sections
        ``{command: section}``: the commands that take the option, each with the section of
        the defaults file it falls back to (``None``: not in the file, ``default`` is used).
    kwargs
        More arguments of ``add_argument`` (``type``, ``nargs``, ``choices``...).
    help
        Help of an option that is not in the defaults file (otherwise its key's comment).
    default
        Value of an option that is not in the defaults file.
    """

    key: str
    flags: tuple[str, ...]
    sections: Mapping[str, str | None]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    help: str = ""
    default: Any = None

    @property
    def flag(self) -> str:
        return self.flags[0]


def _both(section: str = "run") -> dict[str, str | None]:
    return {RUN: section, SLURM: section}


_PAIR = {"type": int, "nargs": 2, "metavar": ("ROWS", "COLS")}

OPTIONS: tuple[Option, ...] = (
    # simulation
    Option("ranks", ("--ranks", "-n"), _both(), {"type": int}),
    Option("process_grid", ("--process-grid",), _both(), _PAIR),
    Option("global_size", ("--size",), _both(), _PAIR),
    Option("steps", ("--steps",), _both(), {"type": int}),
    Option("output_period", ("--output-period",), _both(), {"type": int}),
    Option("solver", ("--solver",), _both(), {"choices": ["auto", "c", "python"]}),
    Option("config", ("--config",), _both()),
    Option("pdi_config", ("--pdi-config",), _both()),
    Option("build_dir", ("--build-dir",), _both()),
    # data path
    Option("array", ("--array",), {RUN: "run", SLURM: "run", ANALYTICS: "run"}),
    Option("placement", ("--placement",), _both(), {"choices": sorted(PLACEMENTS)}),
    # the analytics client fits as many steps at once as the stream may queue
    Option(
        "buffer_nb",
        ("--buffer-nb",),
        {RUN: "run", SLURM: "run", ANALYTICS: "run"},
        {"metavar": "N|none"},
    ),
    Option("mode", ("--mode",), _both(), {"choices": list(MODES)}),
    Option("max_in_flight", ("--max-in-flight",), _both(), {"type": int, "metavar": "N"}),
    # Dask
    Option("workers", ("--workers", "-w"), _both(), {"type": int}),
    Option("threads", ("--threads", "-t"), _both(), {"type": int}),
    # analytics and run
    Option(
        "n_components",
        ("--n-components",),
        {RUN: "run", SLURM: "run", ANALYTICS: "run"},
        {"type": int},
    ),
    Option("output", ("--output", "-o"), {RUN: "run", SLURM: "run", ANALYTICS: "run"}),
    Option(
        "stop_when_converged",
        ("--stop-when-converged",),
        {RUN: "run", SLURM: "run", ANALYTICS: "run"},
        {"type": float, "metavar": "EPS"},
    ),
    # Batch jobs are slower to start than a laptop: their patience is the Slurm section's.
    Option(
        "timeout", ("--timeout",), {RUN: "run", SLURM: "slurm", ANALYTICS: "slurm"}, {"type": float}
    ),
    # Slurm
    Option("nodes", ("--nodes", "-N"), {SLURM: "slurm"}, {"type": int}),
    Option("worker_nodes", ("--worker-nodes",), {SLURM: "slurm"}, {"type": int}),
    Option(
        "scheduler_node",
        ("--scheduler-node",),
        {SLURM: "slurm"},
        {"choices": ["auto", "own", "shared"]},
    ),
    Option("time", ("--time",), {SLURM: "slurm"}),
    Option("partition", ("--partition", "-p"), {SLURM: "slurm"}),
    Option("job_name", ("--job-name",), {SLURM: "slurm"}),
    Option("workdir", ("--workdir",), {SLURM: "slurm"}),
    Option("python", ("--python",), {SLURM: "slurm"}),
    Option("mpi", ("--mpi",), {SLURM: "slurm"}),
    Option("interface", ("--interface",), {SLURM: "slurm"}),
    Option("srun_args", ("--srun-arg",), {SLURM: "slurm"}, {"action": "append"}),
    # the analytics client alone
    Option(
        "scheduler_file",
        ("--scheduler-file",),
        {ANALYTICS: None},
        {"required": True},
        help="JSON file of `dask scheduler --scheduler-file`",
    ),
    Option(
        "analytics_workers",
        ("--workers",),
        {ANALYTICS: None},
        {"type": int},
        help="workers to wait for before starting",
        default=1,
    ),
    Option(
        "timings",
        ("--timings",),
        {ANALYTICS: None},
        help="simulation timings JSON to wait for and include in the table",
    ),
    Option(
        "shutdown",
        ("--shutdown",),
        {ANALYTICS: None},
        {"action": "store_true"},
        help="shut the scheduler and workers down at the end",
        default=False,
    ),
    # every command
    Option(
        "defaults",
        ("--defaults",),
        {RUN: None, SLURM: None, ANALYTICS: None},
        help="YAML file overriding deisa/templates/defaults.yml",
    ),
    Option(
        "verbose",
        ("--verbose", "-v"),
        {RUN: None, SLURM: None, ANALYTICS: None},
        {"action": "count"},
        help="log more (-v info, -vv debug)",
        default=0,
    ),
)


def option(key: str) -> Option:
    """The declaration of ``key`` in :data:`OPTIONS`."""
    return next(o for o in OPTIONS if o.key == key)


def add_options(
    parser: argparse.ArgumentParser, command: str, defaults: Mapping[str, Mapping[str, Any]]
) -> None:
    """Declare on ``parser`` every option ``command`` takes; defaults-file options are left
    ``None`` when not given, so that :func:`pick` can tell them from the file's values."""
    comments = default_comments()
    for opt in OPTIONS:
        if command not in opt.sections:
            continue
        section = opt.sections[command]
        if section is None:
            text, default = opt.help, opt.default
            if default:
                text += f" (default: {default})"
        else:
            text, default = comments[section][opt.key], None
            value = defaults[section][opt.key]
            if value is not None and value != []:
                shown = " ".join(map(str, value)) if isinstance(value, list) else value
                text += f" (default: {shown})"
        dest = "workers" if opt.key == "analytics_workers" else opt.key
        parser.add_argument(
            *opt.flags, dest=dest, default=default, help=text.replace("%", "%%"), **opt.kwargs
        )


def pick(
    args: argparse.Namespace,
    defaults: Mapping[str, Mapping[str, Any]],
    command: str,
    key: str,
) -> Any:
    """The option ``key`` of ``command``: as given, else from its section of the defaults."""
    value = getattr(args, key, None)
    section = option(key).sections[command]
    if value is not None or section is None:
        return value
    return defaults[section][key]


def find_path(path: str | Path) -> Path:
    """``path``, absolute: a relative one from the current directory if it exists there, else
    from the repository (so ``configs/...`` and ``build`` work from anywhere)."""
    path = Path(path)
    if path.is_absolute() or path.exists() or not (REPO / path).exists():
        return path.resolve()
    return REPO / path


# -- settings -----------------------------------------------------------------------------------


def squarest_grid(ranks: int) -> tuple[int, int]:
    """Rows and columns of ranks, as square as possible, rows >= columns (as MPI_Dims_create)."""
    cols = max(c for c in range(1, int(ranks**0.5) + 1) if ranks % c == 0)
    return ranks // cols, cols


@dataclass
class RunSettings:
    """Everything a run needs, resolved from options, config files and defaults, checked."""

    ranks: int
    process_grid: tuple[int, int]
    workers: int
    threads: int
    simulation: dict[str, Any]
    solver: str
    pdi_config: Path
    build_dir: Path
    array: str
    bridge: BridgeOptions
    n_components: int
    output: Path
    timeout: float
    stop_timeout: float
    mpirun: list[str]
    mpi_env: dict[str, str] = field(default_factory=dict)
    solver_reason: str = ""
    stop_when_converged: float | None = None

    @property
    def placement(self) -> str:
        return self.bridge.placement

    @property
    def buffer_nb(self) -> int | None:
        return self.bridge.buffer_nb

    def summary(self) -> dict[str, Any]:
        """The settings recorded in ``results.json``."""
        return {
            "ranks": self.ranks,
            "workers": self.workers,
            "threads": self.threads,
            "solver": self.solver,
            "placement": self.placement,
            "buffer_nb": self.buffer_nb,
            "array": self.array,
            "n_components": self.n_components,
            "stop_when_converged": self.stop_when_converged,
            "simulation": self.simulation,
        }


def positive(name: str, value: Any, *, allow_none: bool = False) -> Any:
    """``value`` if it is a positive integer (or ``None`` when allowed); ``name`` in the error."""
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{name}={value!r} must be a positive integer")
    return value


def positive_seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UsageError(f"{name}={value!r} must be a positive number of seconds")
    return float(value)


def _pair(name: str, value: Any) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise UsageError(f"{name}={value!r} must be two positive integers")
    return (positive(name, value[0]), positive(name, value[1]))


def parse_buffer_nb(value: int | str | None, name: str = "--buffer-nb") -> int | None:
    """``--buffer-nb``: a positive integer, or ``None`` (unbounded) for ``none`` or ``null``.

    ``0`` is refused, as by :class:`deisa.Bridge` (it meant "unbounded" for ``deisa-run``
    before 0.1.0; write ``none``).

    Raises
    ------
    UsageError
        Neither.
    """
    if isinstance(value, str):
        if value.strip().lower() in ("none", "null", "~"):
            return None
        try:
            value = int(value)
        except ValueError:
            raise UsageError(f"{name} {value!r}: a positive integer or 'none'") from None
    try:
        return BridgeOptions(buffer_nb=value).buffer_nb
    except BridgeOptionError as exc:
        raise UsageError(f"{name} {value!r}: {exc}; write 'none' for unbounded") from None


def _simulation_settings(
    args: argparse.Namespace, run: Mapping[str, Any], defaults_name: str
) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """The simulation's settings (config file, then options, then defaults), where each came
    from (for error messages), and the config file's name."""
    from deisa_simulation.heat import HeatConfig

    config = args.config if args.config is not None else run["config"]
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
        value = getattr(args, key, None)
        flag = option(key).flag
        if value is not None:
            if isinstance(value, (list, tuple)):
                simulation[key] = list(value)
                origin[key] = f"{flag} {' '.join(map(str, value))}"
            else:
                simulation[key] = value
                origin[key] = f"{flag} {value}"
        elif key not in simulation:
            simulation[key] = run[key]
            origin[key] = f"run.{key} of {defaults_name}"
    return simulation, origin, config


def resolve_options(args: argparse.Namespace, command: str = RUN) -> RunSettings:
    """Options > simulation config file > defaults file, all checked, nothing started.

    The solver is left as asked (``auto``, ``c`` or ``python``):
    :func:`deisa.launcher.solver.resolve_settings` picks it and checks that it can run.

    Parameters
    ----------
    args
        Parsed by a parser that :func:`add_options` filled for ``command``.
    command
        ``"run"`` or ``"slurm"``: which defaults section ``--timeout`` falls back to, and
        whether ``mpirun`` must be here.

    Raises
    ------
    UsageError
        One line naming the option or the file at fault.
    """
    from deisa_simulation.heat import HeatConfig

    defaults = load_defaults(args.defaults)
    defaults_name = args.defaults or "deisa/templates/defaults.yml"
    run, mpi = defaults["run"], defaults["mpi"]

    def get(key: str) -> Any:
        return pick(args, defaults, command, key)

    def name(key: str) -> str:
        """How errors name ``key``: its flag if given, else its key in the defaults file."""
        if getattr(args, key, None) is not None:
            return option(key).flag
        return f"{defaults_name}: {option(key).sections[command]}.{key}"

    def counted(key: str) -> int:
        count: int = positive(name(key), get(key))
        return count

    simulation, origin, config = _simulation_settings(args, run, defaults_name)
    ranks = get("ranks") if args.ranks is not None else None
    if args.process_grid is not None:
        grid = _pair("--process-grid", args.process_grid)
        origin["process_grid"] = f"--process-grid {grid[0]} {grid[1]}"
    elif args.ranks is None and "process_grid" in simulation:
        grid = _pair(f"process_grid of {config}", simulation["process_grid"])
    elif args.ranks is None and run["process_grid"] is not None:
        grid = _pair("process_grid", run["process_grid"])
        origin["process_grid"] = f"run.process_grid of {defaults_name}"
    else:
        grid = squarest_grid(counted("ranks"))
        origin["process_grid"] = f"--ranks {get('ranks')}"
    ranks = positive("--ranks", ranks if ranks is not None else grid[0] * grid[1])
    if grid[0] * grid[1] != ranks:
        raise UsageError(
            f"--process-grid {grid[0]} {grid[1]} has {grid[0] * grid[1]} ranks, --ranks is {ranks}"
        )
    simulation["process_grid"] = list(grid)
    try:  # the Python solver's own checks, before any rank starts
        HeatConfig(**simulation)
    except (TypeError, ValueError) as exc:
        key = str(exc).split(":", 1)[0]
        raise UsageError(f"{origin.get(key, 'simulation settings')}: {exc}") from None
    placement = get("placement")
    buffer_nb = parse_buffer_nb(get("buffer_nb"), name("buffer_nb"))
    given = {"mode": get("mode"), "max_in_flight": get("max_in_flight")}
    try:
        bridge = BridgeOptions(placement=placement, buffer_nb=buffer_nb, **given)
    except BridgeOptionError as exc:
        if exc.option in given:
            label = f"{name(exc.option)} {given[exc.option]}"
        elif args.placement is not None:
            label = f"--placement {placement}"
        else:
            label = name("placement")
        raise UsageError(f"{label}: {exc}") from None
    settings = RunSettings(
        ranks=ranks,
        process_grid=grid,
        workers=counted("workers"),
        threads=counted("threads"),
        simulation=simulation,
        solver=get("solver"),
        pdi_config=find_path(get("pdi_config")),
        build_dir=find_path(get("build_dir")),
        array=_array(name("array"), get("array")),
        bridge=bridge,
        n_components=counted("n_components"),
        output=Path(get("output")).resolve(),
        timeout=positive_seconds(name("timeout"), get("timeout")),
        stop_timeout=positive_seconds("run.stop_timeout", run["stop_timeout"]),
        mpirun=[str(mpi["mpirun"]), *map(str, mpi["args"] or [])],
        mpi_env={str(k): str(v) for k, v in (mpi.get("env") or {}).items()},
        stop_when_converged=parse_eps(get("stop_when_converged"), name("stop_when_converged")),
    )
    if command == RUN and shutil.which(settings.mpirun[0]) is None:
        raise UsageError(f"mpi.mpirun of {defaults_name}: {settings.mpirun[0]!r} not found")
    return settings


def parse_eps(value: Any, name: str = "--stop-when-converged") -> float | None:
    """``--stop-when-converged``: a positive number, or ``None`` (never stop the simulation).

    Raises
    ------
    UsageError
        Anything else, naming ``name``.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UsageError(f"{name}={value!r} must be a positive number (a relative change)")
    return float(value)


def _array(label: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise UsageError(f"{label}={name!r} must be a non-empty name")
    return name
