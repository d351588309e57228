"""Asynchronous publish against a memcpy of the same block, with N MPI ranks (issue #24).

    python -m bench.publish --ranks 4 --sizes 16 64 --out results/     # ~2 minutes on 2 cores
    python -m bench.publish --ranks 1 --sizes 16 64 --deisa /tmp/base  # another checkout's deisa

``--ranks`` MPI ranks (``mpirun --oversubscribe``) each hold a block of ``--sizes`` MiB (float64)
and loop ``--steps`` times over: a compute of ``--compute`` passes over the block (``np.add`` in
place, memory-bound like a stencil), a ``np.copyto`` of the block into a preallocated array (the
*memcpy*, timed under the same load), and ``Bridge.publish`` of the block in ``mode="async"``
(timed around the call; ``max_in_flight`` 2, ``buffer_nb`` 2). The analytics is this process:
an :class:`~deisa.Adapter` that takes every step and drops it, on a ``LocalCluster`` of one
worker process, which preloads ``deisa.worker`` as ``deisa-run``'s workers do
(``--no-worker-preload``: not; the worker is this checkout's even with ``--deisa``). Steps 0
and 1 are left out (the background connection).

Per size: the median publish and memcpy over every rank and step, the median of what the
exchanges took inside publish (``sync_s - wait_s``: the exchange of the previous publish
completed, and this one's posted) and of the flow-control waits (``wait_s``), and the exchanges
made, and the share of rank 0's publications registered early, on the ranks' "sent" notices
rather than at the next exchange (``registered early``). Target (issue #24): median publish
<= 2.5 x memcpy + 2 ms. ``--deisa DIR`` runs the ranks
with ``DIR``'s ``deisa`` package (e.g. ``git worktree add /tmp/base <commit>``), for before and
after figures taken alternately. Writes ``publish.json``.

``--tls``: every size runs twice per ``--repeats``, over plain TCP and over TLS (a cluster
speaking ``tls://`` only, the ranks and the Adapter given fresh credentials through Dask's
config, as ``deisa-run`` gives them), the two taking turns at going first; the table puts them
side by side with their ratio, and the target becomes: TLS costs <= 15 % of the median publish
(issue #33), besides the memcpy bound for each. Writes ``publish_tls.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import (
    PINS,
    TLSFiles,
    add_worker_preload_option,
    child_env,
    finish,
    loadavg,
    local_cluster,
    median,
    table,
    tls_credentials,
)

os.environ.update(PINS)

RANK = r"""
import json, sys, time
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge

scheduler_file, out, mib, steps, passes = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
cols = 1024
rows = mib * 2**20 // (8 * cols)
spec = ArraySpec("float64", global_shape=(rows * size, cols), start=(rows * rank, 0),
                 shape=(rows, cols))
field = np.random.default_rng(rank).random((rows, cols))
target = np.empty_like(field)
np.copyto(target, field)
publish, memcpy, step_s = [], [], []
bridge = Bridge(scheduler_file, {"field": spec}, mode="async", max_in_flight=2, buffer_nb=2,
                connect_timeout=300)
with bridge:
    for step in range(steps):
        ts = time.perf_counter()
        for _ in range(passes):
            np.add(field, 1e-9, out=field)
        t0 = time.perf_counter()
        np.copyto(target, field)
        t1 = time.perf_counter()
        bridge.publish("field", field, step)
        t2 = time.perf_counter()
        memcpy.append(t1 - t0)
        publish.append(t2 - t1)
        step_s.append(t2 - ts)
    t3 = time.perf_counter()
