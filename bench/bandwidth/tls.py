"""``python -m bench.bandwidth --tls``: TLS against plain TCP, side by side, lane by lane, and
what TLS costs apart (``openssl speed``, the record layer in memory, the worker's reads)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._common import (
    PINS,
    GiB,
    MiB,
    TLSFiles,
    finish,
    loadavg,
    local_cluster,
    median,
    table,
    tls_credentials,
)

os.environ.update(PINS)

import numpy as np

from .lanes import (
    DaskComm,
    Stream,
    cpu_s,
    read_syscalls,
    time_scatter_in_turns,
    turns,
)

OPENSSL_CIPHERS = ("aes-128-gcm", "aes-256-gcm", "chacha20-poly1305")
"""The AEAD ciphers of TLS's suites, timed by ``openssl speed`` (``--tls``)."""


def openssl_speed(ciphers: Sequence[str] = OPENSSL_CIPHERS, seconds: int = 1) -> dict[str, Any]:
    """``openssl speed -evp <cipher> -bytes 16384``: GB/s of each cipher on one core, on TLS
    records' 16 KiB (None where the ``openssl`` program is missing or fails)."""
    out: dict[str, Any] = {}
    for cipher in ciphers:
        cmd = ["openssl", "speed", "-evp", cipher, "-bytes", "16384", "-seconds", str(seconds)]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            # the last line: "<NAME>  <n>k", thousands of bytes per second
            out[cipher] = float(run.stdout.strip().splitlines()[-1].split()[-1].rstrip("k")) / 1e6
        except (OSError, subprocess.SubprocessError, IndexError, ValueError):
            out[cipher] = None
    return out


# -- TLS against TCP (--tls) ---------------------------------------------------------------

TLS_PATHS = ("raw stream", "dask comm", "dask scatter", "deisa send", "deisa publish")
TLS12 = "tls 1.2"
"""The lane ``--tls12`` adds: TLS 1.2 with :data:`TLS12_CIPHERS` only."""
TLS12_CIPHERS = "ECDHE+AESGCM"
"""OpenSSL's cipher string for the suites with an ephemeral key exchange (forward secrecy)
and AES-GCM (AEAD), whatever the key of the certificate."""


def tls_lanes(tls: TLSFiles, tls12: bool = False) -> dict[str, TLSFiles | None]:
    """What ``--tls`` compares: ``{lane: credentials}``, ``None`` for plain TCP. ``tls`` with
    the run's settings (distributed's defaults unless ``--tls-max-version`` or
    ``--tls-ciphers``); with ``tls12``, also :data:`TLS12`: the same files, TLS 1.2 and
    :data:`TLS12_CIPHERS`."""
    lanes: dict[str, TLSFiles | None] = {"tcp": None, "tls": tls}
    if tls12:
        lanes[TLS12] = dataclasses.replace(tls, max_version=1.2, ciphers=TLS12_CIPHERS)
    return lanes


def time_ssl_in_memory(
    blocks: dict[int, np.ndarray], repeat: int, tls: TLSFiles
) -> dict[int, dict[str, list[float]]]:
    """The TLS record layer alone, one thread, no socket: a client and a server
    ``ssl.SSLObject`` over memory BIOs, with the contexts Dask makes from ``tls``; seconds to
    encrypt each block (``write``) and to decrypt it (``read`` into a preallocated buffer,
    one record per call as on a socket)."""
    import ssl

    security = tls.security()
    client_ctx = security.get_connection_args("client")["ssl_context"]
    server_ctx = security.get_listen_args("scheduler")["ssl_context"]
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):  # the handshake, pumped by hand
        for end in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                end.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    out: dict[int, dict[str, list[float]]] = {}
    for size, block in blocks.items():
        payload = memoryview(block).cast("B")
        target = bytearray(size)
        out[size] = {"encrypt": [], "decrypt": []}
        for r in range(repeat + 1):
            t0 = time.perf_counter()
            client.write(payload)
            t1 = time.perf_counter()
            s_in.write(c_out.read())
            t2 = time.perf_counter()
            view = memoryview(target)
            while view:
                view = view[server.read(len(view), view) :]
            t3 = time.perf_counter()
            if r:  # the first is a warm-up
                out[size]["encrypt"].append(t1 - t0)
                out[size]["decrypt"].append(t3 - t2)
    return out


