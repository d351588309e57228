"""Dask's scheduler and workers as processes: their command lines, their start and their stop.

The one place that builds the ``python -m dask scheduler`` and ``python -m dask worker``
command lines (:func:`scheduler_command`, :func:`worker_command`) and starts and stops those
processes (:class:`DaskProcesses`), for the launcher (:mod:`deisa.launcher.local`), the tests
(``tests/conftest.py``) and the benchmarks (``bench/``).

What every one of them gets (``docs/security.md``): ``python -P`` (no directory of the caller
on ``sys.path``: :func:`~deisa.launcher.processes.python_argv`); the servers listen on loopback
(:data:`LOOPBACK`) on free ports, their HTTP servers (dashboard, health, metrics) on
``127.0.0.1:0`` (``deisa-run`` keeps only ``/health`` there without ``--dashboard``:
:func:`http_env`); with a job's credentials, TLS only (``--protocol tls`` and the ``--tls-*``
files, never the key itself); BLAS and OpenMP pinned to one thread, no work stealing
(:func:`~deisa.launcher.processes.child_env`); each process in its own session, logged to a
private file (0600, no symbolic link followed) of :attr:`DaskProcesses.log_dir`, inheriting
the caller's umask (``deisa-run``: 077); the workers preload deisa's worker services
(``--preload deisa.worker``: shared memory from the first step, and a rank 0 that
calls the scheduler without distributed), unless a benchmark opts out. ``deisa-run`` also
shortens distributed's histories in them (:func:`history_env`), so that a long run's memory is
level after its first steps.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .processes import ProcessSet, child_env, python_argv, terminate, wait_until

if TYPE_CHECKING:
    import subprocess

LOOPBACK = "127.0.0.1"

_Processes = TypeVar("_Processes", bound="DaskProcesses")


def dashboard_available() -> bool:
    """Whether ``dask scheduler`` can serve its dashboard (it needs bokeh)."""
    return importlib.util.find_spec("bokeh") is not None


HEALTH_ROUTES = ["distributed.http.health"]
"""The HTTP routes of a scheduler and a worker without the dashboard: ``/health`` alone."""


def http_config(dashboard: bool) -> dict[str, list[str]]:
    """The dask configuration of the HTTP servers of the Dask processes: nothing with the
    dashboard; without it, ``/health`` alone (distributed serves its ``/info`` pages, logs and
    call stacks, and its metrics even with ``--no-dashboard``, to whoever reaches the port:
    every account of the node, on loopback; it cannot make them ask for the run's TLS
    certificate)."""
    if dashboard:
        return {}
    return {
        "distributed.scheduler.http.routes": HEALTH_ROUTES,
        "distributed.worker.http.routes": HEALTH_ROUTES,
    }


def http_env(dashboard: bool) -> dict[str, str]:
    """:func:`http_config` as the environment of processes to start
    (``DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES``...)."""
    return config_env(http_config(dashboard))


def config_env(config: Mapping[str, Any]) -> dict[str, str]:
    """Dask configuration as the environment of processes to start: ``{"distributed.a.b-c":
    1}`` -> ``{"DASK_DISTRIBUTED__A__B_C": "1"}``."""
    return {
        "DASK_" + key.upper().replace(".", "__").replace("-", "_"): json.dumps(value)
        for key, value in config.items()
    }


HISTORY_LENGTH = 100
"""The entries each of distributed's count-bounded histories keeps in deisa's Dask processes
(``distributed.admin.low-level-log-length``, 1,000 by default): the scheduler's transition log
(``Scheduler.story``), its events per topic (``Client.get_events``: a step's computation adds
one to two topics), each batched stream's last messages (a step adds several). Full within
the first steps, so that a run's memory is level from then on, and a tenth of what
distributed's default holds (docs/reliability.md, "Long runs")."""

MONITOR_SAMPLES = 120
"""The samples of the system monitor (CPU, memory, network, one every 0.5 s) a Dask process
keeps without the dashboard, which alone draws their history: a minute, not distributed's
hour (``distributed.admin.system-monitor.log-length``, 7,200), which fills with wall time."""


