"""Helpers shared by the benchmarks: pinned environment, machine description, tables, targets."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# deisa.launcher.processes.THREAD_PINS, repeated because a benchmark pins its own process before
# anything imports numpy, and importing deisa does (tests/test_bench.py checks they agree).
PINS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
REPO = Path(__file__).resolve().parent.parent
MiB = 2**20
GiB = 2**30


def child_env(**extra: str) -> dict[str, str]:
    """The environment for MPI and Dask children: BLAS pinned, root allowed, repo importable."""
    env = {**os.environ, **PINS, **MPI_ENV, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def local_cluster(
    workers: int = 1,
    security: Any = None,
    protocol: str | None = None,
    *,
    worker_preload: bool = True,
) -> Any:
    """A ``LocalCluster`` of ``workers`` single-threaded worker processes on loopback, no
    dashboard, no memory limit: the cluster every in-process benchmark measures against.
    With ``security`` (a ``distributed.Security``, e.g. :meth:`TLSFiles.security`), it speaks
    ``tls://`` only; ``protocol`` (``"ucx"``: distributed-ucxx installed) sets another. Its
    workers preload deisa's worker plugin as ``deisa-run``'s do (:func:`worker_preloads`)."""
    from distributed import LocalCluster

    tls = {} if security is None else {"protocol": "tls://", "security": security}
    if protocol is not None:
        tls["protocol"] = f"{protocol}://"
    return LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, memory_limit=0, **tls,
        preload=worker_preloads(worker_preload),
        # the scheduler's HTTP server (health, metrics) starts anyway, on 8787 by default
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )  # fmt: skip


def worker_preloads(bridge: bool = True) -> list[str]:
    """What each worker a benchmark starts preloads: ``deisa.worker`` (deisa's worker
    plugin before the ranks connect: shared memory from the first step, rank 0 calling the
    scheduler through a worker's relay), as ``deisa-run``'s workers do, beside the dask
    configuration's preloads; ``bridge`` false (``--no-worker-preload``): those alone, rank 0
    through distributed (:func:`deisa.launcher.dask_processes.worker_preloads`)."""
    from deisa.launcher.dask_processes import worker_preloads as preloads

    return preloads(bridge=bridge)


def add_worker_preload_option(parser: argparse.ArgumentParser) -> None:
    """``--no-worker-preload`` (``args.worker_preload``, recorded in the JSON)."""
    parser.add_argument(
        "--no-worker-preload", dest="worker_preload", action="store_false",
        help="start the Dask workers without --preload deisa.worker, which deisa-run "
        "gives them: rank 0 then calls the scheduler through distributed",
    )  # fmt: skip


def cores_plan(
    ranks: int, workers: int, available: list[int] | None = None, shared: bool = False
) -> dict[str, Any]:
    """Which cores the ranks and the analytics get (``None``: every core, shared).

    ``separate`` is whether the ranks and the analytics run on different cores: with at least
    ``ranks + 1`` cores (``ranks + workers + 1`` gives every worker a core of its own too),
    unless ``shared``. The ranks' cores are the first; run the ranks' ``mpirun`` with
    ``--bind-to none`` and pinned to them (:func:`pinned_to`), this process (the analytics, and
    what it starts from then on) to the others (a job on a node with cores to spare places its
    simulation and its analytics apart so).
    """
    if available is None:
        try:
            available = sorted(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            available = list(range(os.cpu_count() or 1))
    if len(available) >= ranks + 1 and not shared:
        sim, analytics = available[:ranks], available[ranks:]
        crowded = "" if len(analytics) >= workers + 1 else (
            f", which its {workers} worker(s), the scheduler and the analytics share")  # fmt: skip
        description = (f"separate cores ({len(available)}): ranks pinned to {sim}, analytics "
                       f"(scheduler, workers) to {analytics}{crowded}")  # fmt: skip
        return {"simulation": sim, "analytics": analytics, "separate": True,
                "description": description}  # fmt: skip
    why = "as asked" if shared else "fewer than ranks + 1"
    description = (f"shared cores: {len(available)} cores shared by {ranks} ranks, {workers} "
                   f"workers, the scheduler and the analytics ({why})")  # fmt: skip
    return {"simulation": None, "analytics": None, "separate": False, "description": description}


def pinned_to(cores: list[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that pins a child to ``cores`` (``None`` for ``None``: unpinned)."""
    if cores is None:
        return None
    pinned = set(cores)
    return lambda: os.sched_setaffinity(0, pinned)


@dataclass(frozen=True)
class TLSFiles:
    """One run's TLS credentials as PEM files: a self-signed certificate that is also the CA,
    its key, and what making them took."""

    directory: Path
    ca_file: Path
    cert: Path
    key: Path
    maker: str  # "temporary" or "deisa-run" (see tls_credentials)
    import_s: float  # importing ``cryptography`` (0 when it was imported already)
    generate_s: float  # the key pair, the certificate and the two files
    ciphers: str | None = None  # OpenSSL cipher list (TLS 1.2 only: 1.3's suites are fixed)
    max_version: float | None = None  # 1.2 or 1.3; None: the highest both ends speak

    def security(self) -> Any:
        """A ``distributed.Security`` for every role, encryption required."""
        import ssl

        from distributed import Security

        roles = ("client", "scheduler", "worker")
        paths = {
            f"tls_{r}_{part}": str(getattr(self, part)) for r in roles for part in ("cert", "key")
        }
        if self.max_version is not None:
            paths["tls_max_version"] = {1.2: ssl.TLSVersion.TLSv1_2,
                                        1.3: ssl.TLSVersion.TLSv1_3}[self.max_version]  # fmt: skip
        return Security(tls_ca_file=str(self.ca_file), require_encryption=True,
                        tls_ciphers=self.ciphers, **paths)  # fmt: skip

    def config(self) -> dict[str, Any]:
        """The client's settings as dask config (``dask.config.set(files.config())``): what
        the Bridge and the Adapter read (``Security()``)."""
        tls = "distributed.comm.tls"
        return {f"{tls}.ca-file": str(self.ca_file), f"{tls}.client.cert": str(self.cert),
                f"{tls}.client.key": str(self.key), f"{tls}.ciphers": self.ciphers,
                f"{tls}.max-version": self.max_version}  # fmt: skip

    def env(self) -> dict[str, str]:
        """The same settings for child processes (MPI ranks), encryption required; with dask's
        default ciphers and versions, also deisa's names of the files, as ``deisa-run`` sets
        them (rank 0's notices listener then reads them without dask; it knows no other
        settings, so with ``ciphers`` or ``max_version`` it takes the dask configuration's)."""
        from deisa.bridge.tls_files import tls_files_env

        tls = "DASK_DISTRIBUTED__COMM__TLS__"
        env = {f"{tls}CA_FILE": str(self.ca_file), f"{tls}CLIENT__CERT": str(self.cert),
               f"{tls}CLIENT__KEY": str(self.key),
               "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}  # fmt: skip
        if self.ciphers is not None:
            env[f"{tls}CIPHERS"] = self.ciphers
        if self.max_version is not None:
            env[f"{tls}MAX_VERSION"] = str(self.max_version)
        if self.ciphers is None and self.max_version is None:
            env.update(tls_files_env(str(self.ca_file), str(self.cert), str(self.key)))
        return env

    def cli_args(self) -> list[str]:
        """The options of ``dask scheduler`` and ``dask worker``: TLS only, with these files
        (:mod:`deisa.launcher.dask_processes` takes them)."""
        return ["--protocol", "tls", "--tls-ca-file", str(self.ca_file), "--tls-cert",
                str(self.cert), "--tls-key", str(self.key)]  # fmt: skip


@contextmanager
def tls_credentials(
    ciphers: str | None = None, max_version: float | None = None, maker: str = "temporary"
) -> Iterator[TLSFiles]:
    """Fresh TLS credentials for one run, removed at the end.

    ``maker="temporary"``: distributed's ``Security.temporary()`` (RSA 2048, self-signed)
    written to ``cert.pem`` and ``key.pem``, mode 0600, in a new directory of mode 0700 under
    the system temporary directory. ``maker="deisa-run"``: what ``deisa-run`` makes for a job
    (``deisa.launcher.security.make_credentials``: EC P-256, self-signed, 0600 files in a 0700
    directory), in a directory of that one. The key is never printed; only the paths travel
    (dask config, environment, command lines). ``ciphers`` and ``max_version``: distributed's
    ``distributed.comm.tls.ciphers`` and ``max-version``, applied wherever the files are.
    """
    import sys

    from distributed import Security

    fresh = "cryptography.x509" not in sys.modules
    t0 = time.perf_counter()
    import cryptography.hazmat.primitives.asymmetric.rsa
    import cryptography.x509  # noqa: F401

    import_s = time.perf_counter() - t0 if fresh else 0.0
    t0 = time.perf_counter()
    directory = Path(tempfile.mkdtemp(prefix="deisa-bench-tls-"))  # created 0700
    try:
        os.chmod(directory, 0o700)
        if maker == "deisa-run":
            from deisa.launcher.security import make_credentials

            made = make_credentials(directory / "tls")
            ca_file, cert, key = made.ca_file, made.cert, made.key
        elif maker == "temporary":
            from deisa.launcher.security import write_private

            temporary = Security.temporary()
            cert, key = directory / "cert.pem", directory / "key.pem"
            write_private(cert, temporary.tls_ca_file.encode())
            write_private(key, temporary.tls_client_key.encode())
            del temporary
            ca_file = cert
        else:
            raise ValueError(f"maker={maker!r}: 'temporary' or 'deisa-run'")
        generate_s = time.perf_counter() - t0
        yield TLSFiles(directory, ca_file, cert, key, maker, import_s, generate_s, ciphers,
                       max_version)  # fmt: skip
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def compile_bytecode() -> bool:
    """Compile deisa's modules to bytecode beside them, as ``pip install`` does, so that a
    rank's start-up is measured as installed: an editable install run with
    ``PYTHONDONTWRITEBYTECODE=1`` (this machine's default) compiles every module from source at
    every import, about 50 ms of a rank's CPU. ``False`` if the tree is read-only."""
    import compileall

    return bool(compileall.compile_dir(REPO / "deisa", quiet=1))


def loadavg() -> list[float]:
    """``/proc/loadavg``'s three load averages (1, 5, 15 minutes)."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """nproc, memory and CPU model of this machine (from /proc where available)."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "memory_gib": mem_gib, "cpu": model}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A fixed-width text table (also valid Markdown)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |"
             for r in cells]  # fmt: skip
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def print_targets(targets: Sequence[tuple[str, bool | None, str]]) -> None:
    """Print each target as PASS, FAIL or N/A (could not be measured), with the numbers."""
    for description, passed, measured in targets:
        verdict = "N/A " if passed is None else ("PASS" if passed else "FAIL")
        print(f"target: {verdict} {description}: {measured}", flush=True)


def targets_json(targets: Sequence[tuple[str, bool | None, str]]) -> list[dict[str, Any]]:
    return [{"target": d, "passed": p, "measured": m} for d, p, m in targets]


def finish(
    out: Path, name: str, targets: Sequence[tuple[str, bool | None, str]], **fields: Any
) -> int:
    """Print ``targets``, write ``out/<name>.json`` (the machine, ``fields``, the targets) and
    return the benchmark's exit status: 0 unless a target failed."""
    print_targets(targets)
    path = out / f"{name}.json"
    path.write_text(
        json.dumps({"machine": machine(), **fields, "targets": targets_json(targets)}, indent=1)
    )
    print(f"wrote {path}")
    return 0 if all(passed is not False for _, passed, _ in targets) else 1


def page_cache_fraction(path: Path) -> float:
    """The fraction of ``path``'s pages resident in the page cache (``mincore`` of a mapping).

    NaN where the C library or the system call is not available (not Linux).
    """
    import ctypes
    import ctypes.util
    import mmap

    size = path.stat().st_size
    if size == 0:
        return 0.0
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]  # fmt: skip
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return float("nan")
    pages = -(-size // mmap.PAGESIZE)
    resident = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return float("nan")
        try:
            if libc.mincore(addr, size, resident) != 0:
                return float("nan")
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in resident) / pages


def fsync(path: Path) -> None:
    """Flush ``path``'s data to the device (what a job that ends must do before another reads)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_from_page_cache(path: Path) -> None:
    """Evict ``path``'s clean pages (``posix_fadvise(DONTNEED)``): a reader on another node, or
    a later job, finds none of it in memory. Call :func:`fsync` first: dirty pages stay."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
