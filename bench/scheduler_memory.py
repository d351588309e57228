"""The scheduler's memory and messages over a long run of data that moves (issue 56 items 7, 9).

    python -m bench.scheduler_memory --out results/                 # 10,000 steps, 1 8 64 boxes
    python -m bench.scheduler_memory --quick --out results/         # 300 steps, 1 and 8 boxes
    python -m bench.scheduler_memory --steps 2000 --boxes 64 --tracemalloc

A real ``dask scheduler`` process and two ``dask worker`` processes, started with the command
lines and environment ``deisa-run`` gives them (:class:`deisa.launcher.dask_processes.
DaskProcesses`: the workers preload deisa's worker services, deisa's stream extension is
installed by the first client, as in a run), ``--ranks`` MPI ranks under ``mpirun`` publishing
through the Python Bridge an array declared moving whose shape changes at every step
(``bench._moving_rank``: each rank ``--boxes`` boxes of 1 to 5 rows and ``--width`` columns,
``buffer_nb=2``), and an analytics in this process taking every step with ``Adapter.items()``
and summing it (one computation a step, checked against the expected sum).

Every ``--every`` steps (default: 50 samples a run) the analytics samples the scheduler
process's RSS (psutil) and, through ``Client.run_on_scheduler``, how full its records are
(:func:`deisa._dask_internals.scheduler_records`: tasks, task groups, spans, transition log,
events, the batched streams' message logs, ...) and what deisa's extension holds
(:meth:`deisa.scheduler._state.StreamState.held`). Every message the scheduler handles is
counted by op (its handler tables wrapped in the scheduler process): printed, the messages a
step from the simulation (``deisa_publish``, ``deisa_open``, ``deisa_close``,
``deisa_workers``), from the analytics, and in all.

``--histories distributed --spans-grace 60`` runs the scheduler as it was before issue 56
item 7 (distributed's own history lengths, finished computations kept 60 s): the "before" of
docs/benchmarks.md section 19.

Marks: *start* (a tenth of the run), *middle* and *end*. Target: from the middle to the end the
scheduler's RSS grows by at most ``--max-growth`` bytes a step (default 256; RSS includes the
allocator's slack, so a small positive figure is noise, a steady one is a leak), for every box
count; and the simulation's messages a step are the same for every box count.
``--tracemalloc``: the scheduler runs under ``PYTHONTRACEMALLOC`` (slower) and the run prints the
15 places whose Python allocations grew most from the middle to the end. Writes
``scheduler_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench._common import REPO, child_env, finish, loadavg, table
from bench.scheduler_messages import ANALYTICS_OPS, SIMULATION_OPS

NAME = "field"
MiB = 2**20


def _install_counter(dask_scheduler: Any, grace: float | None = None) -> None:
    """In the scheduler: count every message it handles by op (from now on); ``grace``: the
    extension's ``SPANS_GRACE_S`` (``None``: its own)."""
    from deisa import _dask_internals
    from deisa.scheduler import _state

    if grace is not None:
        _state.SPANS_GRACE_S = grace

    counter: Counter[str] = Counter()
    _dask_internals.count_handler_calls(dask_scheduler, counter)
    dask_scheduler._deisa_bench_messages = counter


def _probe(dask_scheduler: Any, snapshot: str | None = None) -> dict[str, Any]:
    """In the scheduler: its RSS after a collection, its records, deisa's, the message counts;
    ``snapshot``: ``"take"`` keeps a tracemalloc snapshot, ``"compare"`` adds the 15 lines that
    grew most since it."""
    import gc
    import tracemalloc

    import psutil

    from deisa import _dask_internals
    from deisa.wire import EXTENSION_NAME

    gc.collect()
    out: dict[str, Any] = {
        "rss": psutil.Process().memory_info().rss,
        "records": _dask_internals.scheduler_records(dask_scheduler),
        "deisa": dask_scheduler.plugins[EXTENSION_NAME].held(),
        "messages": dict(dask_scheduler._deisa_bench_messages),
    }
    if snapshot and tracemalloc.is_tracing():
        out["traced"] = tracemalloc.get_traced_memory()[0]
        now = tracemalloc.take_snapshot()
        if snapshot == "compare" and hasattr(dask_scheduler, "_deisa_bench_snapshot"):
            diff = now.compare_to(dask_scheduler._deisa_bench_snapshot, "lineno")
            out["grew"] = [str(d) for d in diff[:15]]
        dask_scheduler._deisa_bench_snapshot = now
    return out


