"""Node-local transfer: shared memory against TCP, side by side, against the ranks' memcpy.

    python -m bench.node_local --out results/        # ~2 minutes; --quick: ~1 minute

One scheduler and ``--workers`` workers (real ``dask`` processes, loopback, plain TCP so that
the comparison is of the transports, not of TLS, preloading ``deisa.bridge.worker`` as
``deisa-run``'s do; ``--no-worker-preload``: without, rank 0 through distributed) serve every
run. For each block size (``--sizes``, MiB per rank) and each repetition, the two transports
take turns on the same cluster: ``--ranks`` MPI ranks each publish ``--steps`` blocks back to
back (``bench/_node_local_rank.py``), with ``transport="tcp"`` then ``transport="auto"``
(shared memory; ``--transports`` also takes ``auto-no-pool``: shared memory without its warm
pool), in ``--modes`` (``async`` by default). Two analytics are measured:

``taking``   an :class:`~deisa.Adapter` takes every step as it comes and sums it (the steps
             never pile up);
``behind``   the analytics starts once the simulation has published everything (every step
             waits on the workers until then; unbounded ``buffer_nb``).

Per run and rank: the sustained bandwidth (bytes of ``--steps`` blocks over the time from the
first ``publish`` until every step is registered, ``Bridge.flush``), against the same rank's
``np.copyto`` of its block; the median ``publish``, its CPU time on the rank's thread and how
often that thread was made to wait in a publish (``publishes preempted``: involuntary context
switches, another thread or process took its core); the resident memory the Bridge adds
(VmRSS after the publishes minus before ``import deisa``, and its anonymous and shared parts);
the CPU time of the rank from before ``import deisa`` until its first two publishes are
registered; and the transport the blocks took. Writes ``node_local.json``.

``--compute-ms`` puts that much busy compute on each rank before each publish (a solver's
iterations between two outputs), left out of the sustained bandwidth: the steady state a
simulation gives the ring, which back-to-back publishes on a small machine do not (the
targets are for back-to-back publishes; ``copy of memcpy`` shows a publish's copy against
the rank's ``np.copyto`` either way).

The yardstick is taken beside each burst, by the rank itself: copies of its block into a
buffer of its own right before and right after the burst, and with ``--compute-ms`` one copy
in the middle of each step's compute (the ``memcpy`` columns; ``memcpy_start_ms`` in the JSON
is the rank's copy at its start, which on a shared 2-core VM drifted from 13 to 22 GiB/s
between runs minutes apart).

Cores (:func:`bench._common.cores_plan`, as ``bench.insitu_vs_posthoc``): with at least
``ranks + 1`` cores the ranks run on the first ``ranks`` (``mpirun --bind-to none`` pinned
there) and this process, the scheduler and the workers on the others, as a job that places its
simulation and its analytics apart; ``--shared-cores``: everything on every core, the ranks
bound by ``mpirun``'s defaults. The output and the JSON (``cores``) say which.

Before the measured runs, one of 2 steps (the first size, transport, mode and analytics) warms
the cluster up, unreported (``--no-warm-up``: none): the cluster's first run pays the
analytics' and the workers' first steps, which otherwise count against whichever transport
comes first (issue 46: the first burst of the first run 2.2-2.4x its compute in wall time,
with or without the pool, on a loaded 2-core VM).

``--bursts N`` (2 by default) repeats the sustained publishes N times, ``--pause-s`` apart
(the analytics drains the last burst meanwhile): the second burst finds the rank's warm pool
of shared memory (``--pool-mib``: ``BridgeOptions.shm_pool_mib``, the default budget unless
given; ``--pool-blocks N``: N slots of a block, its header page each) populated. ``--ray``
runs Ray's object store beside them, on the same node, with the same blocks and bursts
(``bench/_ray_peer.py``, with ``--ray-python``: a Python that has ``ray``, e.g. a venv of its
own).

Targets (issue 35): shared memory sustains >= 80 % of memcpy at 16 and 64 MiB while the
analytics takes every step, and is no slower when the steps pile up; the rank's CPU to start
is <= 0.2 s. Issue 46: the second burst >= 80 % of memcpy; with ``--compute-ms``, the median
publish >= 80 % of memcpy's speed, its p90 <= 2 memcpys and the wall time <= 1.1x the compute
plus one memcpy per step; ahead of Ray's object store, burst for burst; the Bridge adds at
most one block + 10 MiB of private memory (``RssAnon``) at 16 MiB, the pool's shared pages
reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import (
    add_worker_preload_option,
    child_env,
    compile_bytecode,
    cores_plan,
    finish,
    loadavg,
    median,
    pinned_to,
    table,
)
from deisa.bridge.shm.transport import SLOT_PATHS
from deisa.wire.shm import slot_bytes

RANK = Path(__file__).with_name("_node_local_rank.py")
RAY = Path(__file__).with_name("_ray_peer.py")
TRANSPORTS = ("tcp", "auto", "auto-no-pool")
"""The variants: TCP, shared memory, shared memory without its warm pool (``shm_pool_mib=0``)."""
LABEL = {"tcp": "tcp", "auto": "shared memory", "auto-no-pool": "shared memory, no pool"}


def consume(client: Any, name: str, start: threading.Event, errors: list[str], taken: Path) -> None:
    """Take every step of ``name`` (once ``start`` is set) and sum it; write the count of steps
    taken so far in ``taken`` (the ranks wait for it between two bursts)."""
    from deisa import Adapter

    try:
        start.wait()
        for count, (_, field) in enumerate(Adapter(client, timeout=600)[name].items(), 1):
            field.sum().compute()
            del field
            taken.with_suffix(".tmp").write_text(str(count))
            taken.with_suffix(".tmp").replace(taken)
    except Exception as exc:  # reported with the run
        errors.append(f"{type(exc).__name__}: {exc}")


def run_once(
    cluster: Any, client: Any, args: argparse.Namespace, mib: float, transport: str, mode: str,
    analytics: str, run: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """One mpirun of the ranks; their reports."""
    name = f"field{run}"
    start, errors = threading.Event(), list[str]()
    with tempfile.TemporaryDirectory(prefix="deisa-node-local-") as out:
        taken = Path(out, "taken")
        reader = threading.Thread(
            target=consume, args=(client, name, start, errors, taken), daemon=True
        )
        reader.start()
        if analytics == "taking":
            start.set()
        apart = args.cores["simulation"]
        cmd = [
            "mpirun", "--oversubscribe", "-np", str(args.ranks),
            *(["--bind-to", "none"] if apart else []), sys.executable, str(RANK),
            str(cluster.scheduler_file), "--name", name, "--mib", str(mib), "--steps",
            str(args.steps), "--compute-ms", str(args.compute_ms), "--transport",
            transport.removesuffix("-no-pool"),
            "--mode", mode, "--out", out, "--bursts", str(args.bursts), "--pause-s",
            str(args.pause_s), "--pool-mib",
            "0" if transport.endswith("-no-pool") else
            str(pool_mib(args.pool_blocks, mib)) if args.pool_blocks else args.pool_mib,
            *(["--taken", str(taken)] if analytics == "taking" else []),
            *(["--max-in-flight", str(args.max_in_flight)] if args.max_in_flight else []),
        ]  # fmt: skip
        env = child_env()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                              preexec_fn=pinned_to(apart))  # fmt: skip
        start.set()
        reader.join(600)
        if done.returncode != 0 or errors:
            raise RuntimeError(f"run {run} failed: {done.stderr[-2000:]} {errors}")
        return [json.loads(p.read_text()) for p in sorted(Path(out).glob("rank-*.json"))]


def pool_mib(blocks: int, mib: float) -> float:
    """``shm_pool_mib`` for a pool of ``blocks`` slots of ``mib`` MiB blocks, each slot a block
    and its header page (:func:`deisa.wire.shm.slot_bytes`)."""
    return blocks * slot_bytes(int(mib * 2**20)) / 2**20


def summarize(reports: list[dict[str, Any]], burst: int = 0) -> dict[str, Any]:
    """The ranks' figures of one run (bandwidths in GiB/s, memory in MiB). Rank 0 talks to the
    scheduler (through the relay of a worker of its node, or with distributed without the
    workers' preload): the memory and start-up figures are rank 0's, then the most of the other
    ranks' (``nan`` with one rank, or a field this kernel's ``/proc/self/status`` lacks)."""
    gib, mib, nan = 2**30, 2**20, float("nan")
    reports = sorted(reports, key=lambda r: r["rank"])
    nbytes = reports[0]["nbytes"]
    bursts = [r["bursts"][burst] for r in reports]
    steps = len(bursts[0]["publish_s"])
    copies = [yardstick(b) for b in bursts]

    def grown(report: dict[str, Any], field: str) -> float:  # nan: a kernel without the field
        after, before = report["memory_after"].get(field), report["memory_before"].get(field)
        return nan if after is None or before is None else (after - before) / mib

    added = [grown(r, "VmRSS") for r in reports]
    anon = [grown(r, "RssAnon") for r in reports]
    cpu = [r["start_cpu_s"] for r in reports]
    return {
        "block_mib": nbytes / mib,
        "memcpy_gibs": median([nbytes / copy / gib for copy in copies]),
        "memcpy_ms": median([1000 * copy for copy in copies]),
        "memcpy_start_ms": median([1000 * r["memcpy_s"] for r in reports]),
        "memcpy_4k_ms": median([1000 * r.get("memcpy_4k_s", nan) for r in reports]),
        "sustained_gibs": median([steps * nbytes / b["sustained_s"] / gib for b in bursts]),
        "publish_ms": median([1000 * median(b["publish_s"]) for b in bursts]),
        "publish_p90_ms": median([1000 * p90(b["publish_s"]) for b in bursts]),
        "copy_ms": median([1000 * median(b["copy_s"]) for b in bursts]),
        "publish_cpu_ms": median([1000 * median(b.get("publish_cpu_s", [nan])) for b in bursts]),
        "preempted": median([sum(b.get("publish_preempted", [nan])) for b in bursts]),
        "wait_ms": median([1000 * median(b["wait_s"]) for b in bursts]),
        "wall_s": max(b["wall_s"] for b in bursts),
        "compute_s": max(b["compute_s"] for b in bursts),
        "pool_mib": reports[0]["pool"]["peak_mib"],
        "max_in_flight": reports[0]["max_in_flight"],
        "pool_pages": reports[0]["pool"]["pages"],
        "pool_shrunk": [r["pool"]["shrunk"] for r in reports if r["pool"]["shrunk"]],
        "rss_added_mib": added[0],
        "anon_added_mib": anon[0],
        "shmem_mib": reports[0]["memory_after"].get("RssShmem", nan) / mib,
        "start_cpu_s": cpu[0],
        "rss_added_others_mib": max(added[1:], default=nan),
        "anon_added_others_mib": max(anon[1:], default=nan),
        "start_cpu_others_s": max(cpu[1:], default=nan),
        "transports": sorted({r["transport"] for r in reports}),
        "slots": {path: sum(b["slots"].get(path, 0) for b in bursts) for path in SLOT_PATHS},
    }


def yardstick(burst: dict[str, Any]) -> float:
    """A burst's memcpy, in seconds: the median of the copies its rank (or Ray's driver) timed
    beside it, the ones paired with each step's compute where there are some."""
    return median(burst.get("yardstick_paired_s") or burst["yardstick_s"])