def tls_records(samples: dict[tuple[str, str, int], list[float]]) -> list[dict[str, Any]]:
    """One record per (path, protocol, block size): its samples (``seconds``, or ``counts``
    for ``receiver reads``) and their median, and the bandwidth for the transfer paths."""
    records = []
    for (path, proto, size), seconds in samples.items():
        record: dict[str, Any] = {"path": path, "protocol": proto, "block_bytes": size}
        if path == "receiver reads":
            record.update(counts=seconds, median=median(seconds))
            records.append(record)
            continue
        record.update(seconds=seconds, median_s=median(seconds))
        if path in TLS_PATHS:
            record["gib_per_s"] = size / GiB / median(seconds)
            record["best_gib_per_s"] = size / GiB / min(seconds)
        records.append(record)
    return records


def tls_ratio(
    records: list[dict[str, Any]], path: str, size: int, lane: str = "tls"
) -> float | None:
    """``lane``'s bandwidth over TCP's for ``path`` at ``size`` bytes (None: not measured)."""
    bw = {r["protocol"]: r.get("gib_per_s") for r in records
          if r["path"] == path and r["block_bytes"] == size}  # fmt: skip
    if not bw.get("tcp") or not bw.get(lane):
        return None
    return float(bw[lane] / bw["tcp"])