def expected_sum(step: int, nrows: int, width: int) -> float:
    """The sum of a step (``bench._moving_rank``: row ``r`` holds ``step + r``)."""
    return float(width * (nrows * step + nrows * (nrows - 1) // 2))


def run_one(args: argparse.Namespace, boxes: int, workdir: Path) -> dict[str, Any]:
    """One run: a fresh scheduler, ``args.ranks`` ranks of ``boxes`` boxes, ``args.steps``."""
    import cloudpickle
    from distributed import Client

    from bench import _moving_rank
    from deisa import Adapter
    from deisa.launcher.dask_processes import DaskProcesses, history_env, http_env

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the probes run there
    env = http_env(False)  # as deisa-run's, without the dashboard
    if args.histories == "deisa":
        env.update({k: v for k, v in history_env(False).items() if k not in os.environ})
    if args.tracemalloc:
        env["PYTHONTRACEMALLOC"] = "1"
    procs = DaskProcesses(workdir / f"scheduler-{boxes}.json", log_dir=workdir, env=env)
    every = args.every or max(1, args.steps // 50)
    marks = {"start": args.steps // 10, "middle": args.steps // 2, "end": args.steps - 1}
    samples: list[dict[str, Any]] = []
    mpirun = None
    try:
        procs.start_scheduler(120)
        procs.start_workers(args.workers)
        client: Client = procs.client(timeout=120)
        procs.wait_for_workers(client, args.workers, 120)
        adapter = Adapter(client, timeout=600)
        client.run_on_scheduler(_install_counter, grace=args.spans_grace)
        cmd = ["mpirun", "--oversubscribe", "-np", str(args.ranks), sys.executable, "-m",
               "bench._moving_rank", str(procs.scheduler_file), "--steps", str(args.steps),
               "--boxes", str(boxes), "--width", str(args.width), "--name", NAME]  # fmt: skip
        mpirun = subprocess.Popen(cmd, env=child_env(), cwd=REPO, stderr=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, text=True)  # fmt: skip
        began = time.perf_counter()
        taken = 0
        for step, field in adapter[NAME].items():
            nrows = args.ranks * boxes * _moving_rank.rows(step)
            total = float(field.sum().compute())
            if field.shape != (nrows, args.width) or total != expected_sum(step, nrows, args.width):
                raise RuntimeError(f"step {step}: shape {field.shape}, sum {total}")
            taken += 1
            mark = next((m for m, at in marks.items() if at == step), None)
            if step % every == 0 or mark is not None:
                how = (
                    {"middle": "take", "end": "compare"}.get(mark or "")
                    if args.tracemalloc
                    else None
                )
                sample = client.run_on_scheduler(_probe, snapshot=how)
                sample.update(step=step, mark=mark, seconds=time.perf_counter() - began)
                samples.append(sample)
                with (args.out / f"scheduler_memory_{boxes}b_samples.jsonl").open("a") as f:
                    f.write(json.dumps(sample) + "\n")  # a run cut short still leaves these
                print(f"  {boxes} boxes, step {step}: RSS {sample['rss'] / MiB:.1f} MiB "
                      f"({sample['seconds']:.0f} s)", flush=True)  # fmt: skip
        _, err = mpirun.communicate(timeout=300)
        if mpirun.returncode != 0 or taken != args.steps:
            raise RuntimeError(f"{boxes} boxes: {taken} steps taken, mpirun: {err[-3000:]}")
        seconds = time.perf_counter() - began
        client.close()
    finally:
        if mpirun is not None and mpirun.poll() is None:
            mpirun.kill()
        procs.stop()
    return summarize(args, boxes, samples, seconds)


def summarize(
    args: argparse.Namespace, boxes: int, samples: list[dict[str, Any]], seconds: float
) -> dict[str, Any]:
    """One run's row: RSS at the marks, growth a step from the middle to the end, messages a
    step by side (counted from the counter's installation to the last sample)."""
    at = {s["mark"]: s for s in samples if s["mark"]}
    middle, end = at["middle"], at["end"]
    growth = (end["rss"] - middle["rss"]) / max(1, end["step"] - middle["step"])
    messages = Counter(end["messages"])
    steps = end["step"] + 1
    simulation = sum(n for op, n in messages.items() if op in SIMULATION_OPS)
    analytics = sum(n for op, n in messages.items() if op in ANALYTICS_OPS)
    return {
        "boxes": boxes,
        "ranks": args.ranks,
        "steps": args.steps,
        "seconds": round(seconds, 1),
        "rss_mib": {m: round(at[m]["rss"] / MiB, 1) for m in ("start", "middle", "end")},
        "growth_bytes_per_step": round(growth, 1),
        "traced_kib": {m: at[m]["traced"] // 1024 for m in at if "traced" in at[m]},
        "grew": end.get("grew", []),
        "messages_per_step": {
            "simulation": simulation / steps,
            "publish": messages["deisa_publish"] / steps,
            "analytics": analytics / steps,
            "all": sum(messages.values()) / steps,
        },
        "records_end": end["records"],
        "deisa_end": end["deisa"],
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler_memory",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--boxes", type=int, nargs="+", default=[1, 8, 64], help="per rank")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--width", type=int, default=16, help="columns of the field")
    parser.add_argument("--every", type=int, default=0, help="steps between samples")
    parser.add_argument("--max-growth", type=float, default=256.0, help="RSS bytes a step")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument(
        "--histories",
        choices=["deisa", "distributed"],
        default="deisa",
        help="the lengths of distributed's histories: deisa-run's "
        "(history_env), or distributed's defaults (before issue 56 item 7)",
    )
    parser.add_argument(
        "--spans-grace",
        type=float,
        default=None,
        help="seconds a finished computation's span is kept (default: the "
        "extension's SPANS_GRACE_S; 60 before issue 56 item 7)",
    )
    parser.add_argument("--quick", action="store_true", help="300 steps, 1 and 8 boxes")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.boxes = 300, [1, 8]
    if args.steps < 20:
        parser.error("--steps: at least 20 (the marks are a tenth, half and the end of the run)")
    args.out.mkdir(parents=True, exist_ok=True)
    load = [loadavg()]
    with tempfile.TemporaryDirectory(prefix="deisa-bench-") as tmp:
        rows = [run_one(args, boxes, Path(tmp)) for boxes in args.boxes]
    load.append(loadavg())
    print(f"Scheduler memory and messages, {args.ranks} ranks, {args.steps} steps of a moving "
          f"array (shape changes every step), load {load[0][0]} -> {load[1][0]}")  # fmt: skip
    print(table(
        ["boxes a rank", "s", "RSS start MiB", "middle", "end", "B/step middle->end",
         "sim msgs/step", "publish/step", "analytics/step", "all/step"],
        [[r["boxes"], r["seconds"], *r["rss_mib"].values(), r["growth_bytes_per_step"],
          *(f"{v:.2f}" for v in r["messages_per_step"].values())] for r in rows],
    ))  # fmt: skip
    names = list(rows[0]["records_end"])
    print(table(["boxes a rank", *names], [[r["boxes"], *r["records_end"].values()] for r in rows]))
    print(table(["boxes a rank", *rows[0]["deisa_end"]],
                [[r["boxes"], *r["deisa_end"].values()] for r in rows]))  # fmt: skip
    for r in rows:
        if r["grew"]:
            print(f"{r['boxes']} boxes: Python allocations that grew most, middle -> end:")
            print("\n".join("  " + line for line in r["grew"]))
    sim = [r["messages_per_step"]["simulation"] for r in rows]
    worst = max(rows, key=lambda r: r["growth_bytes_per_step"])
    targets = [
        (f"scheduler RSS growth middle -> end <= {args.max_growth:.0f} B/step",
         worst["growth_bytes_per_step"] <= args.max_growth,
         f"{worst['growth_bytes_per_step']:.0f} B/step at {worst['boxes']} boxes a rank"),
        ("simulation messages a step the same for every box count", max(sim) - min(sim) < 0.05,
         ", ".join(f"{s:.2f}" for s in sim)),
    ]  # fmt: skip
    return finish(args.out, "scheduler_memory", targets, load=load,
                  options={k: str(v) for k, v in vars(args).items()}, rows=rows)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
