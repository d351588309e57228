"""The settings of a run: options > simulation config file > defaults file, all checked.

:func:`resolve_options` turns the parsed options into :class:`RunSettings` and checks all of
them before anything starts, the simulation's settings with the Python solver's own
:class:`~deisa_simulation.heat.HeatConfig`, the Bridge's with
:class:`~deisa.bridge.options.BridgeOptions` and the launcher's counts and durations with the
same constraints: a mistake is one :class:`~deisa.launcher.defaults.UsageError` naming the
option or the file it came from.
"""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bridge.options import BridgeOptionError, BridgeOptions, Constraint, Count, Positive
from .defaults import UsageError, load_defaults, read_yaml
from .options import RUN, SLURM, option, pick
from .security import output_problem
from .ucx import check_protocol

REPO = Path(__file__).resolve().parents[2]

# The Bridge options that deisa-run sets; the others keep the Python solver's defaults, or the
# values of the C solver's PDI YAML.
LAUNCHER_BRIDGE_OPTIONS = ("placement", "buffer_nb", "mode", "max_in_flight")

# finite: the Slurm job writes it out and waits for the scheduler a whole number of seconds
SECONDS = Positive("seconds", finite=True)
STEP_SECONDS = Positive("seconds", none="as long as the simulation runs", finite=True)

_SLURM_KEYS = (
    *("nodes", "worker_nodes", "scheduler_node", "time", "partition", "account", "job_name"),
    *("workdir", "python", "mpi", "interface", "srun_args"),
)


@dataclass(frozen=True)
class Grammar:
    """A string option that the job script carries as it is (an ``#SBATCH`` value, a name in
    a command): the whole of it must match :attr:`pattern`, which admits no newline and no
    shell metacharacter.

    Attributes
    ----------
    pattern
        Regular expression (ASCII) that the whole value matches (:func:`re.fullmatch`: a
        trailing newline fails too).
    what
        The grammar in words, for the error message.
    none
        Whether ``None`` (the option unset: Slurm's default) is allowed.
    """

    pattern: str
    what: str
    none: bool = False

    def check(self, name: str, value: Any) -> str | None:
        """``value``, if it matches; ``name`` (the option, or its key in the defaults file)
        and the value in the :class:`UsageError` otherwise."""
        if value is None and self.none:
            return None
        if not isinstance(value, str) or re.fullmatch(self.pattern, value, re.ASCII) is None:
            raise UsageError(f"{name}={value!r} must be {self.what}")
        return value


_NAME = r"[A-Za-z0-9_.+-]+"
_PLAIN = "letters, digits, _ . - +"

SLURM_GRAMMARS: dict[str, Grammar] = {
    "job_name": Grammar(_NAME, f"a plain name ({_PLAIN})"),
    "partition": Grammar(
        rf"{_NAME}(,{_NAME})*", f"partition names ({_PLAIN}), several separated by commas", True
    ),
    "account": Grammar(_NAME, f"a plain name ({_PLAIN})", True),
    # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit
    "time": Grammar(
        r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}|(?i:unlimited|infinite)",
        "a Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED or "
        "INFINITE (a string in YAML: quote it)",
    ),
    "mpi": Grammar(r"[A-Za-z0-9_]+", "an srun --mpi plugin name (letters, digits, _: pmix, pmi2)"),
    # Linux: at most 15 characters; Dask and Open MPI take it as they are given it
    "interface": Grammar(
        r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}",
        "a network interface name (ib0, eth0: at most 15 letters, digits, _ . -)",
        True,
    ),
}
"""The grammars of the ``slurm`` options written into the job script as they are."""

ARRAY = Grammar(
    r"[A-Za-z_][A-Za-z0-9_]*",
    "an identifier: letters, digits and _, not starting with a digit",
)
"""The grammar of ``--array``: no ``$`` (a PDI expression), no regular expression (the deisa
plugin's dataset names may be ones), no ``-`` (Dask keys join names with it), no shell word."""


def find_path(path: str | Path) -> Path:
    """``path``, absolute: a relative one from the current directory if it exists there, else
    from the repository (so ``configs/...`` and ``build`` work from anywhere)."""
    path = Path(path)
    if path.is_absolute() or path.exists() or not (REPO / path).exists():
        return path.resolve()
    return REPO / path


def squarest_grid(ranks: int) -> tuple[int, int]:
    """Rows and columns of ranks, as square as possible, rows >= columns (as MPI_Dims_create)."""
    cols = max(c for c in range(1, int(ranks**0.5) + 1) if ranks % c == 0)
    return ranks // cols, cols


