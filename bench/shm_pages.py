"""The pages of a warm pool slot: 4 KiB, transparent huge pages, reserved huge pages (hugetlb).

    python -m bench.shm_pages --out results/                  # seconds
    sysctl vm.nr_hugepages=1100                                # as root, for the hugetlb row
    echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled   # for the THP row

One process, one slot per kind of page the node offers now (``deisa.bridge.shm.pool``), for
each block size (``--sizes``, MiB): the time to populate the slot (what the pool's thread
pays, off the publish path), then the copy of a block into the populated slot (what a publish
pays), against ``np.copyto`` into private memory (memcpy: numpy's, in transparent huge pages
where the node allows them, and in 4 KiB pages); medians of ``--repeat``. Kinds the
node does not offer are left out and said so. Writes ``shm_pages.json``.

Target (issue 46): none of its own; the copy into a pool slot should be a memcpy's (>= 80 %).
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import finish, loadavg, median, table
from deisa.bridge.shm.pool import (
    HUGETLB,
    SMALL,
    THP,
    huge_memfd,
    meminfo,
    page_kind,
    populate,
    round_up,
)
from deisa.wire.shm import HEADER, memfd, slot_bytes


def one_slot(kind: str, nbytes: int, block: np.ndarray) -> tuple[float, float]:
    """Populate a fresh slot of ``kind`` pages; copy ``block`` into it: both durations."""
    huge = meminfo().get("Hugepagesize", 2 << 20)
    size = round_up(slot_bytes(nbytes), huge) if kind == HUGETLB else slot_bytes(nbytes)
    fd = huge_memfd("bench", size) if kind == HUGETLB else memfd("bench", size)
    try:
        t0 = time.perf_counter()
        if kind == HUGETLB:
            os.posix_fallocate(fd, 0, size)
        region = mmap.mmap(fd, size)
        populate(region, fd, kind)
        populated = time.perf_counter() - t0
        view = np.frombuffer(region, dtype=block.dtype, count=block.size, offset=HEADER)
        t0 = time.perf_counter()
        np.copyto(view, block.reshape(-1))
        copied = time.perf_counter() - t0
        del view
        region.close()
    finally:
        os.close(fd)
    return populated, copied


def measure(mib: float, repeat: int) -> list[dict[str, Any]]:
    """Each kind of page offered here, interleaved with the memcpy they are compared with."""
    block = np.random.default_rng(0).random(int(mib * 2**20 / 8))
    scratch = np.empty_like(block)
    np.copyto(scratch, block)  # its pages exist: a memcpy from then on
    small = mmap.mmap(-1, block.nbytes)  # private memory in 4 KiB pages, as a slot's
    small.madvise(mmap.MADV_NOHUGEPAGE)
    scratch_4k = np.frombuffer(small, dtype=block.dtype)
    np.copyto(scratch_4k, block)
    info = meminfo()
    kinds = [SMALL]
    if page_kind(block.nbytes, {**info, "HugePages_Free": 0})[0] == THP:
        kinds.append(THP)
    if page_kind(block.nbytes, info)[0] == HUGETLB:
        kinds.append(HUGETLB)
    copies: list[float] = []
    copies_4k: list[float] = []
    samples: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    for _ in range(repeat):
        for kind in kinds:
            t0 = time.perf_counter()
            np.copyto(scratch, block)
            copies.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            np.copyto(scratch_4k, block)
            copies_4k.append(time.perf_counter() - t0)
            samples[kind].append(one_slot(kind, block.nbytes, block))
    return [
        {
            "block_mib": mib, "pages": kind, "memcpy_ms": 1000 * median(copies),
            "memcpy_4k_ms": 1000 * median(copies_4k),
            "populate_ms": 1000 * median([p for p, _ in samples[kind]]),
            "copy_ms": 1000 * median([c for _, c in samples[kind]]),
        }
        for kind in kinds
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[16, 64], help="MiB")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="--repeat 3")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 3
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = loadavg()
    rows = [row for mib in args.sizes for row in measure(mib, args.repeat)]
    print(table(
        ("MiB", "pages", "memcpy ms", "memcpy into 4 KiB pages ms", "populate ms",
         "copy into the slot ms", "copy of memcpy"),
        [[f"{r['block_mib']:g}", r["pages"], f"{r['memcpy_ms']:.2f}", f"{r['memcpy_4k_ms']:.2f}",
          f"{r['populate_ms']:.2f}", f"{r['copy_ms']:.2f}",
          f"{100 * r['memcpy_ms'] / r['copy_ms']:.0f} %"] for r in rows],
    ))  # fmt: skip
    kinds = {r["pages"] for r in rows}
    for kind in (THP, HUGETLB):
        if kind not in kinds:
            print(f"{kind}: not offered here (see the module docstring to enable it)")
    targets = [
        (f"{r['block_mib']:g} MiB, {r['pages']}: a copy into a pool slot >= 80 % of memcpy",
         r["memcpy_ms"] >= 0.8 * r["copy_ms"], f"{100 * r['memcpy_ms'] / r['copy_ms']:.0f} %")
        for r in rows
    ]  # fmt: skip
    shmem = Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
    return finish(args.out, "shm_pages", targets, rows=rows, loadavg_before=load_before,
                  loadavg_after=loadavg(), nr_hugepages=meminfo().get("HugePages_Total", 0),
                  shmem_enabled=shmem.read_text().strip() if shmem.exists() else None)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