def p90(values: list[float]) -> float:
    return float(np.percentile(values, 90)) if values else float("nan")


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[16, 64], help="MiB per rank")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compute-ms", type=float, default=0.0,
                        help="busy compute of each rank before each publish (default: none, "
                             "back to back as the targets say)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["async"], choices=["async", "sync"])
    parser.add_argument("--quick", action="store_true", help="--repeat 1")
    parser.add_argument("--analytics", nargs="+", default=["taking", "behind"],
                        choices=["taking", "behind"])  # fmt: skip
    parser.add_argument("--transports", nargs="+", default=list(TRANSPORTS[:2]), choices=TRANSPORTS)
    parser.add_argument("--bursts", type=int, default=2)
    parser.add_argument("--pause-s", type=float, default=5.0,
                        help="between two bursts (the analytics drains the last)")  # fmt: skip
    parser.add_argument("--pool-mib", default="none",
                        help="shm_pool_mib of each rank (none: the Bridge's default)")  # fmt: skip
    parser.add_argument("--pool-blocks", type=int, default=0,
                        help="shm_pool_mib of each rank: this many slots of a block")  # fmt: skip
    parser.add_argument("--max-in-flight", type=int,
                        help="max_in_flight of each rank (default: the Bridge's)")  # fmt: skip
    parser.add_argument("--analytics-first", action="store_true",
                        help="an Adapter connects before the first run (with "
                             "--no-worker-preload: it installs the workers' plugin)")  # fmt: skip
    parser.add_argument("--shared-cores", action="store_true",
                        help="the ranks share every core with Dask and the analytics (default: "
                             "apart where there are at least ranks + 1 cores)")  # fmt: skip
    parser.add_argument("--ray", action="store_true", help="Ray's object store beside, per size")
    parser.add_argument("--ray-python", default="/tmp/bench-venv/bin/python")
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="no unreported first run (the cluster's cold start then counts "
                             "against the first transport)")  # fmt: skip
    add_worker_preload_option(parser)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.update(child_env())
    from deisa.launcher.dask_processes import DaskProcesses

    args.bytecode = compile_bytecode()
    args.cores = cores_plan(args.ranks, args.workers, shared=args.shared_cores)
    print(f"cores: {args.cores['description']}", flush=True)
    if args.cores["analytics"]:  # inherited by the scheduler, the workers and Ray
        os.sched_setaffinity(0, set(args.cores["analytics"]))
    load_before = loadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="deisa-bench-") as tmp:
        cluster = DaskProcesses.started(
            Path(tmp), args.workers, 300, bridge_preload=args.worker_preload
        )
        try:
            with cluster.client() as client:
                if args.analytics_first:  # as a user's analytics started before the simulation
                    from deisa import Adapter

                    Adapter(client)
                args.warm_up_s = warm_up(cluster, client, args) if args.warm_up else 0.0
                run = 1
                for mib in args.sizes:
                    for mode in args.modes:
                        for analytics in args.analytics:
                            for repeat in range(args.repeat):
                                for transport in args.transports:  # side by side, in turns
                                    reports = run_once(cluster, client, args, mib, transport,
                                                       mode, analytics, run)  # fmt: skip
                                    run += 1
                                    rows += [{"transport": LABEL[transport], "mode": mode,
                                              "analytics": analytics, "repeat": repeat,
                                              "burst": burst + 1, **summarize(reports, burst)}
                                             for burst in range(args.bursts)]  # fmt: skip
                                if args.ray and mode == "async" and analytics == "taking":
                                    rows += ray_rows(args, mib, repeat)
        finally:
            cluster.stop()
    return report(args, rows, load_before)


