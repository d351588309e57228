"""Shared fixtures: real Dask scheduler/worker processes and mpirun, as users run them."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil
import pytest
from distributed.utils_test import poll_for

from deisa.launcher.dask_processes import DaskProcesses as _DaskProcesses

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build"  # CMake build of the C solver and the PDI plugin
# Seconds any start-up may take (imports, connects, TLS handshakes, mpirun) with both cores
# loaded by something else, with a wide margin. Waits on a condition end as soon as it holds:
# this bounds only how long a hang takes to be reported.
STARTUP = 120

# Two cores here: one BLAS thread per process, or SVDs slow down by 10x+.
THREAD_PINS = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
}
os.environ.update(THREAD_PINS)


def test_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(THREAD_PINS)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


test_env.__test__ = False  # type: ignore[attr-defined]


def modules_loaded(code: str) -> list[str]:
    """The modules loaded once ``code`` ran in a fresh interpreter, which must succeed."""
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", probe], env=test_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.splitlines()[-1])
    return loaded


def deisa_run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m deisa.launcher ARGS`` (``deisa-run``) to its end, its output captured."""
    uses_mpi()  # deisa-run starts the simulation under mpirun (or prints a job that srun's)
    return subprocess.run(
        [sys.executable, "-m", "deisa.launcher", *args],
        env=test_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_deisa_run(*args: str) -> subprocess.Popen[str]:
    """:func:`deisa_run` started, not waited for: a run that is idle most of its time (a slow
    simulation's sleep), started by a module's fixture while the module's other tests run; the
    test that reads it calls :func:`uses_mpi`."""
    return subprocess.Popen(
        [sys.executable, "-m", "deisa.launcher", *args],
        env=test_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class DaskProcesses(_DaskProcesses):
    """A `dask scheduler` and `dask worker` processes started from the command line, as
    ``deisa-run`` starts them (:mod:`deisa.launcher.dask_processes`); its clients wait up to
    :data:`STARTUP`."""

    def client(self, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", STARTUP)
        return super().client(**kwargs)


def start_dask(
    tmp: Path,
    n_workers: int = 2,
    nthreads: int = 1,
    extra_worker_args: list[str] | None = None,
    bridge_preload: bool = True,
) -> DaskProcesses:
    """Start a scheduler and ``n_workers`` workers on loopback, their files and logs in
    ``tmp``; wait until they are connected. ``bridge_preload=False``: the workers start
    without deisa's worker services (rank 0 registers them when it connects)."""
    cluster = DaskProcesses.started(
        tmp, n_workers, STARTUP, threads=nthreads, env=test_env(),
        worker_args=extra_worker_args or (), bridge_preload=bridge_preload,
    )  # fmt: skip
    return cluster


@pytest.fixture
def dask_processes(tmp_path: Path) -> Iterator[DaskProcesses]:
    """A fresh scheduler and two one-thread workers, as separate processes."""
    cluster = start_dask(tmp_path)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def module_dask(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    """A scheduler and two one-thread workers shared by the tests of one module (a start and a
    stop, 5-10 s on two loaded cores, once rather than per test). For tests whose runs end and
    are read to their end: the next run of an array name replaces a finished one
    (deisa/scheduler/_streams.py), a test sets no steering value that a later run reads (or
    clears it), and compares the scheduler's counters with their values before its run. Not
    for tests that kill a process or count what the workers hold."""
    cluster = start_dask(tmp_path_factory.mktemp("dask"))
    yield cluster
    cluster.stop()


@pytest.fixture
def shared_dask(module_dask: DaskProcesses, tmp_path: Path) -> DaskProcesses:
    """:func:`module_dask`, its scheduler file copied to the test's ``scheduler.json`` (where a
    YAML's relative ``scheduler_file: scheduler.json`` finds it, as with :func:`dask_processes`)."""
    shutil.copy2(module_dask.scheduler_file, tmp_path / "scheduler.json")
    return module_dask


def mpirun(nranks: int, *args: str) -> list[str]:
    """The mpirun command line for ``nranks`` ranks (oversubscribed, root allowed)."""
    uses_mpi()
    return ["mpirun", "--oversubscribe", "-np", str(nranks), *args]


def run_heat(
    nranks: int, config: Path, *extra: str, timeout: float = 180, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the Python heat solver under mpirun."""
    cmd = mpirun(nranks, sys.executable, "-m", "deisa_simulation.heat", str(config), *extra)
    proc = subprocess.run(cmd, env=test_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def start_heat(nranks: int, config: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = mpirun(nranks, sys.executable, "-m", "deisa_simulation.heat", str(config), *extra)
    return subprocess.Popen(
        cmd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def kill_if_running(proc: subprocess.Popen[Any]) -> None:
    """Kill ``proc`` if it still runs, and reap it: what a test's ``finally`` does with the
    process it started, so that a failed test leaves nothing running."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def left_behind(marker: Path, grace: float = STARTUP) -> list[str]:
    """Command lines of live processes mentioning ``marker``, waiting up to ``grace`` s for them.

    Returns as soon as none is left: ``grace`` only bounds how long a leftover takes to be
    reported, so a teardown slowed by a loaded machine is not mistaken for one.
    """
    found: list[str] = []

    def none_left() -> bool:
        found[:] = _processes_mentioning(marker)
        return not found

    with suppress(pytest.fail.Exception):  # what is left after ``grace`` is the answer
        poll_for(none_left, grace, period=0.2)
    return found


def _processes_mentioning(marker: Path) -> list[str]:
    """``"pid: command line"`` of each live (not zombie) process whose command names ``marker``."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if str(marker) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.info['pid']}: {cmdline}")
        except psutil.Error:
            continue
    return found


def reader_profile(bp: Path | str, pid: int | None = None) -> Path:
    """Where ADIOS2's BP5 reader (2.10-2.12) writes its profile when it closes ``bp``, whatever
    its parameters say: ``/tmp/<file name>_<pid in hex>_profiling.json``, readable by all. A
    test that reads a BP5 file with the adios2 bindings removes its own
    (:func:`drop_reader_profile`; the analytics scripts that the tests run, theirs): the suite
    leaves nothing in /tmp (``deisa.Replay`` removes its own too)."""
    return Path("/tmp") / f"{Path(bp).name}_{os.getpid() if pid is None else pid:x}_profiling.json"


def drop_reader_profile(bp: Path | str) -> None:
    """Remove this process's :func:`reader_profile` of ``bp``, if there is one."""
    reader_profile(bp).unlink(missing_ok=True)


def write_config(path: Path, **settings: object) -> Path:
    import yaml

    base = {"global_size": [32, 32], "process_grid": [2, 2], "steps": 4, "output_period": 2}
    base.update(settings)
    path.write_text(yaml.safe_dump(base))
    return path


@contextmanager
def two_worker_client() -> Iterator[Any]:
    """A client of a LocalCluster of two one-thread worker processes (BLAS pinned), both
    closed at the end of the block."""
    from distributed import Client, LocalCluster

    blas = {k: v for k, v in THREAD_PINS.items() if k.endswith("_NUM_THREADS")}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", env=blas
        ) as cluster,
        Client(cluster, timeout=STARTUP) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def local_client() -> Iterator[Any]:
    """A :func:`two_worker_client`, for one test module."""
    with two_worker_client() as client:
        yield client


def scatter_blocks(
    client: Any,
    field: Any,
    chunks: tuple[tuple[int, ...], tuple[int, ...]],
    owner: Callable[[int, int], str],
    name: str,
) -> Any:
    """Scatter block (i, j) to ``owner(i, j)`` under key ``(name, i, j)``; array of futures."""
    import dask.array as da
    import numpy as np
    from distributed import wait

    row_starts, col_starts = np.cumsum([0, *chunks[0]]), np.cumsum([0, *chunks[1]])
    futures = {}
    for i, j in np.ndindex(len(chunks[0]), len(chunks[1])):
        block = field[row_starts[i] : row_starts[i + 1], col_starts[j] : col_starts[j + 1]]
        futures.update(client.scatter({(name, i, j): block.copy()}, workers=[owner(i, j)]))
    wait(list(futures.values()))
    return da.Array(futures, name, chunks=chunks, dtype=field.dtype)


@contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    """Hold the file ``lock`` (created private) against every other process that asks for it:
    the other xdist worker of the session, another session."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@pytest.fixture(scope="session")
def built() -> Path:
    """Configures and builds the project in build/ (incremental); skips without PDI. One
    process at a time: the other xdist worker waits, then finds the build done."""
    if shutil.which("cmake") is None or shutil.which("mpirun") is None:
        pytest.skip("cmake and mpirun are needed to build and run the C heat solver")
    with exclusive(BUILD / ".tests.lock"):
        return _build()


def _build() -> Path:
    if not (BUILD / "CMakeCache.txt").exists():
        proc = subprocess.run(
            ["cmake", "-S", str(REPO), "-B", str(BUILD)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            if "PDI 1.12" in proc.stderr or "pybind11" in proc.stderr:
                pytest.skip(f"PDI 1.12 (or pybind11) not found by CMake:\n{proc.stderr[-2000:]}")
            raise AssertionError(f"cmake configure failed:\n{proc.stdout}\n{proc.stderr}")
    proc = subprocess.run(
        ["cmake", "--build", str(BUILD), "-j2"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"cmake --build failed:\n{proc.stdout}\n{proc.stderr}"
    assert (BUILD / "simulation" / "heat").exists()
    assert (BUILD / "plugin" / "libpdi_deisa_plugin.so").exists()
    return BUILD


# -- layers: `python3 -m pytest -m "not integration"` runs the in-process tests only -----------

# Fixtures that start real processes (dask scheduler/worker processes, a LocalCluster's worker
# processes, the CMake build of the C solver and plugin, Slurm daemons): conftest's own and the
# test modules' (matched by name, so a new in-process fixture must not reuse one of these names).
PROCESS_FIXTURES = frozenset(
    {
        "dask_processes",
        "module_dask",
        "shared_dask",
        "local_client",
        "built",
        "cluster",  # test_adapter, test_faults, test_integrity
        "own_cluster",  # test_faults
        "tls_cluster",  # test_security
        "one_worker",  # test_pipeline
        "slurm",  # test_slurm
    }
)
# Tests that start processes themselves (mpirun, deisa-run, python subprocesses) rather than
# through a fixture: every test of a module (None), or the tests named.
PROCESS_TESTS: dict[str, frozenset[str] | None] = {
    "test_examples": None,
    "test_async_publish": None,
    "test_bench": None,
    "test_bench_contracts": None,
    "test_bench_adios2": None,  # mpirun, the C++ writer's CMake build, SST processes, a cluster
    "test_bench_tls_link": None,  # network namespaces, dask processes, mpirun
    "test_replay_bp": frozenset(  # a LocalCluster; mpirun of bench/adios2's C++ writer
        {
            "test_bp_is_lazy_and_computes_on_a_cluster",
            "test_bp_written_by_mpi_ranks_replays_their_blocks",
        }
    ),
    "test_replay_moving": frozenset(  # a LocalCluster; mpirun of tests/analysis/bp_moving_writer
        {
            "test_each_box_is_read_on_the_cluster",
            "test_bp_written_by_mpi_ranks_is_the_live_runs_per_step",
        }
    ),
    "test_cli": None,
    "test_local": None,
    "test_processes": None,
    "test_fortran": None,
    "test_grammars": None,
    "test_released_clients": None,  # mpirun, dask processes, the analytics' python
    "test_pdi_plugin": None,
    "test_adios2": None,  # mpirun, deisa-run, Slurm, the ADIOS2 codes
    "test_adios2_moving": None,  # mpirun, deisa-run, the ADIOS2 code whose data moves
    "test_adios2_fortran": None,  # CMake, mpif90, mpirun, deisa-run
    "test_openpmd": None,  # CMake, mpirun, deisa-run, the openPMD-api writer
    "test_ecosystem": None,  # virtual environments, pip, mpirun, dask processes
    "test_insitu_mpi": None,  # deisa.insitu: mpirun, the analytics' python
    "test_insitu_conformance": None,  # the deisa-project tests: pip, a venv, pytest, clusters
    "test_doctor": frozenset(  # python -m deisa doctor, a fresh interpreter
        {
            "test_importing_deisa_leaves_the_doctor_out",
            "test_doctor_here_finds_pdi_the_built_plugin_and_the_mpiruns_mpi",
        }
    ),
    "test_job_security": frozenset(
        {
            "test_local_run_refuses_strangers_and_keeps_its_files_private",
            "test_insecure_says_so_once_and_speaks_plain_tcp",
        }
    ),
    "test_replay_live": None,
    "test_planted_code": None,  # attackers of uid 65534, dask processes, deisa-run
    "test_layout": frozenset(  # mpirun, dask processes with and without the Bridge's preload
        {"test_no_rank_waits_for_distributed_and_only_rank_0_loads_the_scheduler_side"}
    ),
    "test_relay": frozenset(  # dask processes, rank 0 in a fresh interpreter
        {"test_a_rank_0_on_a_workers_node_imports_distributed_only_when_it_installs_the_plugin"}
    ),
    "test_ucx": frozenset(  # deisa-run over UCX, where distributed-ucxx imports; the job script
        {
            "test_local_run_over_ucx",
            "test_job_on_a_python_without_distributed_ucxx_stops_before_any_step",
            "test_bandwidth_benchmark_over_ucx_tcp_and_shared_memory",
        }
    ),
    "test_bridge": frozenset({"test_bridge_rejects_a_missing_scheduler_file"}),
    "test_transport": frozenset(  # an attacker of another account, a real process
        {
            "test_the_listener_refuses_another_account",
            "test_a_rank_refuses_a_listener_of_another_account",
        }
    ),
    "test_shared_memory": None,  # mpirun, dask processes, attackers
    "test_exchange": frozenset({"test_exchange_on_four_ranks_overlaps_and_agrees"}),
    "test_notices": frozenset(  # rank 0's listener in a fresh interpreter, as deisa-run starts it
        {"test_rank_0s_listener_without_dask_takes_the_jobs_notices_only"}
    ),
    "test_pca": frozenset({"test_merge_tree_wider_than_its_fan_in"}),  # its own LocalCluster
    "test_insitu_bridge": frozenset(  # a LocalCluster on TCP, a rank in a fresh interpreter
        {"test_a_bridge_never_closed_leaves_no_temporary_scheduler_file"}
    ),
    "test_preload": frozenset({"test_a_simulation_rank_imports_nothing_of_the_analytics"}),
    "test_heat": frozenset(
        {"test_heat_mpi_run_without_bridge", "test_heat_rank_count_must_match_the_grid"}
    ),
    "test_validation": frozenset({"test_mpi_job_with_bad_input_exits_nonzero_naming_it"}),
}


def starts_processes(item: pytest.Item) -> bool:
    """Whether ``item`` starts real processes, by the lists above."""
    if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    module = item.module.__name__.rpartition(".")[2] if hasattr(item, "module") else ""
    if module not in PROCESS_TESTS:
        return False
    names = PROCESS_TESTS[module]
    return names is None or getattr(item, "originalname", item.name) in names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if starts_processes(item):
            item.add_marker(pytest.mark.integration)
    items[:] = build_last(items)


def build_last(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items``, the tests of each file that need the CMake build (:func:`built`) after the
    file's others, each part in its order: the first file of the worker that does not build
    runs its other tests while the other worker builds (2.5 min on two cores), rather than
    waiting for the build's lock at its first such test."""
    files: dict[str, int] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], len(files))
    return sorted(
        items,
        key=lambda item: (
            files[item.nodeid.split("::", 1)[0]],
            "built" in getattr(item, "fixturenames", ()),
        ),
    )


# -- two cores, two xdist workers: `python3 -m pytest` runs with `-n 2 --dist loadfile` ---------

# A test file runs whole on one worker (its module fixtures: a cluster, Slurm daemons, a
# reference run start once). The files of one group here run on one worker, one after the
# other, so that what they start never overlaps: a Slurm cluster each (test_adios2 takes
# test_slurm's fixture), whose daemons would compete for the host's node name and cgroups.
XDIST_GROUPS = {"test_slurm.py": "slurm", "test_adios2.py": "slurm"}

# Seconds a unit (a file, a group of XDIST_GROUPS) takes on one worker of `python3 -m pytest`
# on two quiet cores, the units of more than 40 s: estimated from `--durations` runs (the
# README's whole run, `-n 0` runs of the files; tests/README.md), only their order matters.
# The workers take the longest first, so that the last ones are short and the two finish
# together (xdist's own order, the most tests first, leaves the files of one or two long tests
# for the end). Any other file: its count of tests times UNIT_SECONDS_PER_TEST.
UNIT_SECONDS = {
    "slurm": 600,
    "tests/launcher/test_cli.py": 280,
    "tests/test_bench.py": 250,
    "tests/launcher/test_local.py": 240,
    "tests/test_faults.py": 220,
    "tests/test_pdi_plugin.py": 200,
    "tests/test_adios2_fortran.py": 120,
    "tests/launcher/test_ucx.py": 100,
    "tests/test_ecosystem.py": 90,
    "tests/test_adios2_moving.py": 80,
    "tests/test_openpmd.py": 80,
    "tests/pca_app/test_pipeline.py": 70,
    "tests/test_insitu_conformance.py": 60,
    "tests/launcher/test_job_security.py": 50,
    "tests/test_integrity.py": 45,
    "tests/wire/test_guard.py": 45,
}
UNIT_SECONDS_PER_TEST = 0.3


def unit_seconds(unit: str, tests: int) -> float:
    """How long the xdist unit ``unit`` of ``tests`` tests takes: :data:`UNIT_SECONDS`."""
    return UNIT_SECONDS.get(unit, tests * UNIT_SECONDS_PER_TEST)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load-by-file scheduling, the files of :data:`XDIST_GROUPS` one unit each group
    (xdist's own ``xdist_group`` marks no longer reach its scheduler under pytest 9), the
    longest unit first (:func:`unit_seconds`)."""
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):  # type: ignore[misc]
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return XDIST_GROUPS.get(path.rpartition("/")[2], path)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the queue is complete at the first assignment
                units = sorted(self.workqueue.items(), key=lambda u: -unit_seconds(u[0], len(u[1])))
                self.workqueue.clear()
                self.workqueue.update(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return FileGroups(config, log)


# -- what a test leaves behind: nothing that changes how a later test computes ----------------


def stale_dask_scheduler() -> str | None:
    """Dask's configuration naming the distributed scheduler while no client runs, or ``None``.

    A later computation without a client of its own (a replay, a PCA) then fails with "no
    Client active", far from the cause: a client closed after another that it outlived restores
    the ``scheduler`` value the other had set (distributed's ``Client.close``).
    """
    dask = sys.modules.get("dask")
    if dask is None:  # never imported: nothing configured
        return None
    scheduler = dask.config.get("scheduler", None)
    if scheduler not in ("dask.distributed", "distributed"):
        return None
    from distributed import default_client

    try:
        client = default_client()
    except ValueError:  # no client at all
        client = None
    if client is not None and client.status == "running":
        return None
    return (
        f"dask's configuration with scheduler={scheduler!r} and "
        f"{'no client' if client is None else f'only client {client.id} ({client.status})'}"
    )


# the session's umask: `deisa-run`'s main (cli.main, called in process by the launcher's tests)
# sets 077 for every file of a run; a later test of the same process writing a file for
# another account to read (tests/launcher/test_planted_code.py) then fails by the order of files
_UMASK = os.umask(0o022)
os.umask(_UMASK)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Fail the test whose teardown (its fixtures, its module's when it is the module's last)
    leaves :func:`stale_dask_scheduler`; the setting goes, so that only this test fails. The
    process's umask goes back to the session's."""
    result = yield
    os.umask(_UMASK)
    problem = stale_dask_scheduler()
    if problem is not None:
        sys.modules["dask"].config.config.pop("scheduler", None)
        raise AssertionError(f"{item.nodeid} left {problem}")
    return result


# -- what ran: the summary line of `python3 -m pytest`, and no silent skip of the C layer ------

_MPI_TESTS: set[str] = set()  # node IDs of the tests that started MPI ranks
_USED_MPI = ("deisa", "mpi")  # in a report's user_properties: its test started MPI ranks


def uses_mpi() -> None:
    """Record that the running test starts MPI ranks (:func:`mpirun`, :func:`deisa_run`)."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    if current:
        _MPI_TESTS.add(current.rsplit(" (", 1)[0])


def pdi_installed() -> Path | None:
    """PDI's CMake package, where CMake would find it (CMAKE_PREFIX_PATH, /usr/local, /usr)."""
    prefixes = [*filter(None, os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep))]
    for prefix in [*prefixes, "/usr/local", "/usr"]:
        for config in Path(prefix).glob("*/pdi/cmake/PDIConfig.cmake"):
            return config
        for config in Path(prefix).glob("lib*/cmake/[pP][dD][iI]*/PDIConfig.cmake"):
            return config
    return None


class _Tally:
    """Outcomes of the PDI, Slurm and MPI tests of the session."""

    def __init__(self) -> None:
        self.outcomes: dict[str, dict[str, int]] = {}
        self.skipped_pdi: list[str] = []
        self.skipped_adios2: list[str] = []
        self.skipped_adios2_fortran: list[str] = []
        self.skipped_openpmd: list[str] = []

    def add(self, kind: str, outcome: str) -> None:
        counts = self.outcomes.setdefault(kind, {})
        counts[outcome] = counts.get(outcome, 0) + 1

    def line(self) -> str:
        parts = []
        for kind in ("PDI", "ADIOS2", "openPMD", "MPI", "Slurm"):
            counts = self.outcomes.get(kind, {})
            done = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            parts.append(f"{kind} tests: {done or 'none'}")
        return "deisa: " + "; ".join(parts)


_TALLY = _Tally()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Say in the report that the test started MPI ranks: the report, not this process, reaches
    the summary (from an xdist worker, the controller)."""
    report = yield
    if item.nodeid in _MPI_TESTS and _USED_MPI not in report.user_properties:
        report.user_properties.append(_USED_MPI)
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # a test's outcome: its call, or the setup or teardown that skipped or failed it
    if report.when != "call" and report.passed:
        return
    if report.when == "teardown" and not report.failed:
        return
    outcome = "skipped" if report.skipped else "failed" if report.failed else "passed"
    if hasattr(report, "wasxfail"):  # an expected failure (xfail) is not a skip
        outcome = "xfailed" if report.skipped else "xpassed"
    markers = (("PDI", "pdi"), ("ADIOS2", "adios2"), ("openPMD", "openpmd"), ("Slurm", "slurm"))
    kinds = [k for k, marker in markers if marker in report.keywords]
    if _USED_MPI in report.user_properties:
        kinds.append("MPI")
    for kind in kinds:
        _TALLY.add(kind, outcome)
    # a PDI test of a Slurm job skips with Slurm (no root, no daemons): the Slurm count says so
    if "pdi" in report.keywords and "slurm" not in report.keywords and outcome == "skipped":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _TALLY.skipped_pdi.append(f"{report.nodeid}: {reason}")
    if "adios2" in report.keywords and "slurm" not in report.keywords and outcome == "skipped":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _TALLY.skipped_adios2.append(f"{report.nodeid}: {reason}")
    if "adios2_fortran" in report.keywords and outcome == "skipped":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _TALLY.skipped_adios2_fortran.append(f"{report.nodeid}: {reason}")
    if "openpmd" in report.keywords and outcome == "skipped":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _TALLY.skipped_openpmd.append(f"{report.nodeid}: {reason}")


def adios2_installed() -> Path | None:
    """ADIOS2's CMake package with MPI, where the project's CMake would find it."""
    from deisa.doctor.adios2 import adios2_config_file, check_adios2

    config = adios2_config_file()
    return config if config is not None and check_adios2().details.get("mpi") else None


def adios2_under_test() -> Path | None:
    """The ``adios2-config.cmake`` of the ADIOS2 that the Fortran ADIOS2 tests use:
    ``DEISA_TEST_ADIOS2_DIR`` (its install prefix, or the directory of that file; ``None`` if
    it holds none), else the one the project's CMake finds
    (:func:`deisa.doctor.adios2.adios2_config_file`)."""
    from deisa.doctor.adios2 import adios2_config_file

    given = os.environ.get("DEISA_TEST_ADIOS2_DIR")
    if not given:
        return adios2_config_file()
    for candidate in (Path(given), *sorted(Path(given).glob("lib*/cmake/adios2"))):
        if (candidate / "adios2-config.cmake").is_file():
            return candidate / "adios2-config.cmake"
    return None  # the Fortran tests fail, naming the variable


def fortran_adios2_installed() -> Path | None:
    """:func:`adios2_under_test`, where it has MPI and Fortran."""
    from deisa.doctor.adios2 import adios2_features

    config = adios2_under_test()
    if config is None:
        return None
    features = adios2_features(config)
    return config if features["mpi"] and features["fortran"] else None


def openpmd_installed() -> Path | None:
    """openPMD-api's CMake package, where the project's CMake would find it, with MPI and
    ADIOS2 (tests/test_openpmd.py), and ADIOS2 with MPI beside it."""
    from deisa.doctor.openpmd import check_openpmd, openpmd_config_file

    config = openpmd_config_file()
    usable = config is not None and check_openpmd().status == "ok"
    return config if usable and adios2_installed() is not None else None


def _skips(kind: str) -> tuple[list[str], Path | None, str]:
    """The skipped tests of ``kind`` (PDI, ADIOS2, ADIOS2 Fortran, openPMD), where it is
    installed, and the variable that allows their skips."""
    if kind == "PDI":
        return _TALLY.skipped_pdi, pdi_installed(), "DEISA_ALLOW_PDI_SKIP"
    if kind == "ADIOS2 Fortran":  # ADIOS2 without Fortran: its Fortran tests may skip
        skipped = _TALLY.skipped_adios2_fortran
        return skipped, fortran_adios2_installed(), "DEISA_ALLOW_ADIOS2_SKIP"
    if kind == "openPMD":
        return _TALLY.skipped_openpmd, openpmd_installed(), "DEISA_ALLOW_OPENPMD_SKIP"
    return _TALLY.skipped_adios2, adios2_installed(), "DEISA_ALLOW_ADIOS2_SKIP"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(_TALLY.line())
    for kind in ("PDI", "ADIOS2", "ADIOS2 Fortran", "openPMD"):
        skipped, config, allow = _skips(kind)
        if not skipped or config is None:
            continue
        verdict = (
            f"allowed by {allow}=1"
            if os.environ.get(allow) == "1"
            else f"the session fails ({allow}=1 allows it)"
        )
        terminalreporter.write_line(
            f"deisa: {kind} is installed ({config}) but {len(skipped)} {kind} test(s) "
            f"skipped; {verdict}:"
        )
        for line in skipped:
            terminalreporter.write_line(f"  {line}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # the C layer must not vanish from a run silently where it could have run
    for kind in ("PDI", "ADIOS2", "ADIOS2 Fortran", "openPMD"):
        skipped, config, allow = _skips(kind)
        allowed = os.environ.get(allow) == "1"
        if skipped and not allowed and config is not None and exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def stranger() -> Any:
    """The second account of the attack tests (:func:`attack.stranger`: made with
    ``useradd`` the first time; skips unless root)."""
    from attack import stranger as account

    return account()


EXCHANGES = r"""
import json
import os

rank = os.environ.get("OMPI_COMM_WORLD_RANK")
if rank is not None:  # a rank of the simulation (the engine's interpreter), not a Dask process
    from deisa.bridge._async import AsyncPublisher

    posted, exchanged = AsyncPublisher.post, AsyncPublisher.exchange
    waiting = set()  # the publishers in a blocking exchange (a wait for room, for the scheduler)

    def post(self, call=None, problem=None):
        if call is not None and id(self) not in waiting:  # a publication's exchange
            names = [call[0]] if isinstance(call[0], str) else list(call[0])
            with open(os.path.join(os.environ["DEISA_TEST_EXCHANGES"], f"{rank}.txt"), "a") as f:
                f.write(json.dumps([names, int(call[1])]) + "\n")
        return posted(self, call, problem)

    def exchange(self, call=None, problem=None):
        waiting.add(id(self))
        try:
            return exchanged(self, call, problem)
        finally:
            waiting.discard(id(self))

    AsyncPublisher.post, AsyncPublisher.exchange = post, exchange
"""


def exchanges_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder where each rank of the simulation lists the exchanges its Bridges post for
    publications (not the blocking ones of a wait), one ``[names, step]`` line each: a
    ``sitecustomize`` on the ``PYTHONPATH`` of the processes the test starts, which the
    plugin's or engine's embedded interpreter imports at its start, wraps
    ``AsyncPublisher.post`` and ``exchange`` (the real ones run). Issue 56 item 9: the arrays
    of a step share one exchange."""
    site, folder = tmp_path / "site", tmp_path / "exchanges"
    site.mkdir()
    folder.mkdir()
    (site / "sitecustomize.py").write_text(EXCHANGES)
    paths = [str(site), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    monkeypatch.setenv("DEISA_TEST_EXCHANGES", str(folder))
    return folder
