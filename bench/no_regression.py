"""The fixed-shape path against another checkout: three benchmarks alternated in one run.

    git worktree add --detach /tmp/base 6b0927f            # main before data that moves
    python -m bench.no_regression --base /tmp/base --turns 5 --out results/

Each turn runs ``bench.publish``, ``bench.node_local`` and ``bench.scheduler_messages`` (the
commands of :data:`COMMANDS`, the fixed-shape path only) once from the base checkout and once
from this one, each benchmark's own code from its checkout (``PYTHONPATH`` and working directory
set to it), the base first on even turns and second on odd ones, so that both sides see the
same load over the run. Printed: per measure the median over the turns on each side, the ratio
(this checkout / base) and every run, so that the spread can be judged against the ratio; a
loaded machine moves single figures by more than any regression this could find, hence the
turns. ``--collect DIR...`` counts the runs earlier invocations left in their ``--out``
folders too (with ``--turns 0``: only theirs). A run that fails (a benchmark's own timeout
under load) is reported and left out. Writes ``no_regression.json`` (every run's measures,
the load before and after each, the runs that failed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import REPO, child_env, loadavg, table

COMMANDS = {
    "publish": ["--ranks", "1", "--sizes", "16", "--steps", "12"],
    "node_local": ["--sizes", "16", "--steps", "10", "--repeat", "1", "--analytics", "taking",
                   "--transports", "auto", "--bursts", "1"],
    "scheduler_messages": ["--ranks", "2", "4", "--steps", "10"],
}  # fmt: skip
"""Each benchmark's options: the fixed path as docs/benchmarks.md section 18 ran it."""


def _publish(d: dict[str, Any]) -> dict[str, float]:
    s = d["runs"][0]["summary"]
    return {"publish ms (median)": s["publish_ms"], "publish / memcpy": s["publish_ms"] /
            s["memcpy_ms"], "step ms": s["step_ms"]}  # fmt: skip


def _node_local(d: dict[str, Any]) -> dict[str, float]:
    row = next(r for r in d["rows"] if r["transport"] != "tcp")
    return {"sustained / memcpy": row["sustained_gibs"] / row["memcpy_gibs"],
            "publish ms": row["publish_ms"], "copy ms": row["copy_ms"]}  # fmt: skip


def _scheduler_messages(d: dict[str, Any]) -> dict[str, float]:
    out = {}
    for r in d["records"]:
        tag = f"{r['ranks']} ranks: "
        out[tag + "simulation msgs/step"] = r["per_step"]["simulation"]
        out[tag + "all msgs/step"] = r["total"] / r["steps"]
        out[tag + "steady scheduler CPU ms/step"] = r["scheduler_cpu_steady_ms_per_step"]
        out[tag + "publish -> adapter ms"] = r["publish_to_adapter_ms_median"]
    return out


MEASURES: dict[str, Callable[[dict[str, Any]], dict[str, float]]] = {
    "publish": _publish,
    "node_local": _node_local,
    "scheduler_messages": _scheduler_messages,
}


def run_bench(name: str, checkout: Path, out: Path) -> dict[str, float]:
    """``python -m bench.<name>`` from ``checkout``; its measures (:data:`MEASURES`)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", f"bench.{name}", *COMMANDS[name], "--out", str(out)]
    env = child_env()
    env["PYTHONPATH"] = str(checkout)
    done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=900)
    (out / "stdout.txt").write_text(done.stdout + done.stderr)
    path = out / f"{name}.json"
    if not path.exists():
        raise RuntimeError(f"{name} in {checkout} wrote no {path.name}:\n{done.stderr[-3000:]}")
    return MEASURES[name](json.loads(path.read_text()))


def collected(folder: Path, benchmarks: list[str]) -> list[tuple[str, str, dict[str, float]]]:
    """``(benchmark, side, measures)`` of each run an earlier invocation left in ``folder``
    (``<turn>-<side>-<benchmark>/<benchmark>.json``); those that failed left no JSON."""
    found = []
    for run in sorted(folder.iterdir()):
        parts = run.name.split("-", 2)
        if len(parts) == 3 and parts[2] in benchmarks and (run / f"{parts[2]}.json").exists():
            data = json.loads((run / f"{parts[2]}.json").read_text())
            found.append((parts[2], parts[1], MEASURES[parts[2]](data)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.no_regression",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--base", type=Path, required=True, help="the other checkout")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--benchmarks", nargs="+", default=list(COMMANDS), choices=COMMANDS)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument(
        "--collect",
        type=Path,
        nargs="*",
        default=[],
        help="--out folders of earlier runs, whose runs are counted too",
    )
    args = parser.parse_args(argv)
    if not (args.base / "bench").is_dir():
        parser.error(f"--base {args.base}: not a deisa checkout (no bench/ there)")
    args.out.mkdir(parents=True, exist_ok=True)
    sides = {"base": args.base.resolve(), "this": REPO}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        b: {side: [] for side in sides} for b in args.benchmarks
    }
    loads: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for earlier in args.collect:  # runs of earlier invocations, read from their folders
        for name, side, measures in collected(earlier, args.benchmarks):
            runs[name][side].append(measures)
    for turn in range(args.turns):
        order = list(sides) if turn % 2 == 0 else list(sides)[::-1]
        for bench in args.benchmarks:
            for side in order:
                before = loadavg()
                try:
                    measures = run_bench(bench, sides[side], args.out / f"{turn}-{side}-{bench}")
                except (RuntimeError, subprocess.TimeoutExpired) as exc:  # say it, go on
                    print(f"turn {turn} {bench} {side}: failed, left out: {exc}", flush=True)
                    failed.append({"turn": turn, "bench": bench, "side": side, "error": str(exc)})
                    continue
                runs[bench][side].append(measures)
                loads.append({"turn": turn, "bench": bench, "side": side, "load": [before,
                              loadavg()]})  # fmt: skip
                print(f"turn {turn} {bench} {side}: load {before[0]}", flush=True)
    rows = []
    for bench, by_side in runs.items():
        if not by_side["base"] or not by_side["this"]:
            continue
        for measure in by_side["base"][0]:
            base = [m[measure] for m in by_side["base"]]
            this = [m[measure] for m in by_side["this"]]
            b, t = statistics.median(base), statistics.median(this)
            rows.append({"measure": f"{bench} {measure}", "base": b, "this": t,
                         "ratio": t / b if b else float("nan"), "base_runs": base,
                         "this_runs": this})  # fmt: skip
    print(
        f"this checkout ({REPO}) against {sides['base']}, {args.turns} turns, alternated"
        + (f", with the runs of {', '.join(map(str, args.collect))}" if args.collect else "")
    )
    print(table(
        ["measure", "base", "this", "this / base", "runs (base; this)"],
        [[r["measure"], f"{r['base']:.3g}", f"{r['this']:.3g}", f"{r['ratio']:.2f}",
          ", ".join(f"{x:.3g}" for x in r["base_runs"]) + "; "
          + ", ".join(f"{x:.3g}" for x in r["this_runs"])] for r in rows],
    ))  # fmt: skip
    path = args.out / "no_regression.json"
    path.write_text(json.dumps({"base": str(sides["base"]), "this": str(REPO),
                                "commands": COMMANDS, "turns": args.turns, "rows": rows,
                                "loads": loads, "failed": failed}, indent=1))  # fmt: skip
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