def warm_up(cluster: Any, client: Any, args: argparse.Namespace) -> float:
    """An unreported run of 2 steps, one burst, no compute, of the first size, transport, mode
    and analytics (the cluster's cold start); its wall time."""
    t0 = time.perf_counter()
    short = argparse.Namespace(**{**vars(args), "steps": 2, "bursts": 1, "compute_ms": 0.0})
    transport, mode, analytics = args.transports[0], args.modes[0], args.analytics[0]
    run_once(cluster, client, short, args.sizes[0], transport, mode, analytics, 0)
    return time.perf_counter() - t0


def ray_rows(args: argparse.Namespace, mib: float, repeat: int) -> list[dict[str, Any]]:
    """Ray's object store with the same blocks and bursts (``bench/_ray_peer.py``, run by
    ``--ray-python``): a row per burst, or one saying why it could not run."""
    nan = float("nan")
    with tempfile.TemporaryDirectory(prefix="deisa-ray-") as out:
        cmd = [
            args.ray_python, str(RAY), "--mib", str(mib), "--steps", str(args.steps),
            "--bursts", str(args.bursts), "--pause-s", str(args.pause_s), "--store-mib",
            str(int(max(1024, 3 * args.steps * mib))), "--out", f"{out}/ray.json",
        ]  # fmt: skip
        if args.cores["simulation"]:  # the driver where the ranks run, Ray's processes apart
            cmd += ["--driver-cores", *map(str, args.cores["simulation"])]
        try:
            done = subprocess.run(cmd, env=child_env(), capture_output=True, text=True,
                                  timeout=900)  # fmt: skip
            result = json.loads(Path(out, "ray.json").read_text())
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            why = f"{exc!r} {done.stderr[-500:] if 'done' in locals() else ''}"
            return [{"transport": "ray", "failed": why, "block_mib": mib, "repeat": repeat}]
    gib, nbytes = 2**30, result["nbytes"]
    rows = []
    for burst, figures in enumerate(result["bursts"]):
        steps, copy = len(figures["publish_s"]), yardstick(figures)
        rows.append({
            "transport": f"ray {result['ray']}", "mode": "async", "analytics": "taking",
            "repeat": repeat, "burst": burst + 1, "block_mib": nbytes / 2**20,
            "memcpy_gibs": nbytes / copy / gib,
            "memcpy_ms": 1000 * copy,
            "memcpy_start_ms": 1000 * result["memcpy_s"],
            "sustained_gibs": steps * nbytes / figures["sustained_s"] / gib,
            "publish_ms": 1000 * median(figures["publish_s"]),
            "publish_p90_ms": 1000 * p90(figures["publish_s"]),
            "transports": ["ray object store"], "slots": {}, "pool_mib": nan, "pool_pages": [],
            **{field: nan for field in FIELDS if field.endswith(("_mib", "_s")) or
               field in ("copy_ms", "wait_ms", "publish_cpu_ms", "preempted")},
        })  # fmt: skip
    return rows


FIELDS = (
    "memcpy_gibs", "memcpy_ms", "memcpy_start_ms", "sustained_gibs", "publish_ms",
    "publish_p90_ms", "copy_ms", "wait_ms", "publish_cpu_ms", "preempted", "rss_added_mib",
    "anon_added_mib", "shmem_mib", "start_cpu_s", "rss_added_others_mib",
    "anon_added_others_mib", "start_cpu_others_s", "wall_s", "compute_s", "pool_mib",
)  # fmt: skip
HEADERS = (
    "MiB", "mode", "analytics", "transport", "burst", "memcpy GiB/s", "sustained GiB/s",
    "of memcpy", "publish ms", "p90 ms", "copy ms", "copy of memcpy", "wait ms",
    "publish CPU ms", "publishes preempted",
    "rank 0 +RssAnon MiB", "rank 0 +RSS MiB", "others +RSS MiB", "rank 0 start CPU s",
    "others start CPU s", "pool MiB", "used", "slots: prepared/given back/fresh",
)  # fmt: skip
Key = tuple[float, str, str, str, int]


def report(args: argparse.Namespace, rows: list[dict[str, Any]], load_before: list[float]) -> int:
    """Print the table and the targets; write ``node_local.json``."""
    groups: dict[Key, list[dict[str, Any]]] = {}
    for row in rows:
        if "failed" in row:
            print(f"{row['transport']}, {row['block_mib']:g} MiB: failed: {row['failed']}")
            continue
        key = (row["block_mib"], row["mode"], row["analytics"], row["transport"], row["burst"])
        groups.setdefault(key, []).append(row)
    medians = {
        key: {field: median([r[field] for r in group]) for field in FIELDS}
        for key, group in groups.items()
    }
    print(table(HEADERS, [table_row(key, medians[key], group) for key, group in groups.items()]))
    return finish(args.out, "node_local", targets(args, medians), rows=rows, ranks=args.ranks,
                  workers=args.workers, steps=args.steps, compute_ms=args.compute_ms,
                  bursts=args.bursts, pause_s=args.pause_s, pool_mib=args.pool_mib,
                  pool_blocks=args.pool_blocks, max_in_flight=args.max_in_flight,
                  analytics_first=args.analytics_first,
                  warm_up_s=args.warm_up_s, worker_preload=args.worker_preload,
                  bytecode=args.bytecode, cores=args.cores["description"],
                  cores_separate=args.cores["separate"],
                  loadavg_before=load_before, loadavg_after=loadavg())  # fmt: skip


def table_row(key: Key, m: dict[str, float], group: list[dict[str, Any]]) -> list[str]:
    used = ",".join(sorted({t for r in group for t in r["transports"]}))
    placed = "/".join(str(sum(r["slots"].get(p, 0) for r in group)) for p in SLOT_PATHS)
    pages = ",".join(sorted({p for r in group for p in r["pool_pages"]}))
    return [
        f"{key[0]:g}", key[1], key[2], key[3], str(key[4]), f"{m['memcpy_gibs']:.2f}",
        f"{m['sustained_gibs']:.2f}", f"{100 * m['sustained_gibs'] / m['memcpy_gibs']:.0f} %",
        f"{m['publish_ms']:.1f}", f"{m['publish_p90_ms']:.1f}", f"{m['copy_ms']:.1f}",
        f"{100 * m['memcpy_ms'] / m['copy_ms']:.0f} %", f"{m['wait_ms']:.1f}",
        f"{m['publish_cpu_ms']:.1f}", f"{m['preempted']:.0f}",
        f"{m['anon_added_mib']:.0f}", f"{m['rss_added_mib']:.0f}",
        f"{m['rss_added_others_mib']:.0f}", f"{m['start_cpu_s']:.2f}",
        f"{m['start_cpu_others_s']:.2f}",
        f"{m['pool_mib']:.0f} ({pages})" if pages else "", used,
        placed if key[3].startswith("shared memory") else "",
    ]  # fmt: skip


def targets(
    args: argparse.Namespace, medians: dict[Key, dict[str, float]]
) -> list[tuple[str, bool | None, str]]:
    """Issue 35's targets on the first burst, issue 46's on the later ones and against Ray."""
    found: list[tuple[str, bool | None, str]] = []
    for (mib, mode, analytics, transport, burst), m in medians.items():
        if transport != "shared memory" or mode != "async":
            continue
        share = m["sustained_gibs"] / m["memcpy_gibs"]
        which = "first burst" if burst == 1 else f"burst {burst}"
        found.append((f"{mib:g} MiB, analytics {analytics}, {which}: shared memory >= 80 % of "
                      "memcpy", share >= 0.8, f"{100 * share:.0f} %"))  # fmt: skip
        rays = [v for k, v in medians.items() if k[3].startswith("ray") and k[0] == mib
                and k[4] == burst and analytics == "taking"]  # fmt: skip
        for ray in rays:
            theirs = ray["sustained_gibs"] / ray["memcpy_gibs"]
            figures = f"{100 * share:.0f} % vs {100 * theirs:.0f} %"
            found.append((f"{mib:g} MiB, {which}: ahead of Ray's object store (of memcpy)",
                          share > theirs, figures))  # fmt: skip
        if args.compute_ms and analytics == "taking":
            found += compute_targets(f"{mib:g} MiB, {which}", m, args.steps)
        if mib != 16 or analytics != "taking" or burst != 1:
            continue
        for who, anon, cpu in (
            ("rank 0", "anon_added_mib", "start_cpu_s"),
            ("other ranks", "anon_added_others_mib", "start_cpu_others_s"),
        ):
            if m[anon] != m[anon]:  # nan: one rank only
                continue
            found.append((f"16 MiB, {who}: the Bridge adds <= one block + 10 MiB of RssAnon",
                          m[anon] <= 16 + 10, f"+{m[anon]:.0f} MiB"))  # fmt: skip
            found.append((f"{who}: CPU time to start the Bridge <= 0.2 s", m[cpu] <= 0.2,
                          f"{m[cpu]:.2f} s"))  # fmt: skip
    return found


def compute_targets(what: str, m: dict[str, float], steps: int) -> list[tuple[str, bool, str]]:
    """With compute between publishes: the median publish, its p90, the wall time."""
    speed = m["memcpy_ms"] / m["publish_ms"]
    bound = m["compute_s"] + steps * m["memcpy_ms"] / 1000
    return [
        (f"{what}: median publish >= 80 % of memcpy's speed", speed >= 0.8,
         f"{100 * speed:.0f} %"),
        (f"{what}: p90 publish <= 2 memcpys", m["publish_p90_ms"] <= 2 * m["memcpy_ms"],
         f"{m['publish_p90_ms'] / m['memcpy_ms']:.2f}x"),
        (f"{what}: wall <= 1.1x compute + a memcpy per step", m["wall_s"] <= 1.1 * bound,
         f"{m['wall_s'] / bound:.2f}x"),
    ]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
