"""The cost of ``EndStep`` with the deisa ADIOS2 engine, against a memcpy of the rank's data and
beside ADIOS2's own SST engine to a Python reader (issue 44, item 7).

    python -m bench.adios2_endstep --out results/        # ~3 minutes on 2 cores

Each lane runs an ADIOS2 writer whose ``--ranks`` MPI ranks each ``Put`` one block of every
``--sizes`` MiB per step, ``--steps`` steps, and time every step (``BeginStep`` + ``Put`` +
``EndStep``, the slowest rank's) and, in the same process, a memcpy of the same block. Before
each step, untimed, each of ``--compute`` passes over the block (an add in place, as
``bench.publish`` computes between publications): ``0`` puts the steps back to back, where an
asynchronous engine's step also waits for the previous steps' transfers (deisa: its Bridge's
``max_in_flight``); every lane runs at every value given:

``deisa``   the C++ writer of ``bench/adios2/`` (ADIOS2's C++ API, built by this benchmark
            with CMake against ADIOS2 with MPI: ``ADIOS2_DIR``, else CMake's prefixes), its XML
            swapped to the deisa engine (``libdeisa_adios2_engine.so``, found as
            ``deisa-run`` finds it: ``build/plugin/adios2``, else ``ADIOS2_PLUGIN_PATH``);
            ``--workers`` Dask workers (a ``LocalCluster`` preloading deisa's worker plugin, as
            ``deisa-run``'s do) and an Adapter taking every step, whose arrival is the step
            registered with its blocks on the workers.
``BP5``     the same writer and XML with ``<engine type="BP5">`` (a file in a temporary
            directory): what the code did before the swap.
``SST``     the same steps from Python with the ``adios2`` wheel's SST engine (serial: one
            stream and one Python reader process per rank, EVPath ``WAN`` data plane; the reader
            ``Get``s every step into its own array, its arrival), :mod:`bench._adios2_sst`.

A lane that cannot run here is skipped with the reason (no ADIOS2 with MPI, no engine built,
no SST in the wheel); the lanes take turns at every ``--repeats``. Delivered bandwidth: the
bytes of every step after the first over the time from the first's arrival to the last's.

Targets: deisa's median step <= 2.5 x memcpy + 2 ms (the PDI plugin's, which ``bench.publish``
measures with 40 passes), every size, at the largest ``--compute``; deisa's delivered bandwidth
ahead of SST's, every size, at the smallest. Writes ``adios2_endstep.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import (
    PINS,
    REPO,
    child_env,
    finish,
    loadavg,
    local_cluster,
    median,
    table,
)

os.environ.update(PINS)

BUILD = REPO / "build"
WRITER_SOURCE = REPO / "bench" / "adios2"
WRITER_BUILD = BUILD / "bench-adios2"
ENGINE_FILE = "libdeisa_adios2_engine.so"
TIMEOUT = 600.0
LANES = ("deisa", "BP5", "SST")

XML = """<?xml version="1.0"?>
<adios-config>
  <io name="BenchOutput">
    <engine type="{engine}">
{parameters}
    </engine>
  </io>
