"""``deisa-run``: the whole in situ pipeline on one machine, in one command.

``deisa-run`` (or ``python -m deisa.cli``) starts, on loopback only:

1. a Dask scheduler (``dask scheduler --scheduler-file``), with a dashboard when bokeh is
   installed;
2. ``--workers`` Dask workers of ``--threads`` threads;
3. the heat simulation under ``mpirun``: the C solver through PDI and the deisa plugin when it
   is built and PDI loads (``--solver auto``), else the Python solver;
4. the analytics client, in this process: an :class:`~deisa.pca.IncrementalPCA` of every step
   (:func:`deisa.pipeline.analyze_stream`), with a progress bar on stderr.

At the end it prints a table of per-step times (compute, publish, analytics), bytes and
bandwidth, and leaves in ``--output`` the plot ``explained_variance.png``, ``results.json``,
the simulation's ``timings.json`` and the processes' logs. Every process it started is stopped
on success, failure, Ctrl-C or SIGTERM (SIGTERM to each process group, SIGKILL after
``stop_timeout``). Exit status: 0 on success, 1 when the simulation or the analytics failed
(the reason is printed), 2 for bad options, 128 + signal number when interrupted.

Sub-commands: ``deisa-run analytics`` runs only the client against an existing scheduler (what
a Slurm job runs next to the scheduler), ``deisa-run slurm`` prints a batch script
(:mod:`deisa.slurm`). Every default comes from ``deisa/templates/defaults.yml``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from .pipeline import (
    PipelineError,
    StepAnalytics,
    analyze_stream,
    format_table,
    plot_explained_variance,
    read_timings,
    step_table,
    write_results,
)

logger = logging.getLogger(__name__)

DEFAULTS_FILE = Path(__file__).with_name("templates") / "defaults.yml"
REPO = Path(__file__).resolve().parents[1]
THREAD_PINS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class UsageError(ValueError):
    """Options or configuration files that cannot work together; exit status 2."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the command; teardown follows."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# -- defaults -----------------------------------------------------------------------------------


def _read_yaml(path: Path, option: str) -> Any:
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
    user = _read_yaml(Path(path), f"--defaults {path}") or {}
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


def squarest_grid(ranks: int) -> tuple[int, int]:
    """Rows and columns of ranks, as square as possible, rows >= columns (as MPI_Dims_create)."""
    cols = max(c for c in range(1, int(ranks**0.5) + 1) if ranks % c == 0)
    return ranks // cols, cols


@dataclass
class RunSettings:
    """Everything a local run needs, resolved from options, config files and defaults."""

    ranks: int
    process_grid: tuple[int, int]
    workers: int
    threads: int
    simulation: dict[str, Any]
    solver: str
    pdi_config: Path
    build_dir: Path
    array: str
    placement: str
    buffer_nb: int | None
    n_components: int
    output: Path
    timeout: float
    stop_timeout: float
    mpirun: list[str]
    solver_reason: str = ""

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
            "simulation": self.simulation,
        }


