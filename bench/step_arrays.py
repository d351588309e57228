"""A step of many arrays against one array of the same bytes, against memcpy (issue 56 item 9).

    python -m bench.step_arrays --out results/            # every case, 20 steps, 3 repeats
    python -m bench.step_arrays --quick --profile         # 1 repeat; rank 0's cProfile printed

One rank (``--ranks``) publishes each step of a case with ``with bridge.step(t)`` (one
exchange for the step's arrays), ``--compute-ms`` (50) of busy compute between two steps, in
``mode="async"``, ``transport="auto"`` (shared memory on the node), to ``--workers`` Dask
worker processes preloading ``deisa.worker``, while an :class:`~deisa.Adapter` in this process
takes every step and sums each array (one ``dask.compute`` a step; ``--analytics take``: takes
it and lets it go). The cases, side by side in
turns on one cluster, ``--repeat`` times:

``many``             ``--arrays`` (20) arrays of ``--array-kib`` (512) KiB, taken with ``zip``;
``one``              one array of the same bytes (10 MiB), taken with ``zip`` beside ``tick``
                     (one float64 a step: ``zip`` takes two arrays at least);
``big-zip``          one array of ``--big-mib`` (64) MiB, with ``zip`` beside ``tick``;
``big-items``        the same array taken with ``items()`` (no read-ahead);
``particles``        ``--components`` (7) joined moving arrays of ``--particles`` (10^6) float64
                     per rank (``ArraySpec.moving(..., joined_axis=0)``), with ``zip``;
``particles-fixed``  the same bytes as fixed arrays (``ArraySpec(dtype, shape, start, count)``).

Per case: the median time of a step's publishes, the rank's memcpy of the same bytes (timed in
the middle of each step's compute), their ratio (``of memcpy``: memcpy over publish, the
publish's speed as a share of a copy's), the same two on the rank's main thread's CPU
(``time.thread_time``: on a loaded machine a publish of many short calls waits for a core far
more often than one copy, which wall-clock times count and CPU times leave out; the quiet
machine's figure lies between the two), the publish beyond the copy per array, the blocks that
went by shared memory and by TCP, and those that went by TCP on the node for want of a slot
(``fallbacks``, ``Bridge.shm_pool``), how the blocks found their slots (prepared: warm, copied at
memcpy's speed; given back; fresh: new pages, the costly case; every step, the first two
included). The analytics is attached and warm before the ranks start (a steady state, not the
backlog of its start). ``--profile``: rank 0's cProfile of its publishes (first
repeat of each case), printed and kept in the JSON. Writes ``step_arrays.json``.

Targets (issue 56 item 9): ``many`` and ``one`` >= 80 % of memcpy; ``many`` <= 1.1x ``one``;
no block by TCP for want of a slot; ``particles`` <= 1.1x ``particles-fixed``.
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

from bench._common import (
    add_worker_preload_option,
    child_env,
    finish,
    loadavg,
    local_cluster,
    median,
    table,
)

RANK = Path(__file__).with_name("_step_arrays_rank.py")
CASES = ("many", "one", "big-zip", "big-items", "particles", "particles-fixed")
ZIPPED = {"one": ("a0", "tick"), "big-zip": ("a0", "tick")}


def names(case: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The arrays of ``case`` (as ``bench/_step_arrays_rank.py`` declares them)."""
    if case == "many":
        return tuple(f"a{i}" for i in range(args.arrays))
    if case.startswith("particles"):
        return tuple(f"p{i}" for i in range(args.components))
    return ZIPPED.get(case, ("a0",))