</adios-config>
"""


def find_engine() -> Path | None:
    """The directory of the deisa engine: ``build/plugin/adios2``, else ``ADIOS2_PLUGIN_PATH``."""
    dirs = [BUILD / "plugin" / "adios2"]
    dirs += [Path(d) for d in os.environ.get("ADIOS2_PLUGIN_PATH", "").split(os.pathsep) if d]
    return next((d for d in dirs if (d / ENGINE_FILE).exists()), None)


def build_writer() -> tuple[Path | None, str]:
    """The C++ writer, built (again if its source changed) in ``build/bench-adios2``; or
    ``None`` and why (CMake's last lines: no ADIOS2 with MPI, no compiler)."""
    binary = WRITER_BUILD / "deisa_bench_endstep"
    sources = [p.stat().st_mtime for p in WRITER_SOURCE.iterdir()]
    if binary.exists() and binary.stat().st_mtime > max(sources):
        return binary, "built"
    if shutil.which("cmake") is None:
        return None, "cmake is not installed"
    configure = ["cmake", "-S", str(WRITER_SOURCE), "-B", str(WRITER_BUILD),
                 "-DCMAKE_BUILD_TYPE=Release"]  # fmt: skip
    if os.environ.get("ADIOS2_DIR"):
        configure.append(f"-DADIOS2_DIR={os.environ['ADIOS2_DIR']}")
    for cmd in (configure, ["cmake", "--build", str(WRITER_BUILD)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        if proc.returncode != 0:
            text = proc.stdout + proc.stderr
            why = ("CMake finds no ADIOS2 (set ADIOS2_DIR to its lib/cmake/adios2)"
                   if "FindADIOS2.cmake" in text else text.strip().splitlines()[-1])  # fmt: skip
            return None, f"the C++ writer does not build against ADIOS2 with MPI: {why}"
    return binary, "built"


def sst_available() -> str | None:
    """Why the wheel's SST cannot be used, or ``None``."""
    try:
        import adios2.bindings as bindings
    except ImportError:
        return "the adios2 package is not installed (pip install 'deisa-insitu[adios2]')"
    try:
        bindings.ADIOS().DeclareIO("probe").SetEngine("SST")
    except Exception as exc:  # an engine the wheel was built without
        return f"the adios2 wheel has no SST engine ({exc})"
    return None


def _mpirun(ranks: int, *cmd: str) -> list[str]:
    return ["mpirun", "--oversubscribe", "-n", str(ranks), *cmd]


class LaneFailedError(RuntimeError):
    """A lane's process failed: ``args[0]`` says how in one line, ``log`` is its stderr's tail."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


def _json_line(proc: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    if proc.returncode != 0:
        lines = [x.strip() for x in proc.stderr.splitlines() if x.strip()]
        telling = [x for x in lines if "signal" in x or "Error" in x or "error" in x]
        how = (telling or lines or [f"exit status {proc.returncode}"])[-1]
        raise LaneFailedError(f"{what} failed ({proc.returncode}): {how}", proc.stderr[-4000:])
    line = next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("{"))
    result: dict[str, Any] = json.loads(line)
    return result


def run_writer(
    binary: Path, engine: str, parameters: dict[str, str], target: str, args: Any, mib: int,
    env: dict[str, str], workdir: Path, lane: str,
) -> dict[str, Any]:  # fmt: skip
    """One run of the C++ writer with ``engine`` and its ``parameters`` (the ``lane``)."""
    lines = "\n".join(f'      <parameter key="{k}" value="{v}"/>' for k, v in parameters.items())
    config = workdir / f"{engine}.xml"
    config.write_text(XML.format(engine=engine, parameters=lines))
    cmd = _mpirun(args.ranks, str(binary), str(config), "BenchOutput", target, str(mib),
                  str(args.steps), str(args.compute))  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    return _json_line(proc, f"the {lane} writer")


def run_deisa(binary: Path, engine_dir: Path, args: Any, mib: int, workdir: Path) -> dict:
    """The deisa lane: a cluster, an Adapter taking every step, the writer with the engine."""
    import dask
    from distributed import Client

    from deisa import Adapter

    with (
        dask.config.set({"temporary-directory": str(workdir)}),  # its scratch space, removed
        local_cluster(args.workers) as cluster,
        Client(cluster) as client,
    ):
        scheduler_file = workdir / "scheduler.json"
        scheduler_file.write_text(json.dumps({"address": cluster.scheduler_address}))
        arrived: list[float] = []
        adapter = Adapter(client, timeout=TIMEOUT)

        def take() -> None:
            try:
                for _, _array in adapter["block"].items():
                    arrived.append(time.time())
            except Exception as exc:  # the writer failed and the client is closing
                arrived.append(float("nan"))
                print(f"  the Adapter stopped: {exc}", flush=True)

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        parameters = {"PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine",
                      "SchedulerFile": str(scheduler_file)}  # fmt: skip
        env = child_env(ADIOS2_PLUGIN_PATH=str(engine_dir), TMPDIR=str(workdir))
        result = run_writer(binary, "plugin", parameters, "deisa.bp", args, mib, env, workdir,
                            "deisa")  # fmt: skip
        taker.join(TIMEOUT)
        result["arrived"] = arrived
    return result


def run_bp5(binary: Path, args: Any, mib: int, workdir: Path) -> dict[str, Any]:
    target = workdir / "out.bp"
    env = child_env(TMPDIR=str(workdir))
    try:
        return run_writer(binary, "BP5", {}, str(target), args, mib, env, workdir, "BP5")
    finally:
        shutil.rmtree(target, ignore_errors=True)


def run_sst(args: Any, mib: int, workdir: Path) -> dict[str, Any]:
    """The SST lane: a Python reader and a Python writer per rank (no MPI: the wheel has none),
    combined as the slowest writer's and the last reader's time per step."""
    env = child_env(TMPDIR=str(workdir))
    py = [sys.executable, "-P", "-m", "bench._adios2_sst"]
    spawn = lambda *cmd: subprocess.Popen([*py, *cmd], env=env, stdout=subprocess.PIPE,  # noqa: E731
                                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    readers = [spawn("read", str(workdir / f"sst-{r}")) for r in range(args.ranks)]
    writers = [spawn("write", str(workdir), str(r), str(mib), str(args.steps), str(args.queue),
                     str(args.compute)) for r in range(args.ranks)]  # fmt: skip
    try:
        ends = [p.communicate(timeout=TIMEOUT) for p in writers + readers]
    finally:
        for proc in writers + readers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outs = []
    for proc, (out, err) in zip(writers + readers, ends, strict=True):
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        outs.append(_json_line(done, "an SST writer or reader"))
    wrote, read = outs[: args.ranks], outs[args.ranks :]
    result = {"ranks": args.ranks, "bytes_per_rank": wrote[0]["bytes_per_rank"]}
    for key in ("memcpy_s", "step_s"):
        result[key] = [max(times) for times in zip(*(w[key] for w in wrote), strict=True)]
    result["arrived"] = [max(times) for times in zip(*(r["arrived"] for r in read), strict=True)]
    return result


def summarize(lane: str, mib: int, compute: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians over every run's steps after the first, and the delivered bandwidth."""
    steps = [s for run in runs for s in run["step_s"][1:]]
    copies = [s for run in runs for s in run["memcpy_s"][1:]]
    moved = runs[0]["ranks"] * runs[0]["bytes_per_rank"]
    delivered = []
    for run in runs:
        times = run.get("arrived", [])
        if len(times) >= 2 and times[-1] > times[0]:
            delivered.append(moved * (len(times) - 1) / (times[-1] - times[0]) / 2**30)
    step, copy = median(steps), median(copies)
    return {"lane": lane, "mib": mib, "compute": compute, "ranks": runs[0]["ranks"], "step_s": step,
            "memcpy_s": copy, "bound_s": 2.5 * copy + 0.002,
            "writer_gib_s": moved / step / 2**30, "delivered_gib_s": median(delivered),
            "steps_seen": [len(run.get("arrived", [])) for run in runs]}  # fmt: skip


def targets_of(records: list[dict[str, Any]], skipped: dict[str, str]) -> list[Any]:
    """EndStep at the largest compute (bench.publish's method), bandwidth at the smallest."""
    targets: list[tuple[str, bool | None, str]] = []
    by = {(r["lane"], r["mib"], r["compute"]): r for r in records}
    computes = sorted({r["compute"] for r in records}) or [0]
    for mib in sorted({r["mib"] for r in records}):
        deisa = by.get(("deisa", mib, computes[-1]))
        what = f"deisa EndStep <= 2.5 x memcpy + 2 ms at {mib} MiB, compute {computes[-1]}"
        if deisa is None:
            targets.append((what, None, f"not measured: {skipped.get('deisa')}"))
        else:
            measured = (
                f"{1000 * deisa['step_s']:.2f} ms vs bound "
                f"{1000 * deisa['bound_s']:.2f} ms (memcpy {1000 * deisa['memcpy_s']:.2f})"
            )
            targets.append((what, deisa["step_s"] <= deisa["bound_s"], measured))  # fmt: skip
        deisa, sst = by.get(("deisa", mib, computes[0])), by.get(("SST", mib, computes[0]))
        what = f"deisa delivers ahead of SST at {mib} MiB, compute {computes[0]}"
        if deisa is None or sst is None:
            why = skipped.get("deisa") or skipped.get("SST")
            targets.append((what, None, f"not measured: {why}"))
        else:
            ours, theirs = deisa["delivered_gib_s"], sst["delivered_gib_s"]
            targets.append((what, ours > theirs, f"{ours:.2f} vs {theirs:.2f} GiB/s"))
    return targets


def print_table(records: list[dict[str, Any]]) -> None:
    rows = [[r["mib"], r["compute"], r["lane"], r["ranks"], f"{1000 * r['step_s']:.2f}",
             f"{1000 * r['memcpy_s']:.2f}", f"{r['step_s'] / r['memcpy_s']:.1f}",
             f"{1000 * r['bound_s']:.2f}", f"{r['writer_gib_s']:.2f}",
             "-" if r["lane"] == "BP5" else f"{r['delivered_gib_s']:.2f}"]
            for r in records]  # fmt: skip
    headers = ["MiB/rank", "compute", "lane", "ranks", "step ms", "memcpy ms", "step/memcpy",
               "2.5 memcpy + 2 ms", "writer GiB/s", "delivered GiB/s"]  # fmt: skip
    print(table(headers, rows), flush=True)


def lanes_here() -> tuple[dict[str, Callable[..., dict[str, Any]]], dict[str, str]]:
    """The lanes that can run here, and why the others cannot."""
    runners: dict[str, Callable[..., dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    binary, why = build_writer()
    engine_dir = find_engine()
    if binary is None:
        skipped["deisa"] = skipped["BP5"] = why
    else:
        runners["BP5"] = lambda a, m, w: run_bp5(binary, a, m, w)
        if engine_dir is None:
            built = BUILD / "plugin" / "adios2"
            skipped["deisa"] = (f"{ENGINE_FILE} not found (built in {built} by CMake where it "
                                "finds ADIOS2, or on ADIOS2_PLUGIN_PATH)")  # fmt: skip
        else:
            runners["deisa"] = lambda a, m, w: run_deisa(binary, engine_dir, a, m, w)
    reason = sst_available()
    if reason is None:
        runners["SST"] = run_sst
    else:
        skipped["SST"] = reason
    return {lane: runners[lane] for lane in LANES if lane in runners}, skipped


def run_lanes(
    runners: dict[str, Callable[..., dict[str, Any]]], args: Any, mib: int,
    skipped: dict[str, str], logs: dict[str, str],
) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Every lane's ``--repeats`` runs at ``mib`` and ``args.compute``, in turns; a lane that
    fails is left out from here on (``runners``), with why (``skipped``) and its log."""
    runs: dict[str, list[dict[str, Any]]] = {lane: [] for lane in runners}
    for r in range(args.repeats):
        for lane in list(runners)[:: 1 if r % 2 == 0 else -1]:
            print(f"{mib} MiB, compute {args.compute}, {lane} ...", flush=True)
            try:
                with tempfile.TemporaryDirectory(prefix="deisa-bench-adios2-") as tmp:
                    runs[lane].append(runners[lane](args, mib, Path(tmp)))
            except LaneFailedError as exc:  # the lane is left out from here on
                print(f"lane {lane} failed at {mib} MiB: {exc}", flush=True)
                skipped[lane], logs[lane] = f"failed at {mib} MiB: {exc}", exc.log
                del runners[lane], runs[lane]
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,16,64", help="MiB per rank and step")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="Dask workers (deisa lane)")
    parser.add_argument("--steps", type=int, default=20, help="steps per run (the first: warm-up)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per lane and size, in turns")
    parser.add_argument("--queue", type=int, default=4, help="SST QueueLimit (steps buffered)")
    parser.add_argument("--compute", default="0,40",
                        help="untimed passes over the block per step, one run each")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="--sizes 1,16 --steps 8")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.steps = "1,16", 8
    args.out.mkdir(parents=True, exist_ok=True)
    runners, skipped = lanes_here()
    for lane, why in skipped.items():
        print(f"lane {lane} skipped: {why}", flush=True)
    records, load = [], [loadavg()]
    logs: dict[str, str] = {}
    computes = [int(c) for c in args.compute.split(",")]
    for mib in [int(s) for s in args.sizes.split(",")]:
        for compute in computes:
            runs = run_lanes(runners, argparse.Namespace(**{**vars(args), "compute": compute}),
                             mib, skipped, logs)  # fmt: skip
            records += [
                summarize(lane, mib, compute, lane_runs) for lane, lane_runs in runs.items()
            ]
            load.append(loadavg())
    print_table(records)
    return finish(args.out, "adios2_endstep", targets_of(records, skipped), records=records,
                  skipped=skipped, failure_logs=logs, loadavg=load, steps=args.steps,
                  repeats=args.repeats, sst_queue=args.queue, compute=computes)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
