"""The settings of a run: what :mod:`deisa.launcher.parse` makes of the command line, the
defaults and the config file, checked, frozen.

:class:`RunSettings` is everything ``deisa-run`` and ``deisa-run slurm`` need (``slurm``: the
allocation, :class:`SlurmSettings`, for ``deisa-run slurm`` only), :class:`AnalyticsSettings`
what ``deisa-run analytics`` needs. Nothing here parses nor checks: the one pass that does is
:func:`deisa.launcher.parse.run_settings` (and :func:`~deisa.launcher.parse.analytics_settings`);
the plan (:mod:`deisa.launcher.plan`) reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bridge.options import BridgeOptions

REPO = Path(__file__).resolve().parents[2]

# The Bridge options that deisa-run sets; the others keep the Python solver's defaults, or the
# values of the C solver's PDI YAML.
LAUNCHER_BRIDGE_OPTIONS = ("placement", "buffer_nb", "mode", "max_in_flight")


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

    :mod:`deisa.launcher.parse` checks those written into the job script as they are against
    :data:`~deisa.launcher.checks.SLURM_GRAMMARS`, and the paths of ``#SBATCH`` lines for
    newlines; :func:`deisa.launcher.slurm.job_script` checks the layout and quotes every value
    it writes.
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


@dataclass(frozen=True)
class RunSettings:
    """Everything a run needs, resolved from options, config files and defaults, checked.

    ``slurm`` is set for ``deisa-run slurm`` only. ``solver`` is the one that runs (``c``,
    ``python``, or ``user`` for a command after ``--``), ``solver_reason`` why.
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
    verbose: int = 0
    """``-v``: 1 logs at info, 2 at debug level."""
    memory_limit: int | str | None = "auto"
    """Each worker's ``--memory-limit``: bytes (``auto`` resolved for this node by
    :func:`~deisa.launcher.dask_processes.memory_limit`), ``"auto"`` (``deisa-run slurm``:
    dask's own on the worker's node) or ``None`` (no limit)."""

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
            "memory_limit": self.memory_limit,
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


@dataclass(frozen=True)
class AnalyticsSettings:
    """What ``deisa-run analytics`` needs (the client alone, or a replay), checked.

    ``scheduler_file``: the live stream's scheduler (``None``: ``--replay`` on a cluster of
    ``workers`` workers started here); ``workers``: how many to wait for.
    """

    array: str
    n_components: int
    output: Path
    timeout: float
    buffer_nb: int | None
    stop_when_converged: float | None
    step_timeout: float | None
    dashboard: bool
    scheduler_file: str | None = None
    replay: str | None = None
    workers: int = 1
    timings: str | None = None
    shutdown: bool = False
    verbose: int = 0