def take(client: Any, case: str, args: argparse.Namespace, errors: list[str],
         taken: list[int], ready: threading.Event) -> None:  # fmt: skip
    """The analytics: every step of ``case``'s arrays, each summed (one compute a step).
    Attached to every array (its imports done) before ``ready`` is set: the ranks start then,
    so that the steps measured are a steady state's, not a backlog the analytics' start left
    (on the 2-core VM, importing the analytics' side took longer than a run of 14 steps: every
    block of it waited on the worker, each in a fresh slot)."""
    import dask
    import dask.array as da

    from deisa import Adapter

    try:
        adapter = Adapter(client, timeout=600)
        arrays = names(case, args)
        for name in arrays:
            adapter[name]._attach()  # a consumer from the first step on (as zip does)
        warm = da.ones(8, chunks=4)  # dask.array's and the compute's first-use costs
        dask.compute(warm.sum(), warm[2:].sum())
        ready.set()
        if len(arrays) == 1:
            steps: Any = ((t, (a,)) for t, a in adapter[arrays[0]].items())
        else:
            steps = adapter.zip(*arrays)
        for _, fields in steps:
            if args.analytics == "sum":
                dask.compute(*[f.sum() for f in fields])
            del fields
            taken[0] += 1
    except Exception as exc:  # reported with the run
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        ready.set()


def run_case(client: Any, scheduler_file: Path, case: str, args: argparse.Namespace,
             profile: bool) -> list[dict[str, Any]]:  # fmt: skip
    """One mpirun of the ranks for ``case``; their reports."""
    errors: list[str] = []
    taken = [0]
    ready = threading.Event()
    reader = threading.Thread(target=take, args=(client, case, args, errors, taken, ready),
                              daemon=True)  # fmt: skip
    reader.start()
    ready.wait(600)
    with tempfile.TemporaryDirectory(prefix="deisa-step-arrays-") as out:
        cmd = [
            "mpirun", "--oversubscribe", "-np", str(args.ranks), sys.executable, str(RANK),
            str(scheduler_file), "--case", case, "--out", out, "--steps", str(args.steps),
            "--compute-ms", str(args.compute_ms), "--arrays", str(args.arrays),
            "--array-kib", str(args.array_kib), "--big-mib", str(args.big_mib),
            "--particles", str(args.particles), "--components", str(args.components),
            *(["--profile"] if profile else []),
        ]  # fmt: skip
        done = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=900)
        reader.join(600)
        if done.returncode != 0 or errors:
            raise RuntimeError(f"{case} failed: {done.stderr[-2000:]} {errors}")
        return [json.loads(p.read_text()) for p in sorted(Path(out).glob("rank-*.json"))]