timings = bridge.timings
# rank 0: publications registered on the ranks' "sent" notices, before their exchange (private,
# a diagnostic: None where this Bridge has no such count)
early = getattr(getattr(getattr(bridge, "_async", None), "early", None), "early", None)
json.dump({
    "rank": rank, "publish": publish, "memcpy": memcpy, "step": step_s,
    "close_s": time.perf_counter() - t3,
    "exchange": [t.sync_s - t.wait_s for t in timings], "wait": [t.wait_s for t in timings],
    "copy": [t.copy_s for t in timings], "exchanges": bridge.exchanges, "early": early,
}, open(f"{out}/rank-{rank}.json", "w"))
"""

SKIP = 2  # steps left out: the background connection


def run_size(
    ranks: int,
    mib: int,
    steps: int,
    passes: int,
    deisa: Path | None,
    workdir: Path,
    tls: TLSFiles | None = None,
    worker_preload: bool = True,
) -> dict[str, Any]:
    """One run of the ranks at ``mib`` MiB/rank; every rank's per-step lists. With ``tls``,
    the cluster speaks ``tls://`` only and the ranks and the Adapter use those credentials;
    its worker preloads ``deisa.worker`` unless ``worker_preload`` is false."""
    import dask
    from distributed import Client

    from deisa import Adapter

    out = Path(tempfile.mkdtemp(prefix=f"out-{mib}-", dir=workdir))
    script = workdir / "rank.py"
    script.write_text(RANK)
    env = child_env(**(tls.env() if tls is not None else {}))
    if deisa is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(deisa), env["PYTHONPATH"]))
    security = tls.security() if tls is not None else None
    with (
        local_cluster(1, security, worker_preload=worker_preload) as cluster,
        Client(cluster, security=security) as client,
        dask.config.set(tls.config() if tls is not None else {}),
    ):  # fmt: skip
        scheduler_file = out / "scheduler.json"
        scheduler_file.write_text(json.dumps({"address": cluster.scheduler.address}))
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks), sys.executable, str(script),
               str(scheduler_file), str(out), str(mib), str(steps), str(passes)]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
        taken = sum(1 for _ in Adapter(client, timeout=300)["field"].items())
        _, err = proc.communicate(timeout=900)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the ranks failed ({proc.returncode}): {err[-2000:]}")
    per_rank = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(ranks)]
    protocol = "tls" if tls is not None else "tcp"
    return {"mib": mib, "protocol": protocol, "wall_s": wall, "steps_taken": taken,
            "ranks": per_rank}  # fmt: skip


def summarize(*runs: dict[str, Any]) -> dict[str, float]:
    """Medians over every rank and step (from step ``SKIP``) of ``runs``, pooled."""
    ranks = [rank for run in runs for rank in run["ranks"]]

    def pooled(key: str) -> list[float]:
        return [v for rank in ranks for v in rank.get(key, [])[SKIP:]]

    return {
        "publish_ms": 1e3 * median(pooled("publish")),
        "memcpy_ms": 1e3 * median(pooled("memcpy")),
        "exchange_ms": 1e3 * median(pooled("exchange")),
        "wait_ms": 1e3 * median(pooled("wait")),
        "step_ms": 1e3 * median(pooled("step")),
        "worst_publish_ms": 1e3 * max(pooled("publish")),
        "exchanges_per_publish": median([r["exchanges"] / len(r["publish"]) for r in ranks]),
        "wall_s": median([run["wall_s"] for run in runs]),
        "early_fraction": early_fraction(ranks),
    }


def early_fraction(ranks: list[dict[str, Any]]) -> float:
    """Of rank 0's publications, the fraction registered on notices (NaN: not counted)."""
    roots = [r for r in ranks if r["rank"] == 0 and r.get("early") is not None]
    if not roots:
        return float("nan")
    return sum(r["early"] for r in roots) / sum(len(r["publish"]) for r in roots)


def row(mib: int, protocol: str, s: dict[str, float]) -> list[Any]:
    bound = 2.5 * s["memcpy_ms"] + 2
    return [
        mib, protocol, f"{s['publish_ms']:.2f}", f"{s['memcpy_ms']:.2f}", f"{bound:.2f}",
        f"{s['exchange_ms']:.2f}", f"{s['wait_ms']:.2f}", f"{s['step_ms']:.1f}",
        f"{s['worst_publish_ms']:.1f}", f"{s['exchanges_per_publish']:.2f}",
        f"{100 * s['early_fraction']:.0f} %", f"{s['wall_s']:.1f}",
    ]  # fmt: skip


HEADERS = ["MiB/rank", "protocol", "publish ms", "memcpy ms", "2.5x memcpy + 2", "exchange ms",
           "wait ms", "step ms", "worst publish ms", "exchanges/publish", "registered early",
           "wall s"]  # fmt: skip


