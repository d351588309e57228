"""Bridge bandwidth against the machine's peaks and against its peers, on the same bytes.

    python -m bench.bandwidth --out results/            # ~1 minute; --quick: ~30 s

For each block size (1, 16, 64 MiB of float64 by default), the same numpy array is moved
``--repeat`` times by every path below, one after the other in the same run, and the median
time per block gives the bandwidth (GiB/s = block bytes / time):

``memcpy``              ``np.copyto`` into a preallocated array (the memory peak);
``raw TCP``             loopback TCP stream to another process: ``sendall`` of a length and the
                        bytes, ``recv_into`` a preallocated buffer there, one byte back;
``dask scatter``        ``client.scatter(block, workers=[w], direct=True, hash=False)`` to a
                        worker process (returns when the worker holds it, scheduler told);
``deisa send``          the transfer part of each ``Bridge.publish`` below (``send_s``:
                        ``send_blocks_to_worker``, the worker's ``update_data`` RPC);
``deisa publish``       a full ``Bridge.publish`` with one MPI rank (transfer, then the step's
                        registration on the scheduler);
``deisa-dask 0.6.3``    its ``Bridge.send`` (run in the venv ``--venv``, if it can be installed
                        and works with this distributed; otherwise the failure is recorded);
``adios2 SST``          ADIOS2's SST engine (writer process -> this process over TCP/WAN
                        data plane), then ``client.scatter`` of the block to the worker.

Dask runs as ``LocalCluster(n_workers=1, threads_per_worker=1, processes=True)``. Writes
``bandwidth.json`` and ``bandwidth.png``. Targets: deisa's transfer >= 80 % of raw TCP, and
deisa >= 2x deisa-dask, at the largest block.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import (
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

PATHS = (
    "memcpy",
    "raw TCP",
    "dask scatter",
    "deisa send",
    "deisa publish",
    "deisa-dask 0.6.3",
    "adios2 SST",
)


# -- raw TCP -------------------------------------------------------------------------------


def _tcp_receiver(conn_pipe: Any) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    conn_pipe.send(server.getsockname()[1])
    sock, _ = server.accept()
    buffer = bytearray(0)
    header = bytearray(8)
    while True:
        view = memoryview(header)
        while view:
            n = sock.recv_into(view)
            if n == 0:
                return
            view = view[n:]
        (size,) = struct.unpack("Q", header)
        if size == 0:
            return
        if len(buffer) < size:
            buffer = bytearray(size)
        view = memoryview(buffer)[:size]
        while view:
            view = view[sock.recv_into(view) :]
        sock.sendall(b"k")


def time_tcp(blocks: dict[int, np.ndarray], repeat: int) -> dict[int, list[float]]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_tcp_receiver, args=(child,), daemon=True)
    proc.start()
    port = parent.recv()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out: dict[int, list[float]] = {}
    try:
        for size, block in blocks.items():
            payload = memoryview(block).cast("B")
            times = []
            for r in range(repeat + 1):  # the first is a warm-up (buffer allocation)
                t0 = time.perf_counter()
                sock.sendall(struct.pack("Q", block.nbytes))
                sock.sendall(payload)
                sock.recv(1)
                if r:
                    times.append(time.perf_counter() - t0)
            out[size] = times
        sock.sendall(struct.pack("Q", 0))
    finally:
        sock.close()
        proc.join(timeout=10)
    return out


# -- memcpy --------------------------------------------------------------------------------


def time_memcpy(blocks: dict[int, np.ndarray], repeat: int) -> dict[int, list[float]]:
    out = {}
    for size, block in blocks.items():
        target = np.empty_like(block)
        np.copyto(target, block)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            np.copyto(target, block)
            times.append(time.perf_counter() - t0)
        out[size] = times
    return out


# -- Dask paths ----------------------------------------------------------------------------


def time_scatter(client: Any, worker: str, blocks: dict[int, np.ndarray], repeat: int) -> Any:
    out = {}
    for size, block in blocks.items():
        times = []
        for r in range(repeat + 1):
            t0 = time.perf_counter()
            future = client.scatter(block, workers=[worker], direct=True, hash=False)
            elapsed = time.perf_counter() - t0
            if r:
                times.append(elapsed)
            future.release()
            del future
        out[size] = times
    return out


def time_deisa_publish(
    client: Any, address: str, blocks: dict[int, np.ndarray], repeat: int, workdir: Path
) -> Any:
    """Full ``Bridge.publish`` (1 rank, COMM_SELF, ``mode="sync"``: a publish returns once its
    step is registered, which this loop waits for; in async mode the first step is registered
    only at the next publish); the Adapter takes every step so the worker's memory is freed as
    it goes."""
    from mpi4py import MPI

    from deisa import Adapter, ArraySpec, Bridge

    scheduler_file = workdir / "scheduler.json"
    scheduler_file.write_text(json.dumps({"address": address}))
    out: dict[int, dict[str, list[float]]] = {}
    adapter = Adapter(client, timeout=60)
    for size, block in blocks.items():
        name = f"b{size}"
        field = block.reshape(1, -1)
        spec = ArraySpec("float64", global_shape=field.shape, start=(0, 0), shape=field.shape)
        with Bridge(str(scheduler_file), {name: spec}, comm=MPI.COMM_SELF, mode="sync") as bridge:
            descriptor = adapter[name]
            for step in range(repeat + 1):
                bridge.publish(name, field, step)
                descriptor[step, :, :]  # take it: the keys pass to this client
        timings = bridge.timings[1:]
        out[size] = {
            "total": [t.send_s + t.sync_s for t in timings],
            "send": [t.send_s for t in timings],
            "sync": [t.sync_s for t in timings],
        }
    return out


def time_deisa_dask(
    venv: Path | None, address: str, sizes: list[int], repeat: int, workdir: Path
) -> tuple[dict[int, list[float]] | None, str]:
    """deisa-dask 0.6.3's ``Bridge.send`` in the venv, one MPI rank; returns times or why not."""
    if venv is None or not (venv / "bin" / "python").exists():
        return None, f"failed: no venv at {venv} (see --venv)"
    script = workdir / "deisa_dask_send.py"
    script.write_text(DEISA_DASK_RUNNER)
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


