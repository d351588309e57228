"""``python -m bench.bandwidth``: the Bridge's bandwidth against the machine's peaks (memcpy, raw
TCP) and against its peers (dask scatter, deisa-dask 0.6.3, ADIOS2 SST), on the same bytes.

The child scripts it runs are modules beside it: :mod:`.deisa_dask_sender` (in the deisa-dask
venv) and :mod:`.adios_writer` (ADIOS2's SST writer)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._common import (
    PINS,
    GiB,
    MiB,
    child_env,
    local_cluster,
    machine,
    median,
    print_targets,
    table,
    targets_json,
)

os.environ.update(PINS)

import numpy as np

from .lanes import time_deisa_publish, time_memcpy, time_scatter, time_tcp

PATHS = (
    "memcpy",
    "raw TCP",
    "dask scatter",
    "deisa send",
    "deisa publish",
    "deisa-dask 0.6.3",
    "adios2 SST",
)


def time_deisa_dask(
    venv: Path | None, address: str, sizes: list[int], repeat: int, workdir: Path
) -> tuple[dict[int, list[float]] | None, str]:
    """deisa-dask 0.6.3's ``Bridge.send`` in the venv, one MPI rank; returns times or why not."""
    if venv is None or not (venv / "bin" / "python").exists():
        return None, f"failed: no venv at {venv} (see --venv)"
    script = Path(__file__).with_name("deisa_dask_sender.py")
    result = workdir / "deisa_dask.json"
    # the venv's site-packages first, so that its ``deisa`` shadows this repository's
    env = child_env()
    env["PYTHONPATH"] = ""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(script), address, json.dumps(sizes), str(repeat),
         str(result)],
        env=env, capture_output=True, text=True, timeout=600, cwd=workdir,
    )  # fmt: skip
    if proc.returncode != 0 or not result.exists():
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        return None, "failed: " + (lines[-1] if lines else f"exit {proc.returncode}")
    data = json.loads(result.read_text())
    return {int(k): v for k, v in data.items()}, "ok"


