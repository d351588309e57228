"""``python -m bench.bandwidth --protocol ucx``: UCX beside plain TCP and the Bridge's shared
memory, side by side, with the CPU each side spent."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .._common import (
    PINS,
    GiB,
    MiB,
    finish,
    loadavg,
    local_cluster,
    median,
    table,
)

os.environ.update(PINS)

import numpy as np

from .lanes import cpu_s, time_scatter_in_turns

# -- UCX against TCP and shared memory (--protocol ucx) ------------------------------------

UCX_PATHS = ("dask scatter", "deisa send", "deisa publish")
IDLE_S = 5.0
"""Seconds over which the idle CPU of each cluster's worker is measured (its scheduler runs
in this process, with the other's)."""
SHM = "shared memory"


def lanes(protocol: str) -> dict[str, tuple[str, str]]:
    """What ``--protocol`` compares: ``{lane: (cluster protocol, Bridge transport)}``. tcp and
    ``protocol`` send the Bridge's blocks over the Dask connection (``transport="tcp"``, whatever
    its scheme); shared memory is the tcp cluster's, with the Bridge's default
    ``transport="auto"`` (the worker is on this node)."""
    return {"tcp": ("tcp", "tcp"), protocol: (protocol, "tcp"), SHM: ("tcp", "auto")}


def time_protocols(
    blocks: dict[int, np.ndarray], repeat: int, workdir: Path, protocol: str
) -> dict[str, Any]:
    """Every path of :data:`UCX_PATHS` over each lane of :func:`lanes` (one cluster of one
    worker per protocol, plain, no TLS; ``dask scatter`` has no shared-memory lane), the lanes
    taking turns at every repetition (same block, same load); also the CPU of the sender and of
    the worker per ``deisa publish``, and each cluster's worker CPU while idle (:data:`IDLE_S`
    seconds, nothing sent). Samples are keyed ``(path, lane, bytes)``; ``info`` holds the idle
    CPU shares and the transport each Bridge reported."""
    from distributed import Client
    from mpi4py import MPI

    from deisa import Adapter, ArraySpec, Bridge

    samples: dict[tuple[str, str, int], list[float]] = {}
    info: dict[str, Any] = {}
    ways = lanes(protocol)
    protocols = ("tcp", protocol)

    def add(path: str, lane: str, size: int, value: float) -> None:
        samples.setdefault((path, lane, size), []).append(value)

    def order(names: tuple[str, ...], r: int) -> tuple[str, ...]:
        return names if r % 2 == 0 else names[::-1]

    with contextlib.ExitStack() as stack:
        clusters = {p: stack.enter_context(local_cluster(1, protocol=p)) for p in protocols}
        clients = {p: stack.enter_context(Client(c)) for p, c in clusters.items()}
        addresses = {p: c.scheduler.address for p, c in clusters.items()}
        info["addresses"] = addresses
        workers = {p: next(iter(c.nthreads())) for p, c in clients.items()}
        pids = {p: next(iter(c.run(os.getpid).values())) for p, c in clients.items()}
        time.sleep(1.0)  # the start-up's work done
        before = {p: cpu_s(pids[p]) for p in protocols}
        time.sleep(IDLE_S)
        for p in protocols:
            info[f"idle worker cpu share {p}"] = (cpu_s(pids[p]) - before[p]) / IDLE_S
        time_scatter_in_turns(clients, workers, blocks, repeat, lambda r: order(protocols, r), add)
        print("  deisa publish ...", flush=True)
        adapters = {p: Adapter(c, timeout=60) for p, c in clients.items()}
        for size, block in blocks.items():
            name = f"b{size}"
            field = block.reshape(1, -1)
            spec = ArraySpec("float64", global_shape=field.shape, start=(0, 0), shape=field.shape)
            arrays = {lane: f"{name}_{lane.replace(' ', '_')}" for lane in ways}
            bridges = {}
            for lane, (proto, transport) in ways.items():
                scheduler_file = workdir / f"scheduler-{proto}.json"
                scheduler_file.write_text(json.dumps({"address": addresses[proto]}))
                bridges[lane] = Bridge(
                    str(scheduler_file), {arrays[lane]: spec},
                    comm=MPI.COMM_SELF, mode="sync", transport=transport,
                )  # fmt: skip
            try:
                descriptors = {lane: adapters[ways[lane][0]][arrays[lane]] for lane in ways}
                for step in range(repeat + 1):
                    for lane in order(tuple(ways), step):
                        pid = pids[ways[lane][0]]
                        here, there = time.process_time(), cpu_s(pid)
                        bridges[lane].publish(arrays[lane], field, step)
                        if step:  # the first is a warm-up
                            add("sender cpu", lane, size, time.process_time() - here)
                            add("receiver cpu", lane, size, cpu_s(pid) - there)
                        descriptors[lane][step, :, :]  # take it: the worker's memory is freed
                info[f"transport {size}"] = {lane: b.transport for lane, b in bridges.items()}
            finally:
                for bridge in bridges.values():
                    bridge.close()
            for lane, bridge in bridges.items():
                for t in bridge.timings[1:]:
                    add("deisa send", lane, size, t.send_s)
                    add("deisa publish", lane, size, t.send_s + t.sync_s)
    return {"samples": samples, "info": info}


