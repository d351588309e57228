"""What a contract saves: bytes sent and simulation time, whole field vs a quarter every 5th step.

The same MPI publisher (``bench/contract_ranks.py``: ranks on a 2 x N/2 grid, one block each,
a short sleep per step standing for the compute) runs twice against a fresh scheduler and
workers, with an analytics client taking every step it is sent:

``full``          no contract: every rank sends its block at every step;
``quarter/5``     ``require(region=<top-left quarter>, steps=5)``, set before the simulation
                  starts: only the ranks of that quarter send, one step in five.

Bytes come from the ranks' own ``Bridge.timings`` (what each sent), the simulation time is the
slowest rank's publishing loop (``flush`` included), received steps from the analytics. Run::

    python -m bench.contracts --out results/
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

from bench._common import PINS, REPO, MiB, child_env, finish, table, worker_preloads

os.environ.update(PINS)  # before numpy is imported, here and in the LocalCluster's workers

VARIANTS = ("full", "quarter/5")
STRIDE = 5


def run_one(
    variant: str, ranks: int, workers: int, block: tuple[int, int], steps: int, sleep: float,
    mode: str,
) -> dict[str, Any]:  # fmt: skip
    """One simulation run against a fresh LocalCluster; the bytes and times it took."""
    from distributed import Client, LocalCluster

    from deisa import Adapter
    from deisa.contract import Contract, plan

    px = 2 if ranks % 2 == 0 else 1
    py = ranks // px
    shape = (px * block[0], py * block[1])
    region = (slice(0, shape[0] // 2), slice(0, shape[1] // 2))
    chunks = ((block[0],) * px, (block[1],) * py)
    grid = tuple((r // py, r % py) for r in range(ranks))
    quarter = plan(Contract.build(region, STRIDE).resolved(shape), 0, chunks, grid).ranks or ()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, scheduler_port=0,
        dashboard_address=":0", preload=worker_preloads(),  # as deisa-run's workers
    ) as cluster, Client(cluster) as client:  # fmt: skip
        scheduler_file = Path(tmp) / "scheduler.json"
        scheduler_file.write_text(json.dumps({"address": cluster.scheduler_address}))
        adapter = Adapter(client, timeout=300)
        field = adapter["field"]
        required = threading.Thread(
            target=field.require,
            args=(region, STRIDE),
        )
        if variant != "full":
            required.start()  # waits for the array to open: set before the first step
            while "field" not in adapter.stats().get("contracts", {}).get("contracts", {}):
                time.sleep(0.05)
        out = Path(tmp) / "ranks"
        cmd = [
            "mpirun", "--oversubscribe", "-np", str(ranks), sys.executable,
            str(REPO / "bench" / "contract_ranks.py"), str(scheduler_file), str(out),
            "--nsteps", str(steps), "--mode", mode, "--block", *map(str, block),
            "--sleep", str(sleep),
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        received = 0
        received_bytes = 0
        for _, array in field.items():
            received += 1
            received_bytes += int(array.nbytes)
            del array
        output, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"the simulation failed ({proc.returncode}):\n{output}")
        if variant != "full":
            required.join(60)
        per_rank = [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(ranks)]
    sent = sum(sum(r["sent"].values()) for r in per_rank)
    return {
        "variant": variant,
        "ranks": ranks,
        "workers": workers,
        "block": list(block),
        "steps": steps,
        "mode": mode,
        "quarter_ranks": len(quarter),
        "bytes_sent": sent,
        "steps_received": received,
        "bytes_received": received_bytes,
        "simulation_s": max(r["elapsed_s"] for r in per_rank),
        "compute_s": steps * sleep,
    }


def check_targets(records: list[dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    """The saving the contract must show: bytes (exact) and time (measured)."""
    full = next(r for r in records if r["variant"] == "full")
    quarter = next(r for r in records if r["variant"] == "quarter/5")
    ranks, steps, senders = full["ranks"], full["steps"], full["quarter_ranks"]
    wanted = len(range(0, steps, STRIDE))
    expected = full["bytes_sent"] * senders * wanted // (ranks * steps)
    return [
        (
            f"quarter/{STRIDE} sends exactly its blocks: {senders} of {ranks} ranks on "
            f"{wanted} of {steps} steps",
            quarter["bytes_sent"] == expected,
            f"{quarter['bytes_sent']} bytes, expected {expected} ({full['bytes_sent']} full)",
        ),
        (
            f"quarter/{STRIDE} simulation time below full",
            quarter["simulation_s"] < full["simulation_s"],
            f"{quarter['simulation_s']:.2f} s vs {full['simulation_s']:.2f} s",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--block", type=int, nargs=2, default=[512, 512],
                        help="rows and columns of each rank's float64 block")  # fmt: skip
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--sleep", type=float, default=0.0, help="compute seconds per step")
    parser.add_argument("--mode", choices=("async", "sync"), default="async")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--quick", action="store_true", help="256 x 256 blocks, 20 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.block, args.steps = [256, 256], 20
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for variant in VARIANTS:
        record = run_one(variant, args.ranks, args.workers, tuple(args.block), args.steps,
                         args.sleep, args.mode)  # fmt: skip
        records.append(record)
        print(f"{variant}: {record['bytes_sent'] / MiB:.1f} MiB sent, "
              f"{record['simulation_s']:.2f} s", flush=True)  # fmt: skip
    full = records[0]
    rows = [
        [
            r["variant"],
            f"{r['bytes_sent'] / MiB:.1f}",
            f"{r['bytes_sent'] / full['bytes_sent']:.3f}",
            r["steps_received"],
            f"{r['bytes_received'] / MiB:.1f}",
            f"{r['simulation_s']:.2f}",
            f"{r['simulation_s'] / full['simulation_s']:.2f}",
        ]
        for r in records
    ]
    headers = ["variant", "MiB sent", "vs full", "steps received", "MiB received",
               "simulation s", "vs full"]  # fmt: skip
    print(f"\n{args.ranks} ranks of {args.block[0]} x {args.block[1]} float64, {args.workers} "
          f"workers, {args.steps} steps, mode={args.mode}")  # fmt: skip
    print(table(headers, rows))
    targets = check_targets(records)
    return finish(args.out, "contracts", targets, records=records)


if __name__ == "__main__":
    raise SystemExit(main())