def main_tls(args: argparse.Namespace) -> int:
    sizes = [s * MiB for s in args.sizes]
    blocks = {s: np.random.default_rng(0).random(s // 8) for s in sizes}
    load_before = loadavg()
    print(f"TLS against TCP, one block to one worker, taking turns: median (best) of "
          f"{args.repeat}; load {load_before}", flush=True)  # fmt: skip
    with (
        tls_credentials(args.tls_ciphers, args.tls_max_version) as tls,
        tempfile.TemporaryDirectory() as tmp,
    ):  # fmt: skip
        print(f"  credentials: {1e3 * (tls.import_s + tls.generate_s):.0f} ms (import "
              f"{1e3 * tls.import_s:.0f} ms, key and certificate {1e3 * tls.generate_s:.0f} ms)",
              flush=True)  # fmt: skip
        lanes = tls_lanes(tls, args.tls12)
        result = time_side_by_side(blocks, args.repeat, lanes, Path(tmp))
        credentials = {"import_s": tls.import_s, "generate_s": tls.generate_s,
                       "ciphers": tls.ciphers, "max_version": tls.max_version,
                       "lanes": {lane: None if f is None else {"ciphers": f.ciphers,
                                                               "max_version": f.max_version}
                                 for lane, f in lanes.items()}}  # fmt: skip
    load_after = loadavg()
    records = tls_records(result["samples"])
    secure = [lane for lane in lanes if lane != "tcp"]
    rows = []
    for path in TLS_PATHS:
        for lane in lanes:
            row: list[Any] = [path, lane]
            for s in sizes:
                r = next(r for r in records if (r["path"], r["protocol"], r["block_bytes"]) ==
                         (path, lane, s))  # fmt: skip
                row.append(f"{r['gib_per_s']:.2f} ({r['best_gib_per_s']:.2f}) GiB/s")
            rows.append(row)
        for lane in secure:
            ratios = [tls_ratio(records, path, s, lane) for s in sizes]
            rows.append(
                [path, f"{lane} / tcp", *("-" if x is None else f"{100 * x:.0f} %" for x in ratios)]
            )
    print(table(["path", "protocol", *[f"{s // MiB} MiB" for s in sizes]], rows))
    info = result["info"]
    print("openssl speed -evp, 16 KiB records, one core: " + ", ".join(
        f"{c} {'-' if v is None else f'{v:.2f} GB/s'}"
        for c, v in info["openssl speed GB/s"].items()))  # fmt: skip
    for lane in secure:
        print(f"cipher, {lane}: Dask {info[f'dask cipher {lane}']}, "
              f"raw stream {info[f'raw stream cipher {lane}']}")  # fmt: skip
    for s in sizes:
        cpu = {(r["path"], r["protocol"]): 1e3 * r["median_s"] for r in records
               if r["block_bytes"] == s and r["path"].endswith(" cpu")}  # fmt: skip
        reads = {r["protocol"]: r["median"] for r in records
                 if r["block_bytes"] == s and r["path"] == "receiver reads"}  # fmt: skip
        ssl_ms = {(r["path"], r["protocol"]): 1e3 * r["median_s"] for r in records
                  if r["block_bytes"] == s and r["path"].startswith("ssl ")}  # fmt: skip
        print(f"{s // MiB} MiB, deisa publish CPU ms per block, sender / receiver: "
              + ", ".join(f"{lane} {cpu['sender cpu', lane]:.1f} / "
                          f"{cpu['receiver cpu', lane]:.1f}" for lane in lanes))  # fmt: skip
        for lane in secure:
            print(f"  {lane}: TLS records alone (memory, one thread): encrypt "
                  f"{ssl_ms['ssl encrypt', lane]:.1f} ms, decrypt {ssl_ms['ssl decrypt', lane]:.1f}"
                  f" ms; OpenSSL's read() calls per block in the worker: {reads[lane]:.0f}; raw "
                  f"stream: {info[f'raw stream reads per block {lane} {s}']:.0f} recv_into per "
                  "block")  # fmt: skip
    print(f"load {load_before} before, {load_after} after")
    target = 16 * MiB
    targets = []
    for lane in secure:
        description = f"TLS costs <= 15% of deisa publish bandwidth at 16 MiB ({lane})"
        ratio = tls_ratio(records, "deisa publish", target, lane)
        if ratio is None:
            targets.append((description, None, "16 MiB not measured (--sizes)"))
            continue
        tcp, tls_bw = (next(r["gib_per_s"] for r in records if r["path"] == "deisa publish"
                            and r["protocol"] == p and r["block_bytes"] == target)
                       for p in ("tcp", lane))  # fmt: skip
        targets.append((description, ratio >= 0.85,
                        f"TLS {tls_bw:.2f} vs TCP {tcp:.2f} GiB/s: {100 * ratio:.0f} % "
                        f"(costs {100 * (1 - ratio):.0f} %)"))  # fmt: skip
    for key in [k for k in info if k.startswith("raw stream cipher")]:
        info[key] = list(info[key] or [])
    return finish(
        args.out, "bandwidth_tls", targets, repeat=args.repeat, credentials=credentials,
        load_before=load_before, load_after=load_after, records=records, info=info,
    )  # fmt: skip


def time_side_by_side(
    blocks: dict[int, np.ndarray], repeat: int, lanes: dict[str, TLSFiles | None], workdir: Path
) -> dict[str, Any]:
    """Every path of :data:`TLS_PATHS` over each lane of :func:`tls_lanes`, the lanes taking
    turns at every repetition (same block, same load). Samples are keyed ``(path, lane,
    bytes)``; for ``deisa publish``, also the CPU seconds of the sender (this process, all
    threads) and of the receiver (the worker process) per block. The Bridges send over the
    Dask connection (``transport="tcp"``), as to a worker on another node: on this node their
    default sends by shared memory, without TLS."""
    import dask
    from distributed import Client
    from mpi4py import MPI

    from deisa import Adapter, ArraySpec, Bridge

    samples: dict[tuple[str, str, int], list[float]] = {}
    info: dict[str, Any] = {}

    def add(path: str, proto: str, size: int, value: float) -> None:
        samples.setdefault((path, proto, size), []).append(value)

    names = tuple(lanes)
    secure = {lane: files for lane, files in lanes.items() if files is not None}
    print("  openssl speed ...", flush=True)
    info["openssl speed GB/s"] = openssl_speed()
    print("  ssl in memory ...", flush=True)
    for lane, files in secure.items():
        for size, parts in time_ssl_in_memory(blocks, repeat, files).items():
            for part, seconds in parts.items():
                samples[f"ssl {part}", lane, size] = seconds
    for path, endpoint in (("raw stream", Stream), ("dask comm", DaskComm)):
        print(f"  {path} ...", flush=True)
        ends = {lane: endpoint(files) for lane, files in lanes.items()}
        try:
            for lane in secure:
                info[f"{path} cipher {lane}"] = ends[lane].cipher
            for size, block in blocks.items():
                for end in ends.values():
                    end.send(block)  # warm-up
                    if isinstance(end, Stream):
                        end.reads.clear()
                for r in range(repeat):
                    for lane in turns(r, names):
                        add(path, lane, size, ends[lane].send(block))
                for lane in secure:
                    end = ends[lane]
                    if isinstance(end, Stream):
                        info[f"{path} reads per block {lane} {size}"] = median(end.reads)
        finally:
            for end in ends.values():
                end.close()

    with contextlib.ExitStack() as stack:
        securities = {lane: files.security() for lane, files in secure.items()}
        clusters = {lane: stack.enter_context(local_cluster(1, securities.get(lane)))
                    for lane in names}  # fmt: skip
        clients = {lane: stack.enter_context(Client(c, security=securities.get(lane)))
                   for lane, c in clusters.items()}  # fmt: skip
        # The Bridges' and the Adapters' settings (tcp:// ignores them): the tls lane's. A
        # worker of another lane imposes its own version and suites (the server's choice).
        stack.enter_context(dask.config.set(lanes["tls"].config()))  # type: ignore[union-attr]
        addresses = {lane: c.scheduler.address for lane, c in clusters.items()}
        for lane in secure:
            info[f"dask cipher {lane}"] = clients[lane].scheduler_comm.comm.extra_info.get("cipher")
        workers = {p: next(iter(c.nthreads())) for p, c in clients.items()}
        pids = {p: next(iter(c.run(os.getpid).values())) for p, c in clients.items()}
        time_scatter_in_turns(clients, workers, blocks, repeat, lambda r: turns(r, names), add)
        print("  deisa publish ...", flush=True)
        adapters = {p: Adapter(c, timeout=60) for p, c in clients.items()}
        for size, block in blocks.items():
            name = f"b{size}"
            field = block.reshape(1, -1)
            spec = ArraySpec("float64", global_shape=field.shape, start=(0, 0), shape=field.shape)
            bridges = {}
            for lane, address in addresses.items():
                scheduler_file = workdir / f"scheduler-{lane.replace(' ', '_')}.json"
                scheduler_file.write_text(json.dumps({"address": address}))
                bridges[lane] = Bridge(
                    str(scheduler_file), {name: spec}, comm=MPI.COMM_SELF, mode="sync",
                    transport="tcp",
                )  # fmt: skip
            try:
                descriptors = {p: adapters[p][name] for p in names}
                for step in range(repeat + 1):
                    for proto in turns(step, names):
                        reads = read_syscalls(pids[proto])
                        here, there = time.process_time(), cpu_s(pids[proto])
                        bridges[proto].publish(name, field, step)
                        if step:  # the first is a warm-up
                            add("sender cpu", proto, size, time.process_time() - here)
                            add("receiver cpu", proto, size, cpu_s(pids[proto]) - there)
                            add("receiver reads", proto, size, read_syscalls(pids[proto]) - reads)
                        descriptors[proto][step, :, :]  # take it: the worker's memory is freed
            finally:
                for bridge in bridges.values():
                    bridge.close()
            info[f"transport {size}"] = {lane: b.transport for lane, b in bridges.items()}
            for proto, bridge in bridges.items():
                for t in bridge.timings[1:]:
                    add("deisa send", proto, size, t.send_s)
                    add("deisa publish", proto, size, t.send_s + t.sync_s)
    return {"samples": samples, "info": info}