def summarize(case: str, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' figures of one run (ms; medians over ranks and steps)."""
    publish = median([1e3 * median(r["publish_s"]) for r in reports])
    memcpy = median([1e3 * median(r["memcpy_s"]) for r in reports])
    publish_cpu = median([1e3 * median(r["publish_cpu_s"]) for r in reports])
    memcpy_cpu = median([1e3 * median(r["memcpy_cpu_s"]) for r in reports])
    arrays = reports[0]["arrays"]
    waves = reports[0]["registrations"]  # rank 0's: (publications together, seconds) each
    pools = [r["pool"] for r in reports]
    return {
        "case": case, "arrays": arrays, "mib": reports[0]["nbytes"] / 2**20,
        "publish_ms": publish, "memcpy_ms": memcpy,
        "publish_cpu_ms": publish_cpu, "memcpy_cpu_ms": memcpy_cpu,
        "p90_ms": median([1e3 * sorted(r["publish_s"])[int(0.9 * (len(r["publish_s"]) - 1))]
                          for r in reports]),
        "beyond_per_array_ms": (publish - memcpy) / arrays,
        "by_shm": sum(p.get("blocks by shared memory", 0) for p in pools),
        "by_tcp": sum(p.get("blocks by tcp", 0) for p in pools),
        "fallbacks": sum(p.get("fallbacks", 0) for p in pools),
        **{f"slots_{path.replace(' ', '_')}": sum(r.get("slot_paths", {}).get(path, 0)
                                                  for r in reports)
           for path in ("prepared", "given back", "fresh")},
        **{f"{what}_ms": median([1e3 * median([s[i] for s in r["spent_s"]]) for r in reports])
           for i, what in enumerate(("copy", "wait", "exchange"))},
        "pool_budget_mib": pools[0].get("budget_mib", 0.0),
        "pool_peak_mib": pools[0].get("peak_mib", 0.0),
        "exchanges_per_step": reports[0]["exchanges"] / reports[0]["steps"],
        "registrations_per_step": len(waves) / reports[0]["steps"],
        "registration_ms": 1e3 * median([s for _, s in waves]) if waves else float("nan"),
        "transport": sorted({r["transport"] for r in reports}),
    }  # fmt: skip


FIELDS = ("publish_ms", "memcpy_ms", "publish_cpu_ms", "memcpy_cpu_ms", "p90_ms",
          "beyond_per_array_ms", "exchanges_per_step",
          "registrations_per_step", "registration_ms", "copy_ms", "wait_ms", "exchange_ms",
          "pool_budget_mib",
          "pool_peak_mib")  # fmt: skip
HEADERS = ("case", "arrays", "MiB", "publish ms", "p90 ms", "memcpy ms", "of memcpy",
           "CPU publish / memcpy ms", "of memcpy (CPU)",
           "copy / wait / exchanges ms",
           "beyond copy per array ms", "exchanges/step", "registration rounds/step",
           "round ms", "blocks shm/tcp", "fallbacks", "slots prepared/given back/fresh",
           "pool budget/peak MiB")  # fmt: skip


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compute-ms", type=float, default=50.0)
    parser.add_argument("--arrays", type=int, default=20, help="arrays of the many case")
    parser.add_argument("--array-kib", type=float, default=512, help="KiB per array and rank")
    parser.add_argument("--big-mib", type=float, default=64, help="MiB of the big cases")
    parser.add_argument("--particles", type=int, default=10**6, help="per rank and component")
    parser.add_argument("--components", type=int, default=7)
    parser.add_argument("--analytics", default="sum", choices=["sum", "take"],
                        help="each step: sum every array (one compute), or take it")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="--repeat 1")
    parser.add_argument("--profile", action="store_true", help="rank 0's cProfile, per case")
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
    from distributed import Client

    load_before = loadavg()
    print(f"step_arrays: {args.ranks} rank(s), {args.workers} worker(s), {args.steps} steps, "
          f"{args.compute_ms:g} ms compute; load {load_before}", flush=True)  # fmt: skip
    rows: list[dict[str, Any]] = []
    profiles: dict[str, str] = {}
    with (
        tempfile.TemporaryDirectory(prefix="deisa-bench-") as tmp,
        local_cluster(args.workers, worker_preload=args.worker_preload) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        scheduler_file = Path(tmp, "scheduler.json")
        scheduler_file.write_text(json.dumps({"address": cluster.scheduler.address}))
        for repeat in range(args.repeat):
            for case in args.cases:  # side by side, in turns
                t0 = time.perf_counter()
                reports = run_case(client, scheduler_file, case, args,
                                   args.profile and repeat == 0)  # fmt: skip
                if "profile" in reports[0]:
                    profiles[case] = reports[0]["profile"]
                row = {**summarize(case, reports), "repeat": repeat,
                       "wall_s": time.perf_counter() - t0}  # fmt: skip
                rows.append(row)
                print(f"  {case} #{repeat}: publish {row['publish_ms']:.2f} ms, memcpy "
                      f"{row['memcpy_ms']:.2f} ms, tcp {row['by_tcp']}", flush=True)  # fmt: skip
    for case, text in profiles.items():
        print(f"--- rank 0's profile, {case}\n{text}")
    return report(args, rows, profiles, load_before)


def report(args: argparse.Namespace, rows: list[dict[str, Any]], profiles: dict[str, str],
           load_before: list[float]) -> int:  # fmt: skip
    """Print the table and the targets; write ``step_arrays.json``."""
    cases = [c for c in args.cases if any(r["case"] == c for r in rows)]
    m: dict[str, dict[str, Any]] = {}
    for case in cases:
        group = [r for r in rows if r["case"] == case]
        m[case] = {field: median([r[field] for r in group]) for field in FIELDS}
        m[case].update({k: sum(r[k] for r in group) for k in ("by_shm", "by_tcp", "fallbacks",
                        "slots_prepared", "slots_given_back", "slots_fresh")})  # fmt: skip
        m[case].update(arrays=group[0]["arrays"], mib=group[0]["mib"])
    print(table(HEADERS, [[
        case, v["arrays"], f"{v['mib']:g}", f"{v['publish_ms']:.2f}", f"{v['p90_ms']:.2f}",
        f"{v['memcpy_ms']:.2f}", f"{100 * v['memcpy_ms'] / v['publish_ms']:.0f} %",
        f"{v['publish_cpu_ms']:.2f} / {v['memcpy_cpu_ms']:.2f}",
        f"{100 * v['memcpy_cpu_ms'] / v['publish_cpu_ms']:.0f} %",
        f"{v['copy_ms']:.2f} / {v['wait_ms']:.2f} / {v['exchange_ms']:.2f}",
        f"{v['beyond_per_array_ms']:.3f}", f"{v['exchanges_per_step']:.2f}",
        f"{v['registrations_per_step']:.2f}", f"{v['registration_ms']:.2f}",
        f"{v['by_shm']}/{v['by_tcp']}", v["fallbacks"],
        f"{v['slots_prepared']}/{v['slots_given_back']}/{v['slots_fresh']}",
        f"{v['pool_budget_mib']:.0f}/{v['pool_peak_mib']:.0f}",
    ] for case, v in m.items()]))  # fmt: skip
    return finish(args.out, "step_arrays", targets(m), rows=rows, medians=m, profiles=profiles,
                  ranks=args.ranks, workers=args.workers, steps=args.steps,
                  compute_ms=args.compute_ms, arrays=args.arrays, array_kib=args.array_kib,
                  big_mib=args.big_mib, particles=args.particles, components=args.components,
                  repeat=args.repeat, analytics=args.analytics, loadavg_before=load_before,
                  loadavg_after=loadavg())  # fmt: skip


def targets(m: dict[str, dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    """Issue 56 item 9's targets on the cases measured."""
    found: list[tuple[str, bool | None, str]] = []
    for case in ("many", "one"):
        if case in m:
            share = m[case]["memcpy_ms"] / m[case]["publish_ms"]
            found.append((f"{case}: a step's publish >= 80 % of memcpy's speed", share >= 0.8,
                          f"{100 * share:.0f} %"))  # fmt: skip
            cpu = m[case]["memcpy_cpu_ms"] / m[case]["publish_cpu_ms"]
            found.append((f"{case}: the same on the rank's CPU (not a target: waits for a "
                          "core left out)", None, f"{100 * cpu:.0f} %"))  # fmt: skip
    if "many" in m and "one" in m:
        ratio = m["many"]["publish_ms"] / m["one"]["publish_ms"]
        found.append(("many arrays cost what one array of the same bytes costs (<= 1.1x)",
                      ratio <= 1.1, f"{ratio:.2f}x"))  # fmt: skip
        cpu = m["many"]["publish_cpu_ms"] / m["one"]["publish_cpu_ms"]
        found.append(("the same on the rank's CPU (not a target: waits for a core left out)",
                      None, f"{cpu:.2f}x"))  # fmt: skip
    if "particles" in m and "particles-fixed" in m:
        ratio = m["particles"]["publish_ms"] / m["particles-fixed"]["publish_ms"]
        found.append(("moving joined particles <= 1.1x fixed arrays of the same bytes",
                      ratio <= 1.1, f"{ratio:.2f}x"))  # fmt: skip
    falls = sum(v["fallbacks"] for v in m.values())
    tcp = sum(v["by_tcp"] for v in m.values())
    found.append(("no block by TCP for want of a shared-memory slot", falls == 0 and tcp == 0,
                  f"{falls} fallbacks, {tcp} blocks by TCP"))  # fmt: skip
    return found


if __name__ == "__main__":
    sys.exit(main())
