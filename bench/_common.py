"""Helpers shared by the benchmarks: pinned environment, machine description, tables, targets."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Sequence
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


def local_cluster(workers: int = 1) -> Any:
    """A ``LocalCluster`` of ``workers`` single-threaded worker processes on loopback, no
    dashboard, no memory limit: the cluster every in-process benchmark measures against."""
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, memory_limit=0,
    )  # fmt: skip


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
