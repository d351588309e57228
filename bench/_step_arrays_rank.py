"""One rank of ``bench.step_arrays`` (run under mpirun): one case's steps of several arrays.

Writes ``<out>/rank-<r>.json``: per step (after :data:`SKIP` unreported ones) the time of the
whole step's publishes (``with bridge.step(t)``, every array of the case), the rank's memcpy of
the same bytes into buffers of its own (timed in the middle of each step's compute), each also
as the main thread's CPU time (``time.thread_time``: what a loaded machine's waits for a core
leave out), and at the
end the blocks that went by shared memory and by TCP (``Bridge.shm_pool``), the exchanges, and
with ``--profile`` rank 0's cProfile of its publishes (the functions taking the most time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import pstats
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

SKIP = 2
"""Steps left out of the figures: the connection and the first slots."""


class SlotPaths(logging.Handler):
    """The transport's debug lines: how each block found its slot (prepared, given back, fresh)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.paths: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        path = getattr(record, "deisa_slot", None)
        if path is not None:
            self.paths[path] = self.paths.get(path, 0) + 1


class Registrations(logging.Handler):
    """Rank 0's registrar's debug lines: (publications registered together, seconds) each."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.waves: list[tuple[int, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        wave = getattr(record, "deisa_registrations", None)
        if wave is not None:
            self.waves.append(wave)


def arrays(case: str, args: argparse.Namespace, rank: int, size: int) -> dict[str, Any]:
    """``{name: (spec, data)}`` of ``case`` for this rank."""
    from deisa import ArraySpec

    rng = np.random.default_rng(rank)

    def fixed(n: int) -> tuple[Any, np.ndarray]:  # 1-D float64 blocks, one per rank
        return ArraySpec("float64", (n * size,), (n * rank,), (n,)), rng.random(n)

    many = int(args.array_kib * 1024 // 8)
    if case == "many":
        return {f"a{i}": fixed(many) for i in range(args.arrays)}
    if case == "one":
        return {"a0": fixed(many * args.arrays), "tick": fixed(1)}
    if case in ("big-zip", "big-items"):
        big = {"a0": fixed(int(args.big_mib * 2**20 // 8))}
        return big if case == "big-items" else {**big, "tick": fixed(1)}
    if case == "particles":
        n = args.particles
        return {
            f"p{i}": (ArraySpec.moving("float64", 1, joined_axis=0), rng.random(n))
            for i in range(args.components)
        }
    if case == "particles-fixed":
        return {f"p{i}": fixed(args.particles) for i in range(args.components)}
    raise ValueError(f"unknown case {case!r}")


def busy(seconds: float, data: list[np.ndarray], into: list[np.ndarray]) -> tuple[float, float]:
    """Keep the core busy ``seconds`` (a small stencil), with one copy of ``data`` into
    ``into`` half-way, timed: that copy's seconds, wall-clock and on this thread's CPU."""
    t0 = time.perf_counter()
    field, copy, cpu = np.ones(32768), None, 0.0
    while (now := time.perf_counter()) - t0 < seconds or copy is None:
        if copy is None and now - t0 >= seconds / 2:
            c0, u0 = time.perf_counter(), time.thread_time()
            for source, target in zip(data, into, strict=True):
                np.copyto(target, source)
            copy, cpu = time.perf_counter() - c0, time.thread_time() - u0
        field[1:-1] = 0.5 * field[1:-1] + 0.25 * (field[2:] + field[:-2])
    return copy, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scheduler_file")
    parser.add_argument("--case", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compute-ms", type=float, default=50.0)
    parser.add_argument("--arrays", type=int, default=20)
    parser.add_argument("--array-kib", type=float, default=512)
    parser.add_argument("--big-mib", type=float, default=64)
    parser.add_argument("--particles", type=int, default=10**6)
    parser.add_argument("--components", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    named = arrays(args.case, args, rank, size)
    data = [d for _, d in named.values()]
    into = [d.copy() for d in data]

    from deisa import Bridge

    registrations = Registrations()
    registrar = logging.getLogger("deisa.bridge.registration.registrar")
    registrar.addHandler(registrations)
    registrar.setLevel(logging.DEBUG)

    paths = SlotPaths()
    transport = logging.getLogger("deisa.bridge.shm.transport")
    transport.addHandler(paths)
    transport.setLevel(logging.DEBUG)

    bridge = Bridge(args.scheduler_file, {n: s for n, (s, _) in named.items()}, mode="async",
                    connect_timeout=300)  # fmt: skip
    profiler = cProfile.Profile() if args.profile and rank == 0 else None
    publish, memcpy, publish_cpu, memcpy_cpu = [], [], [], []
    for step in range(args.steps + SKIP):
        copy, copy_cpu = busy(args.compute_ms / 1000, data, into)
        if profiler is not None and step >= SKIP:
            profiler.enable()
        t0, u0 = time.perf_counter(), time.thread_time()
        with bridge.step(step) as s:
            for name, (_, block) in named.items():
                s.publish(name, block)
        took, took_cpu = time.perf_counter() - t0, time.thread_time() - u0
        if profiler is not None:
            profiler.disable()
        if step >= SKIP:
            publish.append(took)
            memcpy.append(copy)
            publish_cpu.append(took_cpu)
            memcpy_cpu.append(copy_cpu)
    bridge.flush()
    per_step: dict[int, list[float]] = {}  # step: [copy, wait for room, other exchanges] s
    for t in bridge.timings:
        if t.step >= SKIP:
            spent = per_step.setdefault(t.step, [0.0, 0.0, 0.0])
            spent[0] += t.copy_s
            spent[1] += t.wait_s
            spent[2] += t.sync_s - t.wait_s
    pool, transport, exchanges = bridge.shm_pool, bridge.transport, bridge.exchanges
    bridge.close()
    report = {
        "rank": rank, "case": args.case, "arrays": len(data),
        "nbytes": sum(d.nbytes for d in data), "publish_s": publish, "memcpy_s": memcpy,
        "publish_cpu_s": publish_cpu, "memcpy_cpu_s": memcpy_cpu,
        "pool": pool, "transport": transport, "exchanges": exchanges,
        "steps": args.steps + SKIP, "registrations": registrations.waves,
        "slot_paths": paths.paths,
        "spent_s": [per_step[t] for t in sorted(per_step)],
    }  # fmt: skip
    if profiler is not None:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text).sort_stats("tottime")
        stats.print_stats(25)
        stats.print_callers(
            "acquire|pwrite|memfd_create|threading.py:.*\\(wait\\)"
        )  # who waits, who writes fresh slots
        report["profile"] = text.getvalue()
    (args.out / f"rank-{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
