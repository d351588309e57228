"""A rank's warm pool of shared-memory slots: memory kept mapped and populated for the run.

A slot whose pages do not exist yet costs the kernel their allocation (2 to 9 times a memcpy of the
block, docs/benchmarks.md, section 11): back to back, each block of a growing ring pays it. The pool
keeps the slots a rank's ring uses mapped, with their page tables, up to a budget
(:attr:`SlotPool.budget`, bytes): they are reused before anything new is allocated, and only slots
beyond the budget are given back. In a steady state (each block's slot back before the next) that is
the one or two slots the ring needs, adopted as they are used: no ``mmap``, ``munmap`` or page-table
fill per block, which the channel's thread did beside the caller's copy and which halved its speed
on 2 cores (docs/benchmarks.md, section 16). In a burst (the simulation outran the worker) the
burst's own slots are adopted: a fresh 4 KiB slot is filled by the copy (``pwrite``), never zeroed
first. Once the ring has outrun the worker, the channel's own thread
(:mod:`deisa.bridge.shm.channel`) populates the rest of the budget ahead: in huge pages at once, in
4 KiB pages only between bursts (the worker holding no more than a steady state's
:data:`STEADY_HELD` slots: zeroing pages is work on a core that a burst's copies need), so that the
next burst finds the whole budget warm. Never on the publish path. As Ray's object store
(``object_store_memory``) the budget is settable (``BridgeOptions.shm_pool_mib``, per rank or per
node): a burst deeper than the budget takes fresh slots beyond it, given back after. By default it
is what flow control can hold in flight: ``buffer_nb`` steps of the rank's blocks, plus one
(:data:`UNBOUNDED_STEPS` steps when ``buffer_nb`` is unbounded), each block in a slot of its own
(its header page counted).

The pool's pages are shared memory (``RssShmem`` in the rank and the worker), not the rank's
private memory (``RssAnon``). When memory runs short (``MemAvailable`` under
:data:`LOW_AVAILABLE` of the total, or the cgroup's ``memory.max`` within that of its use) the
pool stops growing and gives back its free slots past what still fits, and says so once.

Huge pages, where the node offers them (:func:`page_kind`): ``MFD_HUGETLB`` slots where
``vm.nr_hugepages`` reserved enough free pages, else transparent huge pages for shared memory
where ``/sys/kernel/mm/transparent_hugepage/shmem_enabled`` allows them (``madvise`` on the
mapping in ``advise`` mode), else 4 KiB pages; a failure falls back silently.

Runs in a simulation rank, on its main thread and the channels' threads (under its lock). Imports
:mod:`deisa.wire.shm`, the arrays wing's placement (the rank's host) and :mod:`.ring_size`.
"""

from __future__ import annotations

import ctypes
import logging
import math
import mmap
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...wire.shm import memfd, slot_bytes
from ..arrays.placement import Host, this_host
from .ring_size import UNBOUNDED_STEPS, ring_slots

logger = logging.getLogger(__name__)

__all__ = [
    "HUGETLB",
    "SMALL",
    "THP",
    "SlotPool",
    "page_kind",
    "pool_totals",
    "step_slot_bytes",
]

LOW_AVAILABLE = 0.10
"""The pool shrinks when less than this share of the node's memory (or of the cgroup's limit)
is left."""
CHECK_S = 1.0
"""Seconds between two looks at the memory left (two small files of /proc and /sys)."""
HUGETLB, THP, SMALL = "hugetlb", "transparent huge pages", "4 KiB pages"
"""What the pool's slots are made of (:func:`page_kind`)."""
MADV_POPULATE_WRITE = 23
"""Linux 5.14: fault in every page of a range, writable (not in Python's :mod:`mmap`)."""
POPULATE_CHUNK = 4 << 20
"""Bytes populated per ``madvise`` call: the kernel holds the process's mmap lock through each
call, and the publishing thread's ``mmap`` of a fresh slot waits for it (a 128 MiB slot in one
call: an mmap's p99 16-22 ms, against 0.03 ms by chunks, on a loaded 2-core VM)."""
MEMINFO = Path("/proc/meminfo")
SHMEM_THP = Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled")