@dataclass(frozen=True)
class SlurmSettings:
    """The options of ``deisa-run slurm`` alone (the ``slurm`` section of the defaults file).

    :func:`resolve_options` checks those written into the job script as they are against
    :data:`SLURM_GRAMMARS`, and the paths of ``#SBATCH`` lines for newlines;
    :func:`deisa.launcher.slurm.job_script` checks the layout and quotes every value it writes.
    """

    nodes: int = 1
    worker_nodes: int | None = None
    scheduler_node: str = "auto"
    time: str = "00:10:00"
    partition: str | None = None
    account: str | None = None
    job_name: str = "deisa"
    workdir: str = "."
    python: str | None = None
    mpi: str = "pmix"
    interface: str | None = None
    srun_args: tuple[str, ...] = ()


@dataclass
class RunSettings:
    """Everything a run needs, resolved from options, config files and defaults, checked.

    ``slurm`` is set for ``deisa-run slurm`` only.
    """

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
    slurm: SlurmSettings | None = None
    command: list[str] = field(default_factory=list)
    analytics: str | None = None
    worker_preload: str | None = None
    tls: bool = True
    """Mutual TLS with credentials made for the run (:mod:`deisa.launcher.security`);
    ``False``: ``--insecure``."""
    protocol: str = "tcp"
    """What the Dask processes speak: ``tcp`` (TLS unless ``--insecure``) or ``ucx``
    (:mod:`deisa.launcher.ucx`: only with ``--insecure``)."""
    step_timeout: float | None = None
    """Seconds without a step before the run fails, however alive the simulation is
    (:mod:`deisa.launcher.stall`); ``None``: as long as it runs."""

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
            "worker_preload": self.worker_preload,
            "tls": self.tls,
            "protocol": self.protocol,
            "stop_when_converged": self.stop_when_converged,
            "simulation": self.simulation,
        }


def checked(constraint: Constraint, name: str, value: Any) -> Any:
    """``value`` checked by ``constraint`` (one of the Bridge options' constraints), named
    ``name`` in the :class:`UsageError`."""
    try:
        return constraint.check(name, value)
    except BridgeOptionError as exc:
        raise UsageError(str(exc)) from None


def positive(name: str, value: Any) -> int:
    """``value`` if it is a positive integer; ``name`` in the error."""
    count: int = checked(Count(), name, value)
    return count


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
        try:
            value = BridgeOptions.constraint("buffer_nb").parse(value)  # int or None
        except ValueError:
            raise UsageError(f"{name} {value!r}: a positive integer or 'none'") from None
    try:
        return BridgeOptions(buffer_nb=value).buffer_nb  # type: ignore[arg-type]
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


DEMO_ONLY = ("process_grid", "global_size", "steps", "output_period", "solver", "config",
             "pdi_config")  # fmt: skip
"""Options of the heat demo's simulation: refused beside a user's simulation command."""


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
        # the packaged default is this project's build, wherever the user stands (their own
        # code's build/ must not hide it); a --build-dir they type is relative to where they are
        build_dir=(
            Path(args.build_dir).resolve()
            if args.build_dir is not None
            else find_path(REPO / get("build_dir"))
        ),
        array=_array(name("array"), get("array")),
        bridge=bridge,
        n_components=counted("n_components"),
        output=_output(name("output"), get("output")),
        timeout=checked(SECONDS, name("timeout"), get("timeout")),
        stop_timeout=checked(SECONDS, "run.stop_timeout", run["stop_timeout"]),
        mpirun=[str(mpi["mpirun"]), *map(str, mpi["args"] or [])],
        mpi_env={str(k): str(v) for k, v in (mpi.get("env") or {}).items()},
        stop_when_converged=parse_eps(get("stop_when_converged"), name("stop_when_converged")),
        tls=_flag(name("tls"), get("tls")),
        step_timeout=parse_step_timeout(get("step_timeout"), name("step_timeout")),
    )
    settings.command = list(getattr(args, "command", None) or [])
    if settings.command:
        demo = [option(key).flag for key in DEMO_ONLY if getattr(args, key, None) is not None]
        if demo:
            raise UsageError(
                f"{', '.join(demo)} set the heat demo's simulation, not a command given after "
                "--: pass your program its own settings"
            )
    settings.analytics = getattr(args, "analytics", None)
    settings.worker_preload = parse_preload(
        get("worker_preload"), name("worker_preload"), builtin=settings.analytics is None
    )
    if command == SLURM:
        settings.slurm = _slurm_settings({key: get(key) for key in _SLURM_KEYS}, name)
        _one_line(name("output"), str(settings.output))
    # after --python: a job on another interpreter checks distributed-ucxx where it runs
    settings.protocol = check_protocol(
        get("protocol"),
        settings.tls,
        name("protocol"),
        local=settings.slurm is None or settings.slurm.python is None,
    )
    if command == RUN and shutil.which(settings.mpirun[0]) is None:
        raise UsageError(f"mpi.mpirun of {defaults_name}: {settings.mpirun[0]!r} not found")
    return settings