def memcpy_target(mib: int, ranks: int, s: dict[str, float], label: str = "") -> Any:
    bound = 2.5 * s["memcpy_ms"] + 2
    return (
        f"median publish <= 2.5x memcpy + 2 ms at {mib} MiB/rank, {ranks} ranks{label}",
        s["publish_ms"] <= bound,
        f"{s['publish_ms']:.2f} ms against {bound:.2f} ms",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64], help="MiB per rank")
    parser.add_argument("--steps", type=int, default=22)
    parser.add_argument("--compute", type=int, default=40, help="passes over the block per step")
    parser.add_argument("--repeats", type=int, default=1, help="runs per size (and protocol)")
    parser.add_argument("--quick", action="store_true", help="--steps 10 --sizes 16")
    parser.add_argument("--deisa", type=Path, default=None, help="checkout whose deisa to run")
    parser.add_argument(
        "--tls", action="store_true", help="TLS against plain TCP (writes publish_tls.json)"
    )
    add_worker_preload_option(parser)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.sizes = 10, [16]
    args.out.mkdir(parents=True, exist_ok=True)
    where = str(args.deisa or "this checkout")
    load_before = loadavg()
    print(f"async publish, {args.ranks} ranks, deisa from {where}, median over ranks and "
          f"steps {SKIP}..{args.steps - 1}, {args.repeats} run(s) each; load {load_before}",
          flush=True)  # fmt: skip
    if args.tls:
        return main_tls(args, where, load_before)
    runs, rows, targets = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for mib in args.sizes:
            size_runs = []
            for _ in range(args.repeats):
                run = run_size(args.ranks, mib, args.steps, args.compute, args.deisa, Path(tmp),
                               worker_preload=args.worker_preload)  # fmt: skip
                run["summary"] = summarize(run)
                size_runs.append(run)
            runs += size_runs
            s = summarize(*size_runs)
            rows.append(row(mib, "tcp", s))
            targets.append(memcpy_target(mib, args.ranks, s))
    print(table(HEADERS, rows))
    return finish(
        args.out, "publish", targets, ranks=args.ranks, steps=args.steps,
        compute=args.compute, repeats=args.repeats, deisa=where, load_before=load_before,
        load=loadavg(), worker_preload=args.worker_preload, runs=runs,
    )  # fmt: skip


def main_tls(args: argparse.Namespace, where: str, load_before: list[float]) -> int:
    """Each size over TCP and over TLS, ``--repeats`` times, the two taking turns at going
    first; fresh credentials for the whole run."""
    runs: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    targets: list[Any] = []
    summaries: dict[str, Any] = {}
    with tls_credentials() as tls, tempfile.TemporaryDirectory() as tmp:
        credentials = {"import_s": tls.import_s, "generate_s": tls.generate_s}
        for mib in args.sizes:
            by_protocol: dict[str, list[dict[str, Any]]] = {"tcp": [], "tls": []}
            for r in range(args.repeats):
                for proto in ("tcp", "tls") if r % 2 == 0 else ("tls", "tcp"):
                    files = tls if proto == "tls" else None
                    run = run_size(args.ranks, mib, args.steps, args.compute, args.deisa,
                                   Path(tmp), files, args.worker_preload)  # fmt: skip
                    run["summary"] = summarize(run)
                    print(f"  {mib} MiB/rank {proto}: publish {run['summary']['publish_ms']:.2f} "
                          f"ms, step {run['summary']['step_ms']:.1f} ms", flush=True)  # fmt: skip
                    by_protocol[proto].append(run)
                    runs.append(run)
            s = {p: summarize(*by_protocol[p]) for p in by_protocol}
            summaries[str(mib)] = s
            for proto in ("tcp", "tls"):
                rows.append(row(mib, proto, s[proto]))
                targets.append(memcpy_target(mib, args.ranks, s[proto], f", {proto}"))
            ratio = {k: s["tls"][k] / s["tcp"][k] for k in ("publish_ms", "step_ms", "wall_s")}
            x = {k: f"{v:.2f}x" for k, v in ratio.items()}
            rows.append([mib, "tls / tcp", x["publish_ms"], "", "", "", "", x["step_ms"], "", "",
                         "", x["wall_s"]])  # fmt: skip
            targets.append((
                f"TLS costs <= 15% of the median publish at {mib} MiB/rank, {args.ranks} ranks",
                ratio["publish_ms"] <= 1.15,
                f"TLS {s['tls']['publish_ms']:.2f} ms against TCP {s['tcp']['publish_ms']:.2f} "
                f"ms ({ratio['publish_ms']:.2f}x); step {ratio['step_ms']:.2f}x",
            ))  # fmt: skip
    load_after = loadavg()
    print(table(HEADERS, rows))
    print(f"load {load_before} before, {load_after} after")
    return finish(
        args.out, "publish_tls", targets, ranks=args.ranks, steps=args.steps,
        compute=args.compute, repeats=args.repeats, deisa=where, credentials=credentials,
        load_before=load_before, load_after=load_after, worker_preload=args.worker_preload,
        summaries=summaries, runs=runs,
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