def _positive(name: str, value: Any, *, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{name}={value!r} must be a positive integer")
    return value


def _pair(name: str, value: Any) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise UsageError(f"{name}={value!r} must be two positive integers")
    return (_positive(name, value[0]), _positive(name, value[1]))


def find_path(path: str | Path) -> Path:
    """``path``, absolute: a relative one from the current directory if it exists there, else
    from the repository (so ``configs/...`` and ``build`` work from anywhere)."""
    path = Path(path)
    if path.is_absolute() or path.exists() or not (REPO / path).exists():
        return path.resolve()
    return REPO / path


def resolve_settings(args: argparse.Namespace) -> RunSettings:
    """Options > simulation config file > defaults file, checked for consistency."""
    defaults = load_defaults(args.defaults)
    run, mpi = defaults["run"], defaults["mpi"]

    def pick(name: str) -> Any:
        value = getattr(args, name, None)
        return run[name] if value is None else value

    config_path = pick("config")
    simulation: dict[str, Any] = {}
    if config_path is not None:
        simulation = _read_yaml(find_path(config_path), f"--config {config_path}") or {}
        if not isinstance(simulation, dict):
            raise UsageError(f"--config {config_path}: expected a mapping of settings")
    for key, option in (("global_size", "size"), ("steps", "steps"), ("output_period",) * 2):
        value = getattr(args, option, None)
        if value is not None:
            simulation[key] = list(value) if isinstance(value, (list, tuple)) else value
        elif key not in simulation:
            simulation[key] = run[key]
    if args.process_grid is not None:
        grid = _pair("--process-grid", args.process_grid)
    elif args.ranks is None and "process_grid" in simulation:
        grid = _pair(f"process_grid of {config_path}", simulation["process_grid"])
    elif args.ranks is None and run["process_grid"] is not None:
        grid = _pair("process_grid", run["process_grid"])
    else:
        grid = squarest_grid(_positive("--ranks", pick("ranks")))
    ranks = _positive("--ranks", pick("ranks") if args.ranks is not None else grid[0] * grid[1])
    if grid[0] * grid[1] != ranks:
        raise UsageError(
            f"--process-grid {grid[0]} {grid[1]} has {grid[0] * grid[1]} ranks, --ranks is {ranks}"
        )
    simulation["process_grid"] = list(grid)
    buffer_nb = parse_buffer_nb(pick("buffer_nb"))
    solver = pick("solver")
    settings = RunSettings(
        ranks=ranks,
        process_grid=grid,
        workers=_positive("--workers", pick("workers")),
        threads=_positive("--threads", pick("threads")),
        simulation=simulation,
        solver=solver,
        pdi_config=find_path(pick("pdi_config")),
        build_dir=find_path(pick("build_dir")),
        array=pick("array"),
        placement=pick("placement"),
        buffer_nb=buffer_nb,
        n_components=_positive("--n-components", pick("n_components")),
        output=Path(pick("output")).resolve(),
        timeout=float(pick("timeout")),
        stop_timeout=float(run["stop_timeout"]),
        mpirun=[mpi["mpirun"], *mpi["args"]],
    )
    settings.solver, settings.solver_reason = resolve_solver(
        solver, settings.build_dir, settings.pdi_config
    )
    if settings.solver == "c":  # a wrong --array would only show as a stalled run
        deisa_pdi_config(settings.pdi_config, "", settings.placement, buffer_nb, settings.array)
    return settings


def parse_buffer_nb(value: int | str | None) -> int | None:
    """``--buffer-nb``: a positive integer, or ``None`` (unbounded) for none, null or 0.

    Raises
    ------
    UsageError
        Neither.
    """
    if isinstance(value, str):
        if value.lower() in ("none", "null", "0"):
            return None
        try:
            value = int(value)
        except ValueError:
            raise UsageError(f"--buffer-nb {value!r}: a positive integer or 'none'") from None
    if value == 0:
        return None
    return _positive("--buffer-nb", value, allow_none=True)


def resolve_solver(solver: str, build_dir: Path, pdi_config: Path) -> tuple[str, str]:
    """``("c" | "python", why)``: the solver that ``--solver auto | c | python`` runs.

    Raises
    ------
    UsageError
        ``solver`` is none of the three, or is ``c`` and the C solver cannot run here
        (:func:`c_solver_problem` says why).
    """
    if solver == "python":
        return "python", "--solver python"
    if solver not in ("auto", "c"):
        raise UsageError(f"--solver {solver!r}: one of auto, c, python")
    reason = c_solver_problem(build_dir, pdi_config)
    if reason is None:
        return "c", "C solver built and PDI loads"
    if solver == "c":
        raise UsageError(f"--solver c: {reason}")
    return "python", reason


def c_solver_problem(build_dir: Path, pdi_config: Path) -> str | None:
    """Why the C solver cannot run (``None`` if it can): binary, plugin, PDI YAML, libpdi."""
    heat = build_dir / "simulation" / "heat"
    plugin = build_dir / "plugin" / "libpdi_deisa_plugin.so"
    for path, what in ((heat, "C solver"), (plugin, "deisa PDI plugin")):
        if not path.exists():
            return (
                f"{what} not built ({path} missing; in the repository: cmake -S . -B build && "
                "cmake --build build, or point --build-dir at your build)"
            )
    if not pdi_config.exists():
        return f"PDI configuration {pdi_config} missing (--pdi-config)"
    try:
        ctypes.CDLL("libpdi.so.1")
    except OSError as exc:
        return f"PDI does not load: {exc}"
    ldd = shutil.which("ldd")
    if ldd is not None:
        for binary in (heat, plugin):
            out = subprocess.run([ldd, str(binary)], capture_output=True, text=True, timeout=30)
            missing = [line.split()[0] for line in out.stdout.splitlines() if "not found" in line]
            if missing:
                return f"{binary.name} misses libraries: {', '.join(missing)}"
    return None


# -- processes ----------------------------------------------------------------------------------


@dataclass
class _Child:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


@dataclass
class ProcessSet:
    """Processes started in their own process groups, logged to files, stopped together.

    Each child leads a new session, so a Ctrl-C in the terminal reaches only this command,
    which then stops them (:meth:`stop`): SIGTERM to the group, then SIGKILL to the group and
    to any descendant that left it, after ``stop_timeout`` seconds.
    """

    log_dir: Path
    env: dict[str, str]
    stop_timeout: float = 10.0
    children: list[_Child] = field(default_factory=list)

    def start(self, name: str, cmd: Sequence[str], env: dict[str, str] | None = None) -> _Child:
        log = self.log_dir / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                list(cmd),
                env=env or self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        child = _Child(name, popen, log)
        self.children.append(child)
        logger.info("started %s (pid %d): %s", name, popen.pid, " ".join(cmd))
        return child

    def failed(self, names: Sequence[str] | None = None) -> _Child | None:
        """The first of ``names`` (all by default) that exited, if any."""
        for child in self.children:
            if (names is None or child.name in names) and child.popen.poll() is not None:
                return child
        return None

    def stop(self) -> None:
        """Stop every child and its descendants; returns once they are gone.

        Two waves: every child but the first (simulation, workers), then the first (the
        scheduler), so that workers can still reach the scheduler while they close.
        """
        if self.children:
            self._stop(self.children[:0:-1])
            self._stop(self.children[:1])

    def _stop(self, children: Sequence[_Child]) -> None:
        import psutil

        tree: list[psutil.Process] = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                tree += psutil.Process(child.popen.pid).children(recursive=True)
        for child in children:
            if child.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for child in children:
            try:
                child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop on SIGTERM; killing it", child.name)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.popen.pid, signal.SIGKILL)
            if child.popen.poll() is None:
                child.popen.kill()
            child.popen.wait()
        _, alive = psutil.wait_procs(tree, timeout=max(0.5, deadline - time.monotonic()))
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=5)


def tail(path: Path, lines: int = 15) -> str:
    """The end of a log, indented, led by its last Python exception line if it has one."""
    try:
        text = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    errors = [line for line in text if _EXCEPTION_LINE.match(line)]
    head = [f"  {errors[-1].strip()}"] if errors else []
    return "\n".join(head + ["    " + line for line in text[-lines:]])


_EXCEPTION_LINE = re.compile(r"^\s*[\w.]*(Error|Exception|Interrupt)\b[^ ]*: ")


def child_env(**extra: str) -> dict[str, str]:
    """This environment, with BLAS pinned to one thread and mpirun allowed as root."""
    env = dict(os.environ)
    env.update(THREAD_PINS)
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env["DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING"] = "False"
    env.update(extra)
    return env


def dashboard_available() -> bool:
    """Whether ``dask scheduler`` can serve its dashboard (it needs bokeh)."""
    return importlib.util.find_spec("bokeh") is not None


def scheduler_command(scheduler_file: Path, dashboard: bool) -> list[str]:
    cmd = [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0"]
    cmd += ["--scheduler-file", str(scheduler_file)]
    if dashboard:
        cmd += ["--dashboard", "--dashboard-address", "127.0.0.1:0"]
    else:
        cmd += ["--no-dashboard"]
    return cmd


def worker_command(scheduler_file: Path, index: int, threads: int, local_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "dask", "worker",
        "--scheduler-file", str(scheduler_file),
        "--host", "127.0.0.1",
        "--nthreads", str(threads),
        "--no-nanny", "--no-dashboard",
        "--name", f"worker-{index}",
        "--local-directory", str(local_dir),
    ]  # fmt: skip


def deisa_pdi_config(
    pdi_config: Path, scheduler_file: str, placement: str, buffer_nb: int | None, array: str
) -> dict[str, Any]:
    """The C solver's PDI configuration ``pdi_config`` with its deisa block set for one run.

    Parameters
    ----------
    pdi_config
        PDI YAML with a ``plugins.deisa`` block (``configs/heat_deisa.yml``).
    scheduler_file, placement, buffer_nb
        Written into the block (``buffer_nb`` ``None``: the key is removed, unbounded).
    array
        The array the analytics read; it must be one of the block's ``datasets``.

    Returns
    -------
    dict
        The configuration, to dump to a YAML file for ``heat``.

    Raises
    ------
    UsageError
        The file is unreadable, has no ``plugins.deisa`` block, or does not publish ``array``.
    """
    pdi = _read_yaml(pdi_config, f"--pdi-config {pdi_config}")
    plugin = (pdi.get("plugins") or {}).get("deisa") if isinstance(pdi, dict) else None
    if not isinstance(plugin, dict):
        raise UsageError(f"--pdi-config {pdi_config}: no plugins.deisa block")
    datasets = plugin.get("datasets")
    if isinstance(datasets, dict) and array not in datasets:
        raise UsageError(
            f"--array {array}: the C solver publishes {', '.join(map(str, datasets))} "
            f"(plugins.deisa.datasets of {pdi_config})"
        )
    plugin["scheduler_file"] = scheduler_file
    plugin["placement"] = placement
    if buffer_nb is None:
        plugin.pop("buffer_nb", None)
    else:
        plugin["buffer_nb"] = buffer_nb
    return pdi


def simulation_command(
    settings: RunSettings, sim_config: Path, scheduler_file: Path, timings: Path
) -> tuple[list[str], dict[str, str]]:
    """mpirun command line and environment of the simulation, C or Python."""
    launcher = [*settings.mpirun, "-np", str(settings.ranks)]
    if settings.solver == "c":
        pdi = deisa_pdi_config(
            settings.pdi_config,
            str(scheduler_file),
            settings.placement,
            settings.buffer_nb,
            settings.array,
        )
        pdi_file = settings.output / "pdi.yml"
        pdi_file.write_text(yaml.safe_dump(pdi, sort_keys=False))
        plugin_path = os.pathsep.join(
            filter(None, [str(settings.build_dir / "plugin"), os.environ.get("PDI_PLUGIN_PATH")])
        )
        cmd = [*launcher, str(settings.build_dir / "simulation" / "heat"), str(sim_config)]
        return [*cmd, str(pdi_file)], child_env(PDI_PLUGIN_PATH=plugin_path)
    cmd = [*launcher, sys.executable, "-m", "deisa_simulation.heat", str(sim_config)]
    cmd += ["--scheduler-file", str(scheduler_file), "--array", settings.array]
    cmd += ["--placement", settings.placement, "--timings", str(timings)]
    if settings.buffer_nb is not None:
        cmd += ["--buffer-nb", str(settings.buffer_nb)]
    return cmd, child_env()


# -- the local run ------------------------------------------------------------------------------


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` (main thread only)."""

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    previous: dict[int, Any] = {}
    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        for signum in (signal.SIGINT.value, signal.SIGTERM.value):
            previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """Let teardown finish even if the user presses Ctrl-C again."""
    previous: dict[int, Any] = {}
    with contextlib.suppress(ValueError):
        for signum in (signal.SIGINT.value, signal.SIGTERM.value):
            previous[signum] = signal.signal(signum, signal.SIG_IGN)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _wait_until(
    ready: Callable[[], bool],
    what: str,
    procs: ProcessSet,
    timeout: float,
    interval: float = 0.1,
) -> None:
    """Poll ``ready`` every ``interval`` s until it is true.

    Raises
    ------
    PipelineError
        A process of ``procs`` exited first (with its log's tail), or ``timeout`` s passed;
        the message names ``what`` was awaited.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        dead = procs.failed()
        if dead is not None:
            raise PipelineError(
                f"{dead.name} exited ({dead.popen.returncode}) at start-up, while waiting for "
                f"{what}:\n{tail(dead.log)}"
            )
        if time.monotonic() > deadline:
            raise PipelineError(f"timed out after {timeout:.0f} s (--timeout) waiting for {what}")
        time.sleep(interval)


def _workers_connected(client: Any, n: int) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            client.wait_for_workers(n, timeout=1)  # the 1 s wait is the polling interval
        except TimeoutError:
            return False
        return True

    return ready


def report(
    analytics: Sequence[StepAnalytics],
    timings: Path | None,
    output: Path,
    settings: dict[str, Any],
    array: str,
    out: IO[str],
) -> None:
    """Print the per-step table and write results.json and explained_variance.png."""
    rows = step_table(analytics, read_timings(timings) if timings is not None else [])
    results = write_results(output / "results.json", analytics, rows, settings)
    plot = plot_explained_variance(analytics, output / "explained_variance.png", title=array)
    print(format_table(rows), file=out)
    print(f"PCA results: {results}\nExplained variance plot: {plot}", file=out)


def run_pipeline(settings: RunSettings, out: IO[str] = sys.stdout) -> None:
    """Start scheduler, workers and simulation, analyse every step, report, stop everything.

    Raises
    ------
    PipelineError
        The simulation, a Dask process or the analytics failed.
    """
    from distributed import Client
    from tqdm import tqdm

    output = settings.output
    logs = output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    scheduler_file = output / "scheduler.json"
    timings = output / "timings.json"
    for stale in (scheduler_file, timings, output / "results.json"):
        stale.unlink(missing_ok=True)
    sim_config = output / "simulation.yml"
    sim_config.write_text(yaml.safe_dump(settings.simulation, sort_keys=False))
    sim_cmd, sim_env = simulation_command(settings, sim_config, scheduler_file, timings)
    procs = ProcessSet(logs, child_env(), settings.stop_timeout)
    client = None
    print(
        f"deisa-run: {settings.ranks} ranks ({settings.solver} solver: {settings.solver_reason}),"
        f" {settings.workers} workers x {settings.threads} threads, field "
        f"{settings.simulation['global_size']}, {settings.simulation['steps']} steps; "
        f"output in {output}",
        file=sys.stderr,
    )
    try:
        with _signals_raise():
            dashboard = dashboard_available()
            procs.start("scheduler", scheduler_command(scheduler_file, dashboard))
            _wait_until(
                scheduler_file.exists,
                f"the scheduler file {scheduler_file}",
                procs,
                settings.timeout,
            )
            for i in range(settings.workers):
                procs.start(
                    f"worker-{i}",
                    worker_command(scheduler_file, i, settings.threads, output / "dask-scratch"),
                )
            client = Client(scheduler_file=str(scheduler_file), timeout=settings.timeout)
            _wait_until(
                _workers_connected(client, settings.workers),
                f"{settings.workers} worker(s) to connect",
                procs,
                settings.timeout,
                interval=0,
            )
            if dashboard:
                print(f"Dashboard: {client.dashboard_link}", file=sys.stderr)
            else:
                print(
                    "Dashboard: unavailable (bokeh is not installed; pip install bokeh)",
                    file=sys.stderr,
                )
            sim = procs.start("simulation", sim_cmd, sim_env)

            def check() -> None:
                dead = procs.failed()
                if dead is None:
                    return
                if dead is sim and sim.popen.returncode == 0:
                    return  # finished; the end of the stream is on its way
                raise PipelineError(
                    f"{dead.name} failed (exit status {dead.popen.returncode}), log "
                    f"{dead.log}:\n{tail(dead.log)}"
                )

            steps = settings.simulation["steps"]
            with tqdm(total=steps, desc="in situ PCA", unit="step", file=sys.stderr) as bar:
                analytics = analyze_stream(
                    client,
                    settings.array,
                    n_components=settings.n_components,
                    stall_timeout=settings.timeout,
                    check=check,
                    on_step=lambda _: bar.update(),
                )
            try:
                sim.popen.wait(timeout=settings.timeout)
            except subprocess.TimeoutExpired:
                raise PipelineError(
                    f"the simulation ended its stream but did not exit within {settings.timeout} s"
                ) from None
            check()
            if len(analytics) != steps:
                logger.warning("analysed %d steps of %d", len(analytics), steps)
            report(
                analytics,
                timings if settings.solver == "python" else None,
                output,
                settings.summary(),
                settings.array,
                out,
            )
    finally:
        with _signals_ignored():
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close(timeout=5)
            procs.stop()


# -- command line -------------------------------------------------------------------------------


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deisa-run",
        description="Run a heat simulation with in situ PCA on Dask, all on this machine. "
        "Sub-commands: `deisa-run slurm --help` (batch script), `deisa-run analytics --help` "
        "(the client alone). Defaults: deisa/templates/defaults.yml.",
    )
    add = parser.add_argument
    add("--ranks", "-n", type=int, help="MPI ranks of the simulation (default 4)")
    add("--process-grid", type=int, nargs=2, metavar=("ROWS", "COLS"), help="rank grid")
    add("--workers", "-w", type=int, help="Dask workers (default 2)")
    add("--threads", "-t", type=int, help="threads per worker (default 1)")
    add("--size", type=int, nargs=2, metavar=("ROWS", "COLS"), help="field size (256 256)")
    add("--steps", type=int, help="published steps (default 10)")
    add("--output-period", type=int, help="solver iterations per step (default 10)")
    add("--placement", choices=["round_robin", "locality"], help="block-to-worker placement")
    add("--buffer-nb", help="steps in flight at most, or 'none' (default 2)")
    add("--solver", choices=["auto", "c", "python"], help="simulation (default auto)")
    add("--config", help="simulation YAML (e.g. configs/simulation.yml); options override it")
    add("--pdi-config", help="PDI YAML of the C solver (default configs/heat_deisa.yml)")
    add("--build-dir", help="CMake build directory (default build)")
    add("--array", help="published array name (default gtemp)")
    add("--n-components", type=int, help="PCA components (default 4)")
    add("--output", "-o", help="output directory (default deisa-output)")
    add("--timeout", type=float, help="seconds without progress before failing (120)")
    add("--defaults", help="YAML file overriding deisa/templates/defaults.yml")
    add("--verbose", "-v", action="count", default=0, help="log more (-v info, -vv debug)")
    return parser


def _analytics_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deisa-run analytics",
        description="Only the analytics client: PCA of every step published to an existing "
        "scheduler, then the table, results.json and the plot. Run by the Slurm job.",
    )
    add = parser.add_argument
    add("--scheduler-file", required=True, help="JSON file of `dask scheduler --scheduler-file`")
    add("--workers", type=int, default=1, help="workers to wait for before starting (1)")
    add("--array", help="published array name (default: run.array of the defaults, gtemp)")
    add("--n-components", type=int, help="PCA components (default: run.n_components, 4)")
    add("--output", "-o", help="output directory (default: run.output, deisa-output)")
    add("--timings", help="simulation timings JSON to wait for and include in the table")
    add("--timeout", type=float, help="seconds without progress (default: slurm.timeout, 300)")
    add("--shutdown", action="store_true", help="shut the scheduler and workers down at the end")
    add("--defaults", help="YAML file overriding deisa/templates/defaults.yml")
    add("--verbose", "-v", action="count", default=0, help="log more")
    return parser


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def resolve_analytics_args(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options of ``deisa-run analytics`` left unset from the launch defaults.

    Raises
    ------
    UsageError
        ``--defaults`` is unreadable or invalid.
    """
    defaults = load_defaults(args.defaults)
    fallbacks = {
        "array": defaults["run"]["array"],
        "n_components": defaults["run"]["n_components"],
        "output": defaults["run"]["output"],
        # This sub-command runs in batch jobs: its patience is the Slurm section's.
        "timeout": defaults["slurm"]["timeout"],
    }
    for key, value in fallbacks.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def analytics_main(argv: Sequence[str]) -> int:
    """``deisa-run analytics``: the client alone, against a running scheduler."""
    from distributed import Client

    args = _analytics_parser().parse_args(argv)
    _setup_logging(args.verbose)
    try:
        resolve_analytics_args(args)
    except UsageError as exc:
        print(f"deisa-run analytics: error: {exc}", file=sys.stderr)
        return 2
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    from .scheduler_file import read_scheduler_address

    try:
        with _signals_raise():
            address = read_scheduler_address(args.scheduler_file, wait=args.timeout)
            with Client(address, timeout=args.timeout) as client:
                client.wait_for_workers(args.workers, timeout=args.timeout)
                print(f"deisa-run analytics: connected to {address}", file=sys.stderr)
                analytics = analyze_stream(
                    client, args.array, n_components=args.n_components, stall_timeout=args.timeout
                )
                timings = Path(args.timings) if args.timings else None
                deadline = time.monotonic() + 60
                while timings is not None and not timings.exists():
                    if time.monotonic() > deadline:
                        logger.warning("no simulation timings in %s", timings)
                        break
                    time.sleep(0.2)
                settings = {"array": args.array, "n_components": args.n_components}
                report(analytics, timings, output, settings, args.array, sys.stdout)
                if args.shutdown:
                    client.shutdown()
    except Interrupted as exc:
        print(f"deisa-run analytics: interrupted by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except Exception as exc:
        print(f"deisa-run analytics: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def run_main(argv: Sequence[str]) -> int:
    """``deisa-run [run]``: the whole pipeline on this machine."""
    args = _run_parser().parse_args(argv)
    _setup_logging(args.verbose)
    os.environ.update(THREAD_PINS)
    try:
        settings = resolve_settings(args)
        run_pipeline(settings)
    except UsageError as exc:
        print(f"deisa-run: error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(f"deisa-run: interrupted by {exc}; every process stopped", file=sys.stderr)
        return 128 + exc.signum
    except PipelineError as exc:
        print(f"deisa-run: failed: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        logger.debug("deisa-run failed", exc_info=True)
        print(f"deisa-run: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``deisa-run`` and ``python -m deisa.cli``.

    Parameters
    ----------
    argv
        Arguments without the program name; ``sys.argv[1:]`` by default. A first word
        ``slurm`` or ``analytics`` selects a sub-command, ``run`` (optional) the local run.

    Returns
    -------
    int
        Exit status.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    if command == "slurm":
        from .slurm import main as slurm_main

        return slurm_main(argv[1:])
    if command == "analytics":
        return analytics_main(argv[1:])
    if command == "run":
        argv = argv[1:]
    return run_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