def meminfo(path: Path | None = None) -> dict[str, int]:
    """``/proc/meminfo``'s fields (or ``path``'s), in bytes (kB figures) or pages (counts)."""
    fields: dict[str, int] = {}
    for line in (path or MEMINFO).read_text().splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            fields[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def page_kind(
    nbytes: int, info: dict[str, int] | None = None, thp: Path | None = None
) -> tuple[str, int]:
    """The pages a pool slot for blocks of ``nbytes`` can be made of here, and the size of a
    huge page: :data:`HUGETLB` where enough reserved huge pages are free (for a block of one
    huge page at least), :data:`THP` where shared memory may use transparent huge pages, else
    :data:`SMALL`."""
    info = meminfo() if info is None else info
    huge = info.get("Hugepagesize", 2 << 20)
    free = (info.get("HugePages_Free", 0) - info.get("HugePages_Rsvd", 0)) * huge
    if hasattr(os, "MFD_HUGETLB") and nbytes >= huge and free >= round_up(slot_bytes(nbytes), huge):
        return HUGETLB, huge
    try:
        mode = (thp or SHMEM_THP).read_text().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        return SMALL, huge
    return (THP if mode in ("always", "within_size", "advise", "force") else SMALL), huge


def huge_memfd(name: str, size: int) -> int:
    """A sealed memfd of ``size`` bytes in reserved huge pages; an ``OSError`` where there are
    none (:func:`deisa.wire.shm.memfd`)."""
    return memfd(name, size, huge=True)


def step_slot_bytes(blocks: Iterable[int]) -> int:
    """The bytes of the slots that hold one step of blocks of these sizes (bytes each): a
    block and its header page a slot (:func:`deisa.wire.shm.slot_bytes`), so that a budget of
    N steps keeps N slots per block, not one fewer."""
    return sum(slot_bytes(nbytes) for nbytes in blocks)


def round_up(nbytes: int, unit: int) -> int:
    return -(-nbytes // unit) * unit


def populate(region: mmap.mmap, fd: int, kind: str) -> None:
    """Fault in every page of ``region`` (a slot's shared mapping of ``fd``), off the publish
    path: its pages allocated and zeroed, its page tables filled; with :data:`THP`, as huge
    pages where the kernel can. ``madvise`` through ctypes, which releases the GIL (``mmap``'s
    own holds it for the whole population: the publishing thread would wait). Where
    ``MADV_POPULATE_WRITE`` is missing (Linux < 5.14), the pages are allocated with
    ``fallocate`` and their page tables left to the first copy."""
    anchor = ctypes.c_char.from_buffer(region)
    try:
        address = ctypes.addressof(anchor)
        if kind == THP:
            _LIBC.madvise(ctypes.c_void_p(address), len(region), mmap.MADV_HUGEPAGE)
        populated = 0
        for start in range(0, len(region), POPULATE_CHUNK):  # the mmap lock, a chunk at a time
            length = min(POPULATE_CHUNK, len(region) - start)
            populated = _LIBC.madvise(ctypes.c_void_p(address + start), length, MADV_POPULATE_WRITE)
            if populated != 0:
                break
    finally:
        del anchor  # the mapping's buffer export: it can be closed again
    if populated != 0:
        os.posix_fallocate(fd, 0, os.fstat(fd).st_size)


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def _cgroup_room(proc_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[int, int] | None:
    """``(limit, in use)`` of this process's cgroup v2 memory, or ``None`` without a limit."""
    try:
        relative = proc_cgroup.read_text().split("::", 1)[1].splitlines()[0].strip("/")
        group = Path("/sys/fs/cgroup") / relative
        limit = (group / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit), int((group / "memory.current").read_text())
    except (OSError, IndexError, ValueError):
        return None


def by_node(options: Any) -> bool:
    """Whether the Bridge's ``options`` give a pool budget per node (shared by its ranks)."""
    return bool(options.shm_pool_scope == "node" and options.shm_pool_mib is not None)


def room(info: dict[str, int] | None = None, cgroup: tuple[int, int] | None = None) -> int:
    """Bytes the pool may still take before memory is short (see the module docstring);
    negative: what it should give back."""
    info = meminfo() if info is None else info
    total = info.get("MemTotal", 0)
    left = info.get("MemAvailable", total) - int(LOW_AVAILABLE * total)
    if cgroup is not None:
        limit, used = cgroup
        left = min(left, limit - used - int(LOW_AVAILABLE * limit))
    return left


class SlotPool:
    """A rank's budget of warm shared-memory slots, over all its channels (thread-safe).

    Parameters
    ----------
    budget
        Bytes of slots kept warm; ``0``: no pool (free slots past two are given back, as
        before the pool). :meth:`size` sets it from the Bridge's options.

    Attributes
    ----------
    held : int
        Bytes of warm slots now.
    kinds : collections.Counter-like dict
        Warm slots made of each kind of page.
    shrunk : str or None
        Why the pool gave memory back under pressure (once), if it did.
    ring : int
        Slots a channel's ring may hold (:func:`.ring_size.ring_slots`); ``0`` until sized.
    fallbacks : int
        Blocks that went by TCP to a worker of this node for want of a free slot
        (:meth:`fell_back`: counted, and a warning the first time).
    """

    def __init__(self, budget: int = 0) -> None:
        self.budget = budget
        self.held = 0
        self.peak = 0
        self.kinds: dict[str, int] = {}
        self.shrunk: str | None = None
        self.fallbacks = 0
        self.ring = 0
        self.arrays = 1
        self._steps = 0  # the default budget's steps (0: a budget given in MiB, or none)
        self.moving: set[str] = set()  # the moving arrays (their parcels: learn())
        self._moving: dict[str, int] = {}  # a moving array's largest parcel's slot, in bytes
        self._lock = threading.Lock()
        self._checked = float("-inf")
        self._cap = budget

    def size(self, step_bytes: int, buffer_nb: int | None, mib: float | None, share: int) -> None:
        """Set the budget: ``mib`` MiB shared by ``share`` ranks (the node's, or this one), or
        by default ``buffer_nb`` steps of ``step_bytes`` plus one: the bytes of the slots that
        hold one step of this rank's blocks (:func:`step_slot_bytes`, a header page each)."""
        if mib is not None:
            self.budget = int(mib * 2**20) // max(1, share)
            self._steps = 0
        else:
            steps = UNBOUNDED_STEPS if buffer_nb is None else buffer_nb
            self._steps = steps + 1
            self.budget = self._steps * (step_bytes + sum(self._moving.values()))
        self._cap = self.budget

    def learn(self, name: str, nbytes: int) -> None:
        """A parcel of ``nbytes`` of ``name``: a moving array's (:attr:`moving`; its size is
        not declared) grows the default budget to its steps of the largest parcel seen."""
        slot = slot_bytes(nbytes)
        with self._lock:
            if not self._steps or name not in self.moving or slot <= self._moving.get(name, 0):
                return
            self.budget += self._steps * (slot - self._moving.get(name, 0))
            self._moving[name] = slot
            self._cap = self.budget
            self._checked = float("-inf")  # memory pressure looked at again with the new budget

    def size_for(self, options: Any, specs: Iterable[Any], hosts: list[Host] | None) -> None:
        """Set the budget from the Bridge's ``options`` (``transport="auto"`` only), this rank's
        array ``specs`` and, for a budget per node (:func:`by_node`), every rank's host; and
        the slots of a ring (:attr:`ring`, :func:`.ring_size.ring_slots`)."""
        specs = list(specs)
        self.ring = ring_slots(len(specs), options.buffer_nb, options.max_in_flight)
        self.arrays = max(1, len(specs))
        if options.transport != "auto":
            return
        fixed = [s for s in specs if not getattr(s, "is_moving", False)]  # moving: learn()
        step_bytes = step_slot_bytes(math.prod(s.shape) * s.dtype.itemsize for s in fixed)
        here = hosts.count(this_host()) if by_node(options) and hosts else 1
        self.size(step_bytes, options.buffer_nb, options.shm_pool_mib, here)

    def allowed(self) -> int:
        """The budget, less what memory pressure takes from it (looked at every
        :data:`CHECK_S`, once it has a budget)."""
        now = time.monotonic()
        if self.budget and now - self._checked >= CHECK_S:
            self._checked = now
            try:
                info = meminfo()
            except OSError:
                return self._cap
            cap = max(0, min(self.budget, self.held + room(info, _cgroup_room())))
            if cap < self.budget and self.shrunk is None:
                self.shrunk = (
                    f"memory is short (MemAvailable {info.get('MemAvailable', 0) >> 20} MiB of "
                    f"{info.get('MemTotal', 0) >> 20} MiB): the shared-memory pool shrinks from "
                    f"{self.budget >> 20} to {cap >> 20} MiB"
                )
                logger.warning("deisa bridge: %s", self.shrunk)
            self._cap = cap
        return self._cap

    def grant(self, nbytes: int) -> bool:
        """Count a slot of ``nbytes`` as warm, if the budget allows it."""
        with self._lock:
            if self.held + nbytes > self.allowed():
                return False
            self.held += nbytes
            self.peak = max(self.peak, self.held)
            return True

    def made(self, kind: str) -> None:
        """Count a warm slot made of ``kind`` pages."""
        with self._lock:
            self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.held -= nbytes

    def over(self) -> int:
        """Bytes of warm slots past what is allowed now (to give back)."""
        with self._lock:
            return max(0, self.held - self.allowed())

    def fell_back(self, worker: str, nbytes: int, slots: int) -> None:
        """Count a block of ``nbytes`` that goes by TCP to ``worker``, on this node, its ring
        of ``slots`` slots (:func:`.ring_size.ring_slots`) all held; warn the first time."""
        with self._lock:
            self.fallbacks += 1
            first = self.fallbacks == 1
        if first:
            logger.warning(
                "deisa bridge: a block of %d bytes goes by TCP to worker %s, on this node: its "
                "%d shared-memory slots are all held (more steps waiting than buffer_nb and the "
                "analytics' read-ahead allow); counted in Bridge.shm_pool['fallbacks'] and the "
                "run's totals", nbytes, worker, slots,
            )  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """The pool in figures: budget, peak and held MiB, its pages, whether it shrank, the
        blocks that went by TCP for want of a slot (``fallbacks``)."""
        return {
            "budget_mib": self.budget / 2**20,
            "peak_mib": self.peak / 2**20,
            "pages": sorted(self.kinds),
            "shrunk": self.shrunk,
            "fallbacks": self.fallbacks,
        }


def pool_totals(summaries: Iterable[dict[str, Any]]) -> dict[str, int]:
    """The ranks' pools (:meth:`SlotPool.summary` each) in whole figures, for the scheduler's
    totals: ``peak KiB``, ``budget KiB``, ``ranks``, ``ranks shrunk``, ``ranks with <pages>``,
    and ``fallbacks`` (blocks by TCP for want of a slot, pool or not) where there were some;
    empty without a pool or a fallback."""
    summaries = [s for s in summaries if s]
    fallbacks = sum(s.get("fallbacks", 0) for s in summaries)
    pools = [s for s in summaries if s.get("budget_mib")]
    if not pools:
        return {"fallbacks": fallbacks} if fallbacks else {}
    totals = {
        "peak KiB": round(1024 * sum(s["peak_mib"] for s in pools)),
        "budget KiB": round(1024 * sum(s["budget_mib"] for s in pools)),
        "ranks": len(pools),
        "ranks shrunk": sum(1 for s in pools if s.get("shrunk")),
    }
    for pages in sorted({p for s in pools for p in s["pages"]}):
        totals[f"ranks with {pages}"] = sum(1 for s in pools if pages in s["pages"])
    if fallbacks:
        totals["fallbacks"] = fallbacks
    return totals
