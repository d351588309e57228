"""The settings of a run: options > simulation config file > defaults, all checked, in one pass.

:func:`resolve_options` turns the parsed options into :class:`RunSettings` before anything
starts: every option's value, given or from the defaults in force, is checked by its
declaration (:func:`deisa.launcher.options.resolve_values`), then the values that go together
are, the simulation's with the Python solver's own :class:`~deisa_simulation.heat.HeatConfig`
and the Bridge's with :class:`~deisa.bridge.options.BridgeOptions`: a mistake is one
:class:`~deisa.launcher.defaults.UsageError` naming the option or where its key came from.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bridge.options import BridgeOptionError, BridgeOptions
from .checks import (  # noqa: F401 - where the launcher's modules and tests find them
    ARRAY,
    PCA_WARM_UP,
    SECONDS,
    SLURM_GRAMMARS,
    Grammar,
    checked,
    one_line,
    pair,
    parse_buffer_nb,
    parse_eps,
    parse_preload,
    parse_step_timeout,
    positive,
)
from .defaults import PACKAGED, Defaults, UsageError, load_defaults, read_yaml
from .options import RUN, SLURM, Values, option, resolve_values
from .ucx import check_protocol

REPO = Path(__file__).resolve().parents[2]

# The Bridge options that deisa-run sets; the others keep the Python solver's defaults, or the
# values of the C solver's PDI YAML.
LAUNCHER_BRIDGE_OPTIONS = ("placement", "buffer_nb", "mode", "max_in_flight")

_SLURM_KEYS = (
    *("nodes", "worker_nodes", "scheduler_node", "time", "partition", "account", "job_name"),
    *("workdir", "python", "mpi", "interface", "srun_args"),
)


def find_path(path: str | Path) -> Path:
    """``path``, absolute: a relative one from the current directory if it exists there, else
    from the repository (so ``configs/...`` and ``build`` work from anywhere)."""
    path = Path(path)
    if path.is_absolute() or path.exists() or not (REPO / path).exists():
        return path.resolve()
    return REPO / path


def squarest_grid(ranks: int) -> tuple[int, int]:
    """Rows and columns of ranks, as square as possible, rows >= columns: the solvers' own
    grid (:func:`deisa_simulation.grid.process_grid`, ``MPI.Compute_dims`` in a rank)."""
    from deisa_simulation.grid import process_grid

    return process_grid(ranks)


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
    dashboard: bool = False
    """Serve Dask's dashboard (on loopback, readable by every account of the node); ``False``:
    only a health check answers on the HTTP servers
    (:func:`~deisa.launcher.dask_processes.http_env`)."""
    step_timeout: float | None = None
    """Seconds without a step before the run fails, however alive the simulation is
    (:mod:`deisa.pca_app.stall`); ``None``: as long as it runs."""

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


DEMO_ONLY = ("process_grid", "global_size", "steps", "output_period", "solver", "config",
             "pdi_config")  # fmt: skip
"""Options of the heat demo's simulation: refused beside a user's simulation command."""


def resolve_options(args: argparse.Namespace, command: str = RUN) -> RunSettings:
    """Options > simulation config file > defaults, all checked, nothing started.

    The solver is left as asked (``auto``, ``c`` or ``python``):
    :func:`deisa.launcher.solver.resolve_settings` picks it and checks that it can run.

    Parameters
    ----------
    args
        Parsed by :func:`deisa.launcher.cli.parse_args` for ``command`` (which holds the
        defaults it loaded in ``defaults_in_force``; else they are loaded from
        ``args.defaults``).
    command
        ``"run"`` or ``"slurm"``: which defaults section ``--timeout`` falls back to, and
        whether ``mpirun`` must be here.

    Raises
    ------
    UsageError
        One line naming the option or the file at fault.
    """
    defaults = defaults_of(args)
    values = resolve_values(args, defaults, command)
    simulation, grid = _simulation(values, defaults)
    mpi = defaults["mpi"]
    settings = RunSettings(
        ranks=grid[0] * grid[1],
        process_grid=grid,
        workers=values["workers"],
        threads=values["threads"],
        simulation=simulation,
        solver=values["solver"],
        pdi_config=find_path(values["pdi_config"]),
        build_dir=_build_dir(values),
        array=values["array"],
        bridge=_bridge(values),
        n_components=values["n_components"],
        output=values["output"],
        timeout=values["timeout"],
        stop_timeout=checked(
            SECONDS, defaults.origin("run", "stop_timeout"), defaults["run"]["stop_timeout"]
        ),
        mpirun=[str(mpi["mpirun"]), *map(str, mpi["args"] or [])],
        mpi_env={str(k): str(v) for k, v in (mpi.get("env") or {}).items()},
        stop_when_converged=values["stop_when_converged"],
        tls=values["tls"],
        dashboard=values["dashboard"],
        step_timeout=values["step_timeout"],
        command=list(getattr(args, "command", None) or []),
        analytics=values["analytics"],
    )
    _check_user_code(settings, values)
    settings.worker_preload = parse_preload(
        values["worker_preload"], values.name("worker_preload"), builtin=settings.analytics is None
    )
    if command == SLURM:
        settings.slurm = SlurmSettings(**{key: values[key] for key in _SLURM_KEYS})
        one_line(values.name("output"), str(settings.output))
    # after --python: a job on another interpreter checks distributed-ucxx where it runs
    settings.protocol = check_protocol(
        values["protocol"],
        settings.tls,
        values.name("protocol"),
        local=settings.slurm is None or settings.slurm.python is None,
    )
    if command == RUN and shutil.which(settings.mpirun[0]) is None:
        raise UsageError(f"{defaults.origin('mpi', 'mpirun')}: {settings.mpirun[0]!r} not found")
    return settings


def defaults_of(args: argparse.Namespace) -> Defaults:
    """The defaults that :func:`deisa.launcher.cli.parse_args` loaded for ``args`` (its help
    showed them), else those of ``args.defaults``."""
    loaded = getattr(args, "defaults_in_force", None)
    return loaded if loaded is not None else load_defaults(getattr(args, "defaults", None))


def _simulation(values: Values, defaults: Defaults) -> tuple[dict[str, Any], tuple[int, int]]:
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
        grid = pair(f"process_grid of {config}", simulation["process_grid"])
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
    code's build/ must not hide it); a --build-dir they type is relative to where they are."""
    if "build_dir" in values.given:
        return Path(values["build_dir"]).resolve()
    return find_path(REPO / values["build_dir"])