def history_config(dashboard: bool) -> dict[str, int]:
    """The lengths of distributed's histories in deisa's Dask processes (:data:`HISTORY_LENGTH`,
    and :data:`MONITOR_SAMPLES` without the dashboard); a user's own setting of either in the
    environment wins (``deisa-run``)."""
    config = {"distributed.admin.low-level-log-length": HISTORY_LENGTH}
    if not dashboard:
        config["distributed.admin.system-monitor.log-length"] = MONITOR_SAMPLES
    return config


def history_env(dashboard: bool) -> dict[str, str]:
    """:func:`history_config` as the environment of processes to start."""
    return config_env(history_config(dashboard))


class TLSOptions(Protocol):
    """Credentials that ``dask scheduler`` and ``dask worker`` take on their command line
    (:class:`deisa.launcher.security.Credentials`, the benchmarks' ``TLSFiles``)."""

    def cli_args(self) -> list[str]:
        """``--protocol tls`` and the ``--tls-*`` options naming the files."""
        ...


def scheduler_command(
    scheduler_file: Path | str,
    dashboard: bool = False,
    credentials: TLSOptions | None = None,
    *,
    python: str = sys.executable,
    listen: Sequence[str] = ("--host", LOOPBACK),
    comm: Sequence[str] = (),
) -> list[str]:
    """``dask scheduler`` on free ports, writing ``scheduler_file``: the one command line of
    the local run, the tests, the benchmarks and the Slurm job (:mod:`deisa.launcher.plan`).

    Parameters
    ----------
    scheduler_file
        Where the scheduler writes its address (``--scheduler-file``).
    dashboard
        Serve the dashboard's pages (they need bokeh); its HTTP server (health, metrics) runs
        either way, on ``127.0.0.1:0``.
    credentials
        The job's TLS files; ``None``: plain TCP, or ``comm``.
    python
        The interpreter (``"$PYTHON"`` in a job), run with ``-P``.
    listen
        Where it listens: loopback by default (a job on several nodes: ``--interface``).
    comm
        Options of its protocol when ``credentials`` is ``None`` (``--protocol tls`` with the
        files in the environment, ``--protocol ucx``).
    """
    cmd = [*python_argv(python), "-m", "dask", "scheduler"]
    cmd += ["--scheduler-file", str(scheduler_file), "--port", "0", *listen]
    # --no-dashboard drops the pages, not the HTTP server (health, metrics): local too, any port
    cmd += ["--dashboard" if dashboard else "--no-dashboard", "--dashboard-address"]
    return [*cmd, f"{LOOPBACK}:0", *_comm(credentials, comm)]


def _comm(credentials: TLSOptions | None, comm: Sequence[str]) -> list[str]:
    return credentials.cli_args() if credentials is not None else list(comm)


SIMULATION_STEPS = 2
"""The steps' worth of memory ``--memory-limit auto`` leaves to the simulation's ranks on a
node (its field, and the copy each publish sends)."""

MIN_MEMORY_LIMIT = 256 * 2**20
"""The least ``--memory-limit auto`` gives a worker (distributed and its imports)."""