def protocol_records(samples: dict[tuple[str, str, int], list[float]]) -> list[dict[str, Any]]:
    """One record per (path, lane, block size): its samples, their median, and the bandwidth
    for the transfer paths."""
    records = []
    for (path, lane, size), seconds in samples.items():
        record: dict[str, Any] = {"path": path, "lane": lane, "block_bytes": size,
                                  "seconds": seconds, "median_s": median(seconds)}  # fmt: skip
        if path in UCX_PATHS:
            record["gib_per_s"] = size / GiB / median(seconds)
            record["best_gib_per_s"] = size / GiB / min(seconds)
        records.append(record)
    return records


def main_protocol(args: argparse.Namespace) -> int:
    """``--protocol ucx``: UCX against plain TCP and the Bridge's shared memory, side by side;
    writes ``bandwidth_<protocol>.json``. No target: the numbers say whether it is worth it."""
    from deisa.launcher.ucx import UCX_INSTALL, UCX_MODULE, ucx_available

    if not ucx_available():  # distributed's own 'ucx' is a stub that warns and fails
        print(
            f"--protocol {args.protocol}: no module {UCX_MODULE!r}; {UCX_INSTALL}", file=sys.stderr
        )
        return 2
    sizes = [s * MiB for s in args.sizes]
    blocks = {s: np.random.default_rng(0).random(s // 8) for s in sizes}
    load_before = loadavg()
    ucx_env = {k: v for k, v in os.environ.items() if k.startswith(("UCX_", "UCXPY_"))}
    print(f"{args.protocol} against tcp and shared memory (no TLS), one block to one worker, "
          f"taking turns: median (best) of {args.repeat}; load {load_before}; "
          f"{ucx_env or 'no UCX_ variable'}", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        result = time_protocols(blocks, args.repeat, Path(tmp), args.protocol)
    load_after = loadavg()
    records = protocol_records(result["samples"])

    def find(path: str, lane: str, size: int) -> dict[str, Any] | None:
        return next((r for r in records if (r["path"], r["lane"], r["block_bytes"]) ==
                     (path, lane, size)), None)  # fmt: skip

    rows = []
    for path in UCX_PATHS:
        measured = [lane for lane in lanes(args.protocol) if find(path, lane, sizes[0])]
        for lane in measured:
            row: list[Any] = [path, lane]
            for s in sizes:
                r = find(path, lane, s)
                assert r is not None
                row.append(f"{r['gib_per_s']:.2f} ({r['best_gib_per_s']:.2f}) GiB/s")
            rows.append(row)
        for lane in measured[1:]:
            ratios = []
            for s in sizes:
                ours, tcp = find(path, lane, s), find(path, "tcp", s)
                assert ours is not None and tcp is not None
                ratios.append(f"{100 * ours['gib_per_s'] / tcp['gib_per_s']:.0f} %")
            rows.append([path, f"{lane} / tcp", *ratios])
    print(table(["path", "lane", *[f"{s // MiB} MiB" for s in sizes]], rows))
    for s in sizes:
        cpu = []
        for lane in lanes(args.protocol):
            sender, worker = find("sender cpu", lane, s), find("receiver cpu", lane, s)
            assert sender is not None and worker is not None
            cpu.append(f"{lane} {1e3 * sender['median_s']:.1f} / {1e3 * worker['median_s']:.1f}")
        print(f"{s // MiB} MiB: deisa publish CPU ms per block, sender / worker: {', '.join(cpu)}")
    info = result["info"]
    idle = [f"{p} {100 * info[f'idle worker cpu share {p}']:.0f} %" for p in ("tcp", args.protocol)]
    print(f"idle worker CPU over {IDLE_S:.0f} s, share of a core: {', '.join(idle)}")
    print(f"the Bridges' transports: {info[f'transport {sizes[-1]}']}")
    print(f"load {load_before} before, {load_after} after")
    import distributed

    info["distributed"] = distributed.__version__
    info["ucx environment"] = ucx_env
    return finish(
        args.out, f"bandwidth_{args.protocol}", [], repeat=args.repeat,
        load_before=load_before, load_after=load_after, records=records, info=info,
    )  # fmt: skip