def _bridge(values: Values) -> BridgeOptions:
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


def _check_user_code(settings: RunSettings, values: Values) -> None:
    """Beside a user's simulation command, the heat demo's options are refused."""
    if not settings.command:
        return
    demo = [option(key).flag for key in DEMO_ONLY if key in values.given]
    if demo:
        raise UsageError(
            f"{', '.join(demo)} set the heat demo's simulation, not a command given after "
            "--: pass your program its own settings"
        )


BRIDGE_WORKER = "deisa.bridge.worker"
"""The module every ``dask worker`` that deisa starts preloads (:mod:`deisa.bridge.worker`):
deisa's worker plugin runs on it from the start, so that the ranks of its node send their
blocks through shared memory from the first step and a rank 0 on its node calls the scheduler
through its relay, without importing distributed. Without it, rank 0 goes through distributed
and registers the plugin itself."""


def worker_preloads(module: str | None = None, *, bridge: bool = True) -> list[str]:
    """The modules a ``dask worker`` preloads, in order: those of the dask configuration
    (``distributed.worker.preload``, e.g. from ``DASK_DISTRIBUTED__WORKER__PRELOAD``), which a
    ``--preload`` option would otherwise replace, :data:`BRIDGE_WORKER` (unless ``bridge`` is
    false), then ``module`` (the settings' ``worker_preload``), each once.

    Examples
    --------
    >>> worker_preloads("deisa.analysis._warm")  # doctest: +SKIP
    ['deisa.bridge.worker', 'deisa.analysis._warm']
    """
    import dask.config

    configured = dask.config.get("distributed.worker.preload", default=None) or []
    if isinstance(configured, str):
        configured = [configured]
    ours = [*([BRIDGE_WORKER] if bridge else []), *([module] if module is not None else [])]
    return list(dict.fromkeys([*map(str, configured), *ours]))


def preload_args(module: str | None = None, *, bridge: bool = True) -> list[str]:
    """``dask worker`` options that preload :func:`worker_preloads`; ``[]`` when deisa
    preloads nothing (``module`` is ``None`` and ``bridge`` false: the configuration's
    preloads apply by themselves)."""
    if module is None and not bridge:
        return []
    return [arg for m in worker_preloads(module, bridge=bridge) for arg in ("--preload", m)]