def memory_limit(workers: int, step_bytes: int, total: int | None = None) -> int:
    """``--memory-limit auto``: this node's memory (``total``, by default psutil's), less
    :data:`SIMULATION_STEPS` steps of ``step_bytes`` for the simulation, shared by ``workers``
    workers; at least :data:`MIN_MEMORY_LIMIT`.

    >>> memory_limit(2, 64 * 2**20, total=8 * 2**30) // 2**20
    4032
    """
    if total is None:
        import psutil

        total = int(psutil.virtual_memory().total)
    return max(MIN_MEMORY_LIMIT, (total - SIMULATION_STEPS * step_bytes) // workers)


def worker_command(
    scheduler_file: Path | str,
    index: int | None,
    threads: int = 1,
    local_dir: Path | None = None,
    preload: str | None = None,
    credentials: TLSOptions | None = None,
    extra: Sequence[str] = (),
    *,
    memory: int | str | None = "auto",
    bridge_preload: bool = True,
    python: str = sys.executable,
    listen: Sequence[str] = ("--host", LOOPBACK),
    comm: Sequence[str] = (),
) -> list[str]:
    """``dask worker`` number ``index`` (named ``worker-<index>``; ``None``: unnamed, each
    task of a job's step) without nanny (a killed worker stays dead) nor dashboard, preloading
    deisa's worker services (:data:`BRIDGE_WORKER`).

    Parameters
    ----------
    scheduler_file
        The scheduler's file.
    index
        Its number, in its name.
    threads
        ``--nthreads``.
    local_dir
        Its spill directory (``--local-directory``); ``None``: Dask's default.
    preload
        A module for ``--preload`` (the settings' ``worker_preload``, e.g. the PCA's warm-up
        :mod:`deisa.analysis.warm`), beside those of the dask configuration
        (:func:`preload_args`).
    credentials
        The job's TLS files; ``None``: plain TCP, or ``comm``.
    extra
        More options, last.
    memory
        ``--memory-limit``: bytes, ``"auto"`` (dask's: the node's memory shared by threads) or
        ``None`` (no limit).
    bridge_preload
        Preload :data:`BRIDGE_WORKER`; ``False``: rank 0 calls the
        scheduler through distributed (a benchmark's comparison).
    python, listen, comm
        As :func:`scheduler_command`'s.
    """
    return [
        *python_argv(python), "-m", "dask", "worker",
        "--scheduler-file", str(scheduler_file),
        "--nthreads", str(threads),
        "--memory-limit", "0" if memory is None else str(memory),
        "--no-nanny", "--no-dashboard", "--dashboard-address", f"{LOOPBACK}:0",
        *preload_args(preload, bridge=bridge_preload),
        *listen,
        *_comm(credentials, comm),
        *(["--name", f"worker-{index}"] if index is not None else []),
        *(["--local-directory", str(local_dir)] if local_dir is not None else []),
        *extra,
    ]  # fmt: skip


BRIDGE_WORKER = "deisa.worker"
"""The module every ``dask worker`` that deisa starts preloads (:mod:`deisa.worker`; its older
name ``deisa.bridge.worker`` stays for users' own command lines):
deisa's worker services run on it from the start, so that the ranks of its node send their
blocks through shared memory from the first step and a rank 0 on its node calls the scheduler
through its relay, without importing distributed. Without it, rank 0 goes through distributed
and registers the services itself."""


def worker_preloads(module: str | None = None, *, bridge: bool = True) -> list[str]:
    """The modules a ``dask worker`` preloads, in order: those of the dask configuration
    (``distributed.worker.preload``, e.g. from ``DASK_DISTRIBUTED__WORKER__PRELOAD``), which a
    ``--preload`` option would otherwise replace, :data:`BRIDGE_WORKER` (unless ``bridge`` is
    false), then ``module`` (the settings' ``worker_preload``), each once.

    Examples
    --------
    >>> worker_preloads("deisa.analysis.warm")  # doctest: +SKIP
    ['deisa.worker', 'deisa.analysis.warm']
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


def workers_connected(client: Any, n: int) -> Callable[[], bool]:
    """A condition for :func:`~deisa.launcher.processes.wait_until`: ``n`` workers are there
    (it waits 1 s per call: use ``interval=0``)."""

    def ready() -> bool:
        try:
            client.wait_for_workers(n, timeout=1)
        except TimeoutError:
            return False
        return True

    return ready


@dataclass
class DaskProcesses:
    """A ``dask scheduler`` and its ``dask worker`` processes, started from the command line.

    Attributes
    ----------
    scheduler_file
        The scheduler's file.
    procs
        The processes, the scheduler first, then the workers in their order (a test may kill
        one, or append one of its own for :meth:`stop` to stop).
    log_dir
        Where each process logs, to ``<name>.log`` (``scheduler``, ``worker-<i>``); with
        ``processes``: its directory.
    env
        Set over :func:`~deisa.launcher.processes.child_env` for every process.
    credentials
        The job's TLS files (``None``: plain TCP), for the command lines and :meth:`client`.
    processes
        Starts the processes: the launcher's :class:`~deisa.launcher.processes.ProcessSet`,
        which also stops them with the run's other processes; by default one of this object's
        own (in ``log_dir``).
    bridge_preload
        The workers preload deisa's worker services, as ``deisa-run``'s do
        (:func:`worker_command`); ``False``: they do not.
    """

    scheduler_file: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    log_dir: Path | None = None
    env: Mapping[str, str] | None = None
    credentials: TLSOptions | None = None
    processes: ProcessSet | None = None
    bridge_preload: bool = True

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        if self.processes is None:
            log_dir = self.log_dir or self.scheduler_file.parent
            self.processes = ProcessSet(log_dir, child_env(self.env))
        popen = self.processes.start(name, cmd).popen
        self.procs.append(popen)
        return popen

    def start_scheduler(
        self,
        timeout: float,
        *,
        dashboard: bool = False,
        check: Callable[[], None] | None = None,
        interval: float = 0.1,
        command: list[str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start the scheduler (``command``, by default :func:`scheduler_command`'s); return
        once its file is written (looked for every ``interval`` s).

        Raises
        ------
        PipelineError
            It exited first (with its log's tail), or ``timeout`` s passed.
        """
        if command is None:
            command = scheduler_command(self.scheduler_file, dashboard, self.credentials)
        popen = self._start("scheduler", command)
        wait_until(
            self.scheduler_file.exists,
            f"the scheduler file {self.scheduler_file}",
            timeout,
            procs=self.processes,
            interval=interval,
            check=check,
        )
        return popen

    def start_workers(
        self,
        n: int,
        threads: int = 1,
        *,
        local_dir: Path | None = None,
        preload: str | None = None,
        extra: Sequence[str] = (),
        command: list[str] | None = None,
    ) -> list[subprocess.Popen[bytes]]:
        """Start ``n`` more workers (``command`` with ``--name worker-<i>``, by default
        :func:`worker_command`'s), numbered after those started."""
        first = max(0, len(self.procs) - 1)
        if command is not None:
            return [
                self._start(f"worker-{i}", [*command, "--name", f"worker-{i}"])
                for i in range(first, first + n)
            ]
        return [
            self._start(
                f"worker-{i}",
                worker_command(
                    self.scheduler_file,
                    i,
                    threads,
                    local_dir,
                    preload,
                    self.credentials,
                    extra,
                    bridge_preload=self.bridge_preload,
                ),
            )
            for i in range(first, first + n)
        ]

    def client(self, **kwargs: Any) -> Any:
        """A :class:`distributed.Client` of the scheduler, with :attr:`credentials`."""
        from distributed import Client

        if self.credentials is not None and hasattr(self.credentials, "security"):
            kwargs.setdefault("security", self.credentials.security())
        return Client(scheduler_file=str(self.scheduler_file), **kwargs)

    def wait_for_workers(
        self, client: Any, n: int, timeout: float, *, check: Callable[[], None] | None = None
    ) -> None:
        """Return once ``n`` workers are connected to ``client``'s scheduler.

        Raises
        ------
        PipelineError
            One of the processes exited first, or ``timeout`` s passed.
        """
        wait_until(
            workers_connected(client, n),
            f"{n} worker(s) to connect",
            timeout,
            procs=self.processes,
            interval=0,
            check=check,
        )

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the workers, then the scheduler (a worker that loses its scheduler while
        closing can hang): SIGTERM, SIGKILL after ``timeout`` s."""
        terminate(self.procs[1:], timeout)
        terminate(self.procs[:1], timeout)

    @classmethod
    def started(
        cls: type[_Processes],
        directory: Path,
        workers: int,
        timeout: float,
        *,
        threads: int = 1,
        env: Mapping[str, str] | None = None,
        credentials: TLSOptions | None = None,
        worker_args: Sequence[str] = (),
        bridge_preload: bool = True,
    ) -> _Processes:
        """A scheduler and ``workers`` workers, their files and logs in ``directory``, once
        every worker is connected (stopped if they are not within ``timeout`` s)."""
        cluster = cls(directory / "scheduler.json", log_dir=directory, env=env,
                      credentials=credentials, bridge_preload=bridge_preload)  # fmt: skip
        try:
            cluster.start_scheduler(timeout)
            cluster.start_workers(workers, threads, extra=worker_args)
            with cluster.client(timeout=timeout) as client:
                cluster.wait_for_workers(client, workers, timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster
