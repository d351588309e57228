"""Node-local transfer: shared memory against TCP, side by side, against the ranks' memcpy.

    python -m bench.node_local --out results/        # ~2 minutes; --quick: ~1 minute

One scheduler and ``--workers`` workers (real ``dask`` processes, loopback, plain TCP so that
the comparison is of the transports, not of TLS, preloading ``deisa.bridge.worker`` as
``deisa-run``'s do; ``--no-worker-preload``: without, rank 0 through distributed) serve every
run. For each block size (``--sizes``, MiB per rank) and each repetition, the two transports
take turns on the same cluster: ``--ranks`` MPI ranks each publish ``--steps`` blocks back to
back (``bench/_node_local_rank.py``), with ``transport="tcp"`` then ``transport="auto"``
(shared memory), in ``--modes`` (``async`` by default). Two analytics are measured:

``taking``   an :class:`~deisa.Adapter` takes every step as it comes and sums it (the steps
             never pile up);
``behind``   the analytics starts once the simulation has published everything (every step
             waits on the workers until then; unbounded ``buffer_nb``).

Per run and rank: the sustained bandwidth (bytes of ``--steps`` blocks over the time from the
first ``publish`` until every step is registered, ``Bridge.flush``), against the same rank's
``np.copyto`` of its block; the median ``publish``; the resident memory the Bridge adds
(VmRSS after the publishes minus before ``import deisa``, and its anonymous and shared parts);
the CPU time of the rank from before ``import deisa`` until its first two publishes are
registered; and the transport the blocks took. Writes ``node_local.json``.

``--compute-ms`` puts that much busy compute on each rank before each publish (a solver's
iterations between two outputs), left out of the sustained bandwidth: the steady state a
simulation gives the ring, which back-to-back publishes on a small machine do not (the
targets are for back-to-back publishes; ``copy of memcpy`` shows a publish's copy against
the rank's ``np.copyto`` either way).

Targets (issue 35): shared memory sustains >= 80 % of memcpy at 16 and 64 MiB while the
analytics takes every step, and is no slower when the steps pile up; the Bridge adds at most
one block + 10 MiB of VmRSS at 16 MiB; the rank's CPU to start is <= 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench._common import (
    add_worker_preload_option,
    child_env,
    compile_bytecode,
    finish,
    loadavg,
    median,
    table,
)
from deisa.bridge.transport import SLOT_PATHS

RANK = Path(__file__).with_name("_node_local_rank.py")
TRANSPORTS = ("tcp", "auto")
LABEL = {"tcp": "tcp", "auto": "shared memory"}


def consume(client: Any, name: str, start: threading.Event, errors: list[str]) -> None:
    """Take every step of ``name`` (once ``start`` is set) and sum it."""
    from deisa import Adapter

    try:
        start.wait()
        for _, field in Adapter(client, timeout=600)[name].items():
            field.sum().compute()
            del field
    except Exception as exc:  # reported with the run
        errors.append(f"{type(exc).__name__}: {exc}")


def run_once(
    cluster: Any, client: Any, args: argparse.Namespace, mib: float, transport: str, mode: str,
    analytics: str, run: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """One mpirun of the ranks; their reports."""
    name = f"field{run}"
    start, errors = threading.Event(), []
    reader = threading.Thread(target=consume, args=(client, name, start, errors), daemon=True)
    reader.start()
    if analytics == "taking":
        start.set()
    with tempfile.TemporaryDirectory(prefix="deisa-node-local-") as out:
        cmd = [
            "mpirun", "--oversubscribe", "-np", str(args.ranks), sys.executable, str(RANK),
            str(cluster.scheduler_file), "--name", name, "--mib", str(mib), "--steps",
            str(args.steps), "--compute-ms", str(args.compute_ms), "--transport", transport,
            "--mode", mode, "--out", out,
        ]  # fmt: skip
        env = child_env()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        start.set()
        reader.join(600)
        if done.returncode != 0 or errors:
            raise RuntimeError(f"run {run} failed: {done.stderr[-2000:]} {errors}")
        return [json.loads(p.read_text()) for p in sorted(Path(out).glob("rank-*.json"))]


def summarize(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' figures of one run (bandwidths in GiB/s, memory in MiB). Rank 0 talks to the
    scheduler (through the relay of a worker of its node, or with distributed without the
    workers' preload): the memory and start-up figures are rank 0's, then the most of the other
    ranks' (``nan`` with one rank, or a field this kernel's ``/proc/self/status`` lacks)."""
    gib, mib, nan = 2**30, 2**20, float("nan")
    reports = sorted(reports, key=lambda r: r["rank"])
    nbytes = reports[0]["nbytes"]
    steps = len(reports[0]["publish_s"])

    def grown(report: dict[str, Any], field: str) -> float:  # nan: a kernel without the field
        after, before = report["memory_after"].get(field), report["memory_before"].get(field)
        return nan if after is None or before is None else (after - before) / mib

    added = [grown(r, "VmRSS") for r in reports]
    anon = [grown(r, "RssAnon") for r in reports]
    cpu = [r["start_cpu_s"] for r in reports]
    return {
        "block_mib": nbytes / mib,
        "memcpy_gibs": median([nbytes / r["memcpy_s"] / gib for r in reports]),
        "memcpy_ms": median([1000 * r["memcpy_s"] for r in reports]),
        "sustained_gibs": median([steps * nbytes / r["sustained_s"] / gib for r in reports]),
        "publish_ms": median([1000 * median(r["publish_s"]) for r in reports]),
        "copy_ms": median([1000 * median(r["copy_s"]) for r in reports]),
        "wait_ms": median([1000 * median(r["wait_s"]) for r in reports]),
        "rss_added_mib": added[0],
        "anon_added_mib": anon[0],
        "shmem_mib": reports[0]["memory_after"].get("RssShmem", nan) / mib,
        "start_cpu_s": cpu[0],
        "rss_added_others_mib": max(added[1:], default=nan),
        "anon_added_others_mib": max(anon[1:], default=nan),
        "start_cpu_others_s": max(cpu[1:], default=nan),
        "transports": sorted({r["transport"] for r in reports}),
        "slots": {path: sum(r["slots"].get(path, 0) for r in reports) for path in SLOT_PATHS},
    }


def main(argv: list[str] | None = None) -> int:
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
    add_worker_preload_option(parser)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 1
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.update(child_env())
    from deisa.launcher.dask_processes import DaskProcesses

    args.bytecode = compile_bytecode()
    load_before = loadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="deisa-bench-") as tmp:
        cluster = DaskProcesses.started(
            Path(tmp), args.workers, 300, bridge_preload=args.worker_preload
        )
        try:
            with cluster.client() as client:
                run = 0
                for mib in args.sizes:
                    for mode in args.modes:
                        for analytics in ("taking", "behind"):
                            for repeat in range(args.repeat):
                                for transport in TRANSPORTS:  # side by side, taking turns
                                    reports = run_once(cluster, client, args, mib, transport,
                                                       mode, analytics, run)  # fmt: skip
                                    run += 1
                                    rows.append({"transport": LABEL[transport], "mode": mode,
                                                 "analytics": analytics, "repeat": repeat,
                                                 **summarize(reports)})  # fmt: skip
        finally:
            cluster.stop()
    return report(args, rows, load_before)


FIELDS = (
    "memcpy_gibs", "memcpy_ms", "sustained_gibs", "publish_ms", "copy_ms", "wait_ms",
    "rss_added_mib", "anon_added_mib", "shmem_mib", "start_cpu_s", "rss_added_others_mib",
    "anon_added_others_mib", "start_cpu_others_s",
)  # fmt: skip
HEADERS = (
    "MiB", "mode", "analytics", "transport", "memcpy GiB/s", "sustained GiB/s", "of memcpy",
    "publish ms", "copy ms", "copy of memcpy", "wait ms", "rank 0 +RSS MiB", "others +RSS MiB",
    "rank 0 start CPU s", "others start CPU s", "used", "slots: prepared/given back/fresh",
)  # fmt: skip


def report(args: argparse.Namespace, rows: list[dict[str, Any]], load_before: list[float]) -> int:
    """Print the table and the targets; write ``node_local.json``."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["block_mib"], row["mode"], row["analytics"], row["transport"])
        groups.setdefault(key, []).append(row)
    table_rows, medians = [], {}
    for key, group in groups.items():
        m = medians[key] = {field: median([r[field] for r in group]) for field in FIELDS}
        used = ",".join(sorted({t for r in group for t in r["transports"]}))
        placed = "/".join(str(sum(r["slots"][p] for r in group)) for p in SLOT_PATHS)
        table_rows.append([
            f"{key[0]:g}", key[1], key[2], key[3], f"{m['memcpy_gibs']:.2f}",
            f"{m['sustained_gibs']:.2f}", f"{100 * m['sustained_gibs'] / m['memcpy_gibs']:.0f} %",
            f"{m['publish_ms']:.1f}", f"{m['copy_ms']:.1f}",
            f"{100 * m['memcpy_ms'] / m['copy_ms']:.0f} %", f"{m['wait_ms']:.1f}",
            f"{m['rss_added_mib']:.0f}", f"{m['rss_added_others_mib']:.0f}",
            f"{m['start_cpu_s']:.2f}", f"{m['start_cpu_others_s']:.2f}", used,
            placed if key[3] == "shared memory" else "",
        ])  # fmt: skip
    print(table(HEADERS, table_rows))
    targets = []
    for (mib, mode, analytics, transport), m in medians.items():
        if transport != "shared memory" or mode != "async":
            continue
        share = m["sustained_gibs"] / m["memcpy_gibs"]
        targets.append((f"{mib:g} MiB, analytics {analytics}: shared memory >= 80 % of memcpy",
                        share >= 0.8, f"{100 * share:.0f} %"))  # fmt: skip
        if analytics == "behind" and (mib, mode, "taking", transport) in medians:
            taking = medians[mib, mode, "taking", transport]["sustained_gibs"]
            targets.append((f"{mib:g} MiB: no slower when the steps pile up (>= 90 % of taking)",
                            m["sustained_gibs"] >= 0.9 * taking,
                            f"{m['sustained_gibs']:.2f} vs {taking:.2f} GiB/s"))  # fmt: skip
        if mib != 16 or analytics != "taking":
            continue
        for who, rss, cpu in (
            ("rank 0", "rss_added_mib", "start_cpu_s"),
            ("other ranks", "rss_added_others_mib", "start_cpu_others_s"),
        ):
            if m[rss] != m[rss]:  # nan: one rank only
                continue
            targets.append((f"16 MiB, {who}: the Bridge adds <= one block + 10 MiB of VmRSS",
                            m[rss] <= 16 + 10, f"+{m[rss]:.0f} MiB"))  # fmt: skip
            targets.append((f"{who}: CPU time to start the Bridge <= 0.2 s", m[cpu] <= 0.2,
                            f"{m[cpu]:.2f} s"))  # fmt: skip
    return finish(args.out, "node_local", targets, rows=rows, ranks=args.ranks,
                  workers=args.workers, steps=args.steps, compute_ms=args.compute_ms,
                  worker_preload=args.worker_preload, bytecode=args.bytecode,
                  loadavg_before=load_before,
                  loadavg_after=loadavg())  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
