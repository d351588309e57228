"""What the launcher adds to your own code: time to first step, the demo against a user command.

Issue 22's target: for a user command, ``deisa-run`` adds no more than it adds to the heat demo,
i.e. the time from the simulation's launch to the first step reaching the analytics is within
10 % of the demo's at the same size. Both variants run the same Python heat solver and the
built-in PCA on a fresh scheduler and workers, alternately (so that the machine's noise falls
on both), and the figure is ``first_step_s`` of each run's ``results.json``:

``demo``          ``deisa-run --solver python --size R C --steps S ...``
``user command``  ``deisa-run ... -- python -m deisa_simulation.heat CONFIG`` (the same
                  settings in a YAML; the solver finds the scheduler by DEISA_SCHEDULER_FILE)

Run::

    python -m bench.first_step --out results/                 # 4 ranks, 2 workers, 256², 3 runs
    python -m bench.first_step --ranks 16 --workers 4 --size 2048 2048 --repeats 5 --out results/
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench._common import child_env, finish, median, table
from deisa.launcher.settings import squarest_grid

VARIANTS = ("demo", "user command")


def run_one(variant: str, args: argparse.Namespace, tmp: Path, index: int) -> dict[str, Any]:
    """One ``deisa-run``; its time to first step and wall time."""
    out = tmp / f"{variant.replace(' ', '_')}-{index}"
    common = [
        "--ranks", str(args.ranks), "--workers", str(args.workers), "--threads", "1",
        "--n-components", "2", "-o", str(out),
    ]  # fmt: skip
    grid = list(squarest_grid(args.ranks))
    simulation = {
        "global_size": list(args.size),
        "process_grid": grid,
        "steps": args.steps,
        "output_period": args.output_period,
    }
    if variant == "demo":
        argv = [
            *common, "--solver", "python", "--size", *map(str, args.size),
            "--process-grid", *map(str, grid),
            "--steps", str(args.steps), "--output-period", str(args.output_period),
        ]  # fmt: skip
    else:
        config = tmp / "simulation.yml"
        config.write_text(yaml.safe_dump(simulation))
        argv = [*common, "--", sys.executable, "-m", "deisa_simulation.heat", str(config)]
    cmd = [sys.executable, "-m", "deisa.launcher", *argv]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant}: deisa-run exited {proc.returncode}: {proc.stderr[-2000:]}")
    results = json.loads((out / "results.json").read_text())
    return {"first_step_s": results["first_step_s"], "steps": len(results["steps"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("ROWS", "COLS"))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--output-period", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant, alternated")
    parser.add_argument("--quick", action="store_true", help="2 repeats at 128²")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.size = 2, [128, 128]
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                print(f"repetition {rep + 1}: {variant}", flush=True)
                runs[variant].append(run_one(variant, args, Path(tmp), rep))
    first = {v: median([r["first_step_s"] for r in runs[v]]) for v in VARIANTS}
    rows = [
        [v, f"{first[v]:.2f}", " ".join(f"{r['first_step_s']:.2f}" for r in runs[v])]
        for v in VARIANTS
    ]
    print(table(["variant", "median first step s", "each run s"], rows))
    ratio = first["user command"] / first["demo"]
    targets = [
        (
            "user command's time to first step within 10 % of the demo's",
            ratio <= 1.10,
            f"{first['user command']:.2f} s vs {first['demo']:.2f} s ({ratio:.2f}x)",
        )
    ]
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    return finish(
        args.out, "first_step", targets, settings=settings, runs=runs, median_first_step_s=first
    )


if __name__ == "__main__":
    sys.exit(main())