#: what ``--worker-preload pca`` names: the PCA's warm-up, a module of no public API
PCA_WARM_UP = "deisa.analysis._warm"


def preload_args(module: str | None) -> list[str]:
    """``dask worker`` options that preload ``module`` (``[]`` for ``None``) and keep the
    preloads of the dask configuration (``distributed.worker.preload``, e.g. from
    ``DASK_DISTRIBUTED__WORKER__PRELOAD``), which a ``--preload`` option would otherwise
    replace."""
    if module is None:
        return []
    import dask.config

    configured = dask.config.get("distributed.worker.preload", default=None) or []
    if isinstance(configured, str):
        configured = [configured]
    modules = dict.fromkeys([*map(str, configured), module])
    return [arg for m in modules for arg in ("--preload", m)]


def parse_preload(value: Any, name: str = "--worker-preload", *, builtin: bool) -> str | None:
    """``--worker-preload``: the module the workers preload, or ``None``.

    ``"pca"`` is :data:`PCA_WARM_UP`; ``"auto"`` is ``"pca"`` when the analytics is the
    built-in PCA (``builtin``) and nothing for a user's ``--analytics``, whose stack deisa
    does not know; ``None`` or ``"none"``: nothing; any other value is a module name (or a
    ``.py`` path) handed to ``dask worker --preload``.

    Raises
    ------
    UsageError
        Not a non-empty string, naming ``name``.
    """
    if value is None or value == "none":
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{name}={value!r} must be auto, pca, none or a module name")
    if value == "auto":
        return PCA_WARM_UP if builtin else None
    return PCA_WARM_UP if value == "pca" else value


def parse_eps(value: Any, name: str = "--stop-when-converged") -> float | None:
    """``--stop-when-converged``: a positive number, or ``None`` (never stop the simulation).

    Raises
    ------
    UsageError
        Anything else, naming ``name``.
    """
    eps: float | None = checked(Positive(none="never"), name, value)
    return eps


def parse_step_timeout(value: Any, name: str = "--step-timeout") -> float | None:
    """``--step-timeout``: a positive number of seconds, or ``None`` (``none``, ``null``: wait
    for a step as long as the simulation runs).

    Raises
    ------
    UsageError
        Anything else, naming ``name``.
    """
    if isinstance(value, str):
        try:
            value = STEP_SECONDS.parse(value)
        except ValueError:
            raise UsageError(
                f"{name}={value!r} must be a positive number of seconds or none"
            ) from None
    seconds: float | None = checked(STEP_SECONDS, name, value)
    return seconds


def _output(label: str, value: Any) -> Path:
    """``--output``, absolute, refused where another account could tamper with the run's
    files (:func:`~deisa.launcher.security.output_problem`)."""
    if not isinstance(value, (str, Path)) or not str(value):
        raise UsageError(f"{label}={value!r} must be a directory")
    path = Path(value).resolve()
    problem = output_problem(path)
    if problem is not None:
        raise UsageError(f"{label}: {problem}")
    return path


def _flag(label: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{label}={value!r} must be true or false")
    return value


def _array(label: str, name: Any) -> str:
    array = ARRAY.check(label, name)
    assert array is not None  # ARRAY takes no None
    return array


def _slurm_settings(values: dict[str, Any], name: Callable[[str], str]) -> SlurmSettings:
    """The ``slurm`` options, checked: a value that the job script writes as it is by its
    grammar (:data:`SLURM_GRAMMARS`), the working directory (an ``#SBATCH`` line) by
    :func:`_one_line`, the words it quotes for their type; ``name(key)`` names an option."""
    for key, grammar in SLURM_GRAMMARS.items():
        grammar.check(name(key), values[key])
    _one_line(name("workdir"), values["workdir"])
    python = values["python"]
    if python is not None and (not isinstance(python, str) or not python):
        raise UsageError(f"{name('python')}={python!r} must be a path")
    return SlurmSettings(**{**values, "srun_args": _words(name("srun_args"), values["srun_args"])})


def _one_line(label: str, path: Any) -> str:
    """``path`` if it is a string without a newline: it goes on an ``#SBATCH`` line, which
    sbatch ends at a newline, quoted or not."""
    if not isinstance(path, str) or not path or "\n" in path:
        raise UsageError(f"{label}={path!r} must be a path on one line (#SBATCH lines end there)")
    return path


def _words(label: str, words: Any) -> tuple[str, ...]:
    """``words`` (``None``: none), if they are strings: the job script quotes them, whatever
    they hold."""
    if words is None:
        return ()
    if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) and w for w in words):
        raise UsageError(f"{label}={words!r} must be non-empty strings")
    return tuple(words)