DEISA_DASK_RUNNER = r'''
"""deisa-dask 0.6.3: time Bridge.send of one rank's block (run in its own venv)."""
import json, os, sys, time
import numpy as np
from mpi4py import MPI



def main():
    sizes, repeat, out = json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    from distributed import LocalCluster
    from deisa.dask import Bridge  # deisa-dask's package, in the venv

    # its own cluster, of the same shape, started from the venv: deisa-dask's handshake actor must
    # be importable on the scheduler and workers (there, ``deisa`` is deisa-dask's namespace)
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None, memory_limit=0)
    os.environ["DEISA_DASK_SCHEDULER_ADDRESS"] = cluster.scheduler.address

    results = {}
    for size in sizes:
        n = size // 8
        block = np.random.default_rng(0).random(n).reshape(1, n)
        name = f"b{size}"
        meta = {name: {"global_shape": [1, n], "chunk_shape": [1, n], "chunk_position": [0, 0]}}
        bridge = Bridge(MPI.COMM_SELF, meta, wait_for_go=False)
        times = []
        for r in range(repeat + 1):
            t0 = time.perf_counter()
            bridge.send(name, block, r)
            if r:
                times.append(time.perf_counter() - t0)
        results[size] = times
        try:
            bridge.close(repeat)
        except Exception:
            pass
    json.dump(results, open(out, "w"))
    cluster.close()


if __name__ == "__main__":  # the cluster's nanny re-imports this file
    main()
'''


ADIOS_WRITER = r"""
import sys, numpy as np
import adios2.bindings as ab
name, sizes, repeat = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
adios = ab.ADIOS()
io = adios.DeclareIO("w")
io.SetEngine("SST")
io.SetParameters({"RendezvousReaderCount": "1", "QueueLimit": "1", "DataTransport": "WAN",
                  "OpenTimeoutSecs": "60"})
engine = io.Open(name, ab.Mode.Write)
for size in sizes:
    block = np.random.default_rng(0).random(size // 8)
    var = io.DefineVariable(f"b{size}", block, [block.size], [0], [block.size], True)
    for r in range(repeat + 1):
        engine.BeginStep()
        engine.Put(var, block, ab.Mode.Sync)
        engine.EndStep()
engine.Close()
"""


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
    script = workdir / "adios_writer.py"
    script.write_text(ADIOS_WRITER)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64], help="MiB")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="--repeat 5")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/bench-venv"),
                        help="venv with deisa-dask 0.6.3 (pip install --no-deps)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = min(args.repeat, 5)
    args.out.mkdir(parents=True, exist_ok=True)
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


if __name__ == "__main__":
    raise SystemExit(main())
