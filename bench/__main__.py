"""Run every benchmark, one after the other, into one results folder.

    python -m bench --quick --out results/     # ~5 minutes on 2 cores
    python -m bench --out results/             # default sizes (longer)

Each benchmark prints its table and targets, and writes its JSON and PNG under ``--out``;
``summary.json`` collects the machine, each benchmark's exit status, its wall time and its
targets. A benchmark that fails (exception) is reported and the others still run. Exit status:
0 when every target passed or could not be measured, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench._common import REPO, child_env, machine

BENCHMARKS = (
    "bandwidth",
    "insitu_vs_posthoc",
    "scheduler_messages",
    "fragmentation",
    "analytics",
    "contracts",
    "worker_loss",
    "first_step",
    "publish",
    "tls_startup",
    "node_local",
    "step_arrays",
    "shm_pages",
    "long_run",
    "scheduler_memory",
    "adios2_endstep",  # its lanes skip with the reason where ADIOS2 or the engine is absent
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark's --quick mode")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    info = machine()
    print(f"machine: {info['nproc']} cores, {info['memory_gib']} GiB, {info['cpu']}", flush=True)
    summary: dict[str, object] = {"machine": info, "quick": args.quick, "benchmarks": {}}
    worst = 0
    for name in args.only:
        cmd = [sys.executable, "-m", f"bench.{name}", "--out", str(args.out)]
        if args.quick and name != "fragmentation":  # fragmentation is ~1 minute already
            cmd.append("--quick")
        print(f"\n=== {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, env=child_env(), cwd=os.getcwd()).returncode
        wall = time.perf_counter() - t0
        result = args.out / f"{name}.json"
        targets = json.loads(result.read_text()).get("targets") if result.exists() else None
        summary["benchmarks"][name] = {"rc": rc, "wall_s": wall, "targets": targets}  # type: ignore[index]
        worst = max(worst, rc)
        print(f"=== {name}: exit {rc}, {wall:.0f} s", flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nwrote {args.out / 'summary.json'} (repository {REPO})")
    return 1 if worst else 0


if __name__ == "__main__":
    raise SystemExit(main())