def time_adios(
    client: Any,
    worker: str,
    blocks: dict[int, np.ndarray],
    repeat: int,
    workdir: Path,
    venv: Path | None,
) -> tuple[dict[int, list[float]] | None, str]:
    """SST writer in a child process; here: BeginStep, Get into a preallocated array,
    EndStep, then scatter to the worker. Time per block from one BeginStep to the next."""
    site = next(iter((venv or Path("/nonexistent")).glob("lib/python*/site-packages")), None)
    if site is not None and str(site) not in sys.path:
        sys.path.append(str(site))  # after the repository: its ``deisa`` stays ours
    try:
        import adios2.bindings as ab
    except Exception as exc:
        return None, f"failed: import adios2: {exc!r}"
    script = Path(__file__).with_name("adios_writer.py")
    name = str(workdir / "bench-sst")
    sizes = list(blocks)
    python = venv / "bin" / "python" if venv is not None else Path(sys.executable)
    env = child_env()
    env["PYTHONPATH"] = ""
    writer = subprocess.Popen(
        [str(python), str(script), name, ",".join(map(str, sizes)), str(repeat)],
        env=env, cwd=workdir, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out: dict[int, list[float]] = {}
    try:
        adios = ab.ADIOS()
        io = adios.DeclareIO("r")
        io.SetEngine("SST")
        io.SetParameters({"DataTransport": "WAN", "OpenTimeoutSecs": "60"})
        engine = io.Open(name, ab.Mode.Read)
        for size in sizes:
            target = np.empty(size // 8)
            times = []
            for r in range(repeat + 1):
                t0 = time.perf_counter()
                engine.BeginStep()
                var = io.InquireVariable(f"b{size}")
                engine.Get(var, target, ab.Mode.Sync)
                engine.EndStep()
                future = client.scatter(target, workers=[worker], direct=True, hash=False)
                if r:
                    times.append(time.perf_counter() - t0)
                future.release()
            out[size] = times
        engine.Close()
        writer.wait(timeout=60)
    except Exception as exc:
        writer.kill()
        _, err = writer.communicate()
        tail = err.strip().splitlines()[-1:] if err else []
        return None, f"failed: {type(exc).__name__}: {str(exc)[-200:]!r} writer: {tail}"
    return out, "ok"


# -- driver --------------------------------------------------------------------------------


def run(sizes_mib: list[int], repeat: int, venv: Path | None) -> dict[str, Any]:
    from distributed import Client

    sizes = [s * MiB for s in sizes_mib]
    blocks = {s: np.random.default_rng(0).random(s // 8) for s in sizes}
    times: dict[str, dict[int, list[float]] | None] = {}
    status: dict[str, str] = {}
    extra: dict[str, Any] = {}

    def attempt(path: str, fn: Callable[[], Any]) -> None:
        print(f"  {path} ...", flush=True)
        try:
            value = fn()
            if isinstance(value, tuple):
                value, status[path] = value
            else:
                status[path] = "ok"
            times[path] = value
        except Exception as exc:
            traceback.print_exc()
            times[path] = None
            status[path] = f"failed: {type(exc).__name__}: {exc}"

    attempt("memcpy", lambda: time_memcpy(blocks, repeat))
    attempt("raw TCP", lambda: time_tcp(blocks, repeat))
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_cluster(1) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        worker = next(iter(client.nthreads()))
        address = cluster.scheduler.address
        attempt("dask scatter", lambda: time_scatter(client, worker, blocks, repeat))

        def publish() -> dict[int, list[float]]:
            res = time_deisa_publish(client, address, blocks, repeat, Path(tmp))
            extra["deisa publish parts"] = res
            times["deisa send"] = {s: v["send"] for s, v in res.items()}
            status["deisa send"] = "ok (the send part of each Bridge.publish)"
            return {s: v["total"] for s, v in res.items()}

        attempt("deisa publish", publish)
        attempt(
            "deisa-dask 0.6.3", lambda: time_deisa_dask(venv, address, sizes, repeat, Path(tmp))
        )
        attempt("adios2 SST", lambda: time_adios(client, worker, blocks, repeat, Path(tmp), venv))
    records = []
    for path in PATHS:
        for size in sizes:
            t = times.get(path)
            sample = t.get(size) if t else None
            records.append(
                {
                    "path": path,
                    "block_bytes": size,
                    "status": status.get(path, "not run"),
                    "seconds": sample,
                    "median_s": median(sample) if sample else None,
                    "gib_per_s": size / GiB / median(sample) if sample else None,
                    "best_gib_per_s": size / GiB / min(sample) if sample else None,
                }
            )
    return {"records": records, "status": status, "extra": extra}


def check_targets(records: list[dict[str, Any]], largest: int) -> list[tuple[str, Any, str]]:
    def bw(path: str) -> float | None:
        return next(
            r["gib_per_s"] for r in records if r["path"] == path and r["block_bytes"] == largest
        )

    mib = largest // MiB
    tcp, send, publish, dd = (
        bw("raw TCP"),
        bw("deisa send"),
        bw("deisa publish"),
        bw("deisa-dask 0.6.3"),
    )
    targets: list[tuple[str, Any, str]] = []
    for label, ours in (("deisa send", send), ("deisa publish", publish)):
        if ours is None or tcp is None:
            targets.append((f"{label} >= 80% of raw TCP at {mib} MiB", None, "not measured"))
        else:
            targets.append(
                (
                    f"{label} >= 80% of raw TCP at {mib} MiB",
                    ours >= 0.8 * tcp,
                    f"{ours:.2f} vs {tcp:.2f} GiB/s ({100 * ours / tcp:.0f}%)",
                )
            )
    if publish is None or dd is None:
        status = next(r["status"] for r in records if r["path"] == "deisa-dask 0.6.3")
        targets.append((f"deisa publish >= 2x deisa-dask at {mib} MiB", None, status))
    else:
        targets.append(
            (
                f"deisa publish >= 2x deisa-dask at {mib} MiB",
                publish >= 2 * dd,
                f"{publish:.2f} vs {dd:.2f} GiB/s ({publish / dd:.1f}x)",
            )
        )
    return targets


def plot(records: list[dict[str, Any]], sizes: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(PATHS)
    for k, name in enumerate(PATHS):
        values = [
            next(r["gib_per_s"] or 0 for r in records if (r["path"], r["block_bytes"]) == (name, s))
            for s in sizes
        ]
        ax.bar(np.arange(len(sizes)) + k * width, values, width, label=name)
    ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2, [f"{s // MiB} MiB" for s in sizes])
    ax.set_yscale("log")
    ax.set_ylabel("GiB/s (median)")
    ax.set_title("One block to one Dask worker, same bytes every path")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main_peaks(args: argparse.Namespace) -> int:
    """The default benchmark: every path of :data:`PATHS`, the targets, ``bandwidth.json`` and
    ``bandwidth.png``."""
    sizes = [s * MiB for s in args.sizes]
    print(f"Bandwidth, one block to one worker: median (best) of {args.repeat}", flush=True)
    result = run(args.sizes, args.repeat, args.venv)
    records = result["records"]
    rows = []
    for name in PATHS:
        row: list[Any] = [name]
        for s in sizes:
            r = next(r for r in records if r["path"] == name and r["block_bytes"] == s)
            row.append(
                f"{r['gib_per_s']:.2f} ({r['best_gib_per_s']:.2f}) GiB/s" if r["gib_per_s"] else "-"
            )
        row.append(result["status"].get(name, "not run")[:60])
        rows.append(row)
    print(table(["path", *[f"{s // MiB} MiB" for s in sizes], "status"], rows))
    parts = result["extra"].get("deisa publish parts")
    if parts:
        for s, v in parts.items():
            print(
                f"deisa publish {s // MiB} MiB: send {1e3 * median(v['send']):.1f} ms, "
                f"scheduler sync {1e3 * median(v['sync']):.1f} ms"
            )
    targets = check_targets(records, max(sizes))
    print_targets(targets)
    (args.out / "bandwidth.json").write_text(
        json.dumps(
            {"machine": machine(), "repeat": args.repeat, **result,
             "targets": targets_json(targets)},
            indent=1,
        )
    )  # fmt: skip
    plot(records, sizes, args.out / "bandwidth.png")
    print(f"wrote {args.out / 'bandwidth.json'} and {args.out / 'bandwidth.png'}")
    return 0 if all(p is not False for _, p, _ in targets) else 1
