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

``--protocol ucx`` (issue 35) measures instead UCX (distributed-ucxx installed) against plain
TCP and the Bridge's shared memory, side by side: a cluster of one worker per protocol,
``dask scatter`` over tcp and ucx, ``deisa send`` and ``deisa publish`` over tcp and ucx
(``transport="tcp"``: the Dask connection) and over shared memory (the tcp cluster,
``transport="auto"``), the lanes taking turns at every repetition; also the CPU per block of
the sender and of the worker, and each worker's CPU while idle. No target. Writes
``bandwidth_ucx.json``.

``--tls`` (issue #33) measures instead TLS against plain TCP, side by side: fresh credentials
for the run (``bench._common.tls_credentials``), two clusters of one worker (``tcp://`` and
``tls://`` only), and ``raw stream``, ``dask comm`` (distributed's comm alone, :class:`_DaskComm`),
``dask scatter``, ``deisa send`` and ``deisa publish`` (``transport="tcp"``: as to another node)
over both, the protocols taking turns at every repetition. It also times ``openssl speed`` of the
AEAD ciphers, the CPU per block of the sender and of the worker, the TLS record layer alone
(:func:`time_ssl_in_memory`) and the worker's ``read`` calls, and prints the cipher negotiated.
``--tls-max-version`` and ``--tls-ciphers`` set distributed's TLS settings on both ends;
``--tls12`` adds a lane of TLS 1.2 limited to :data:`TLS12_CIPHERS`. Target: TLS costs <= 15 % of
``deisa publish``'s bandwidth at 16 MiB. Writes ``bandwidth_tls.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._common import (
    PINS,
    GiB,
    MiB,
    TLSFiles,
    child_env,
    finish,
    loadavg,
    local_cluster,
    machine,
    median,
    print_targets,
    table,
    targets_json,
    tls_credentials,
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


OPENSSL_CIPHERS = ("aes-128-gcm", "aes-256-gcm", "chacha20-poly1305")
"""The AEAD ciphers of TLS's suites, timed by ``openssl speed`` (``--tls``)."""

# -- raw TCP -------------------------------------------------------------------------------


def _tcp_receiver(conn_pipe: Any, tls: TLSFiles | None = None) -> None:
    """Receive blocks on a loopback socket until a zero length; reply one byte per block, or,
    with ``tls`` (the run's credentials, served as a Dask scheduler serves them), the number
    of ``recv_into`` calls the block took (4 bytes)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    conn_pipe.send(server.getsockname()[1])
    sock, _ = server.accept()
    if tls is not None:
        context = tls.security().get_listen_args("scheduler")["ssl_context"]
        sock = context.wrap_socket(sock, server_side=True)
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
        reads = 0
        while view:
            view = view[sock.recv_into(view) :]
            reads += 1
        sock.sendall(b"k" if tls is None else struct.pack("I", reads))


class _Stream:
    """A loopback stream to a receiver process (:func:`_tcp_receiver`); with ``tls`` (the
    run's :class:`~bench._common.TLSFiles`), TLS with the client context Dask would use."""

    def __init__(self, tls: TLSFiles | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_tcp_receiver, args=(child, tls), daemon=True)
        self.proc.start()
        sock = socket.create_connection(("127.0.0.1", parent.recv()))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tls = tls is not None
        self.cipher: Any = None
        if tls is not None:
            context = tls.security().get_connection_args("client")["ssl_context"]
            sock = context.wrap_socket(sock)
            self.cipher = (sock.version(), *sock.cipher())
        self.sock = sock
        self.reads: list[int] = []

    def send(self, block: np.ndarray) -> float:
        """Seconds to send ``block`` and hear back that all of it arrived."""
        t0 = time.perf_counter()
        self.sock.sendall(struct.pack("Q", block.nbytes))
        self.sock.sendall(memoryview(block).cast("B"))
        if self.tls:
            reply = bytearray(4)
            view = memoryview(reply)
            while view:
                view = view[self.sock.recv_into(view) :]
            elapsed = time.perf_counter() - t0
            self.reads.append(struct.unpack("I", reply)[0])
            return elapsed
        self.sock.recv(1)
        return time.perf_counter() - t0

    def close(self) -> None:
        try:
            self.sock.sendall(struct.pack("Q", 0))
        finally:
            self.sock.close()
            self.proc.join(timeout=10)


def _comm_receiver(conn_pipe: Any, tls: TLSFiles | None = None) -> None:
    """A listener of distributed's comm (``tcp://``, or ``tls://`` with ``tls`` as a worker
    serves it) on loopback: reads messages and answers each with one small message, until
    ``None``."""
    import asyncio

    from distributed.comm import listen

    async def serve() -> None:
        done = asyncio.Event()

        async def handle(comm: Any) -> None:
            while await comm.read() is not None:
                await comm.write(b"k")
            await comm.close()
            done.set()

        args = {} if tls is None else tls.security().get_listen_args("worker")
        listener = listen(f"{'tcp' if tls is None else 'tls'}://127.0.0.1:0", handle, **args)
        await listener.start()
        conn_pipe.send(listener.contact_address)
        await done.wait()
        listener.stop()

    asyncio.run(serve())


class _DaskComm:
    """One connection of distributed's comm (``distributed.comm.connect``) to a listener
    process (:func:`_comm_receiver`), on its own event loop in this thread; with ``tls``, the
    client's settings Dask makes from it."""

    def __init__(self, tls: TLSFiles | None = None) -> None:
        import asyncio

        from distributed.comm import connect

        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_comm_receiver, args=(child, tls), daemon=True)
        self.proc.start()
        self.loop = asyncio.new_event_loop()
        args = {} if tls is None else tls.security().get_connection_args("client")
        self.comm = self.loop.run_until_complete(connect(parent.recv(), **args))
        self.cipher = self.comm.extra_info.get("cipher")

    async def _send(self, block: np.ndarray) -> None:
        from distributed.protocol import to_serialize

        await self.comm.write({"block": to_serialize(block)})
        await self.comm.read()

    def send(self, block: np.ndarray) -> float:
        """Seconds to send ``block`` as one message and read the answer."""
        t0 = time.perf_counter()
        self.loop.run_until_complete(self._send(block))
        return time.perf_counter() - t0

    async def _close(self) -> None:
        await self.comm.write(None)
        await self.comm.close()

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self._close())
        finally:
            self.loop.close()
            self.proc.join(timeout=10)


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


def time_tcp(blocks: dict[int, np.ndarray], repeat: int) -> dict[int, list[float]]:
    stream = _Stream()
    out: dict[int, list[float]] = {}
    try:
        for size, block in blocks.items():
            stream.send(block)  # a warm-up (buffer allocation)
            out[size] = [stream.send(block) for _ in range(repeat)]
    finally:
        stream.close()
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


# -- TLS against TCP (--tls) ---------------------------------------------------------------

TLS_PATHS = ("raw stream", "dask comm", "dask scatter", "deisa send", "deisa publish")
PROTOCOLS = ("tcp", "tls")
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


def turns(r: int, lanes: Sequence[str] = PROTOCOLS) -> tuple[str, ...]:
    """The lanes' order at repetition ``r``: each goes first in turn (with two, every other
    time)."""
    k = r % len(lanes)
    return (*lanes[k:], *lanes[:k])


def read_syscalls(pid: int) -> float:
    """``read`` system calls made so far by process ``pid`` (``/proc/<pid>/io``'s ``syscr``:
    OpenSSL reads its socket with ``read``, where a plain socket's ``recv`` is not counted;
    NaN where not available)."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("syscr:"):
                return float(line.split()[1])
    except OSError:
        pass
    return float("nan")


def cpu_s(pid: int) -> float:
    """CPU seconds of every thread of process ``pid`` (``/proc/<pid>/task/*/schedstat``, in
    ns; psutil's 10 ms ticks elsewhere)."""
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
    except (OSError, ValueError):
        import psutil

        times = psutil.Process(pid).cpu_times()
        return times.user + times.system


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


def time_scatter_in_turns(
    clients: dict[str, Any],
    workers: dict[str, str],
    blocks: dict[Any, Any],
    repeat: int,
    turns: Callable[[int], Sequence[str]],
    add: Callable[[str, str, Any, float], None],
) -> None:
    """``dask scatter`` of each block to each protocol's worker, ``repeat`` times after a
    warm-up, the protocols taking turns (``turns(r)``: their order at repetition ``r``)."""
    print("  dask scatter ...", flush=True)
    for size, block in blocks.items():
        for r in range(repeat + 1):
            for proto in turns(r):
                t0 = time.perf_counter()
                future = clients[proto].scatter(
                    block, workers=[workers[proto]], direct=True, hash=False
                )
                elapsed = time.perf_counter() - t0
                if r:  # the first is a warm-up
                    add("dask scatter", proto, size, elapsed)
                future.release()
                del future


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
    for path, endpoint in (("raw stream", _Stream), ("dask comm", _DaskComm)):
        print(f"  {path} ...", flush=True)
        ends = {lane: endpoint(files) for lane, files in lanes.items()}
        try:
            for lane in secure:
                info[f"{path} cipher {lane}"] = ends[lane].cipher
            for size, block in blocks.items():
                for end in ends.values():
                    end.send(block)  # warm-up
                    if isinstance(end, _Stream):
                        end.reads.clear()
                for r in range(repeat):
                    for lane in turns(r, names):
                        add(path, lane, size, ends[lane].send(block))
                for lane in secure:
                    end = ends[lane]
                    if isinstance(end, _Stream):
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


# -- UCX against TCP and shared memory (--protocol ucx) ------------------------------------

UCX_PATHS = ("dask scatter", "deisa send", "deisa publish")
IDLE_S = 5.0
"""Seconds over which the idle CPU of each cluster's worker is measured (its scheduler runs
in this process, with the other's)."""
SHM = "shared memory"


def lanes(protocol: str) -> dict[str, tuple[str, str]]:
    """What ``--protocol`` compares: ``{lane: (cluster protocol, Bridge transport)}``. tcp and
    ``protocol`` send the Bridge's blocks over the Dask connection (``transport="tcp"``, whatever
    its scheme); shared memory is the tcp cluster's, with the Bridge's default
    ``transport="auto"`` (the worker is on this node)."""
    return {"tcp": ("tcp", "tcp"), protocol: (protocol, "tcp"), SHM: ("tcp", "auto")}


def time_protocols(
    blocks: dict[int, np.ndarray], repeat: int, workdir: Path, protocol: str
) -> dict[str, Any]:
    """Every path of :data:`UCX_PATHS` over each lane of :func:`lanes` (one cluster of one
    worker per protocol, plain, no TLS; ``dask scatter`` has no shared-memory lane), the lanes
    taking turns at every repetition (same block, same load); also the CPU of the sender and of
    the worker per ``deisa publish``, and each cluster's worker CPU while idle (:data:`IDLE_S`
    seconds, nothing sent). Samples are keyed ``(path, lane, bytes)``; ``info`` holds the idle
    CPU shares and the transport each Bridge reported."""
    from distributed import Client
    from mpi4py import MPI

    from deisa import Adapter, ArraySpec, Bridge

    samples: dict[tuple[str, str, int], list[float]] = {}
    info: dict[str, Any] = {}
    ways = lanes(protocol)
    protocols = ("tcp", protocol)

    def add(path: str, lane: str, size: int, value: float) -> None:
        samples.setdefault((path, lane, size), []).append(value)

    def order(names: tuple[str, ...], r: int) -> tuple[str, ...]:
        return names if r % 2 == 0 else names[::-1]

    with contextlib.ExitStack() as stack:
        clusters = {p: stack.enter_context(local_cluster(1, protocol=p)) for p in protocols}
        clients = {p: stack.enter_context(Client(c)) for p, c in clusters.items()}
        addresses = {p: c.scheduler.address for p, c in clusters.items()}
        info["addresses"] = addresses
        workers = {p: next(iter(c.nthreads())) for p, c in clients.items()}
        pids = {p: next(iter(c.run(os.getpid).values())) for p, c in clients.items()}
        time.sleep(1.0)  # the start-up's work done
        before = {p: cpu_s(pids[p]) for p in protocols}
        time.sleep(IDLE_S)
        for p in protocols:
            info[f"idle worker cpu share {p}"] = (cpu_s(pids[p]) - before[p]) / IDLE_S
        time_scatter_in_turns(clients, workers, blocks, repeat, lambda r: order(protocols, r), add)
        print("  deisa publish ...", flush=True)
        adapters = {p: Adapter(c, timeout=60) for p, c in clients.items()}
        for size, block in blocks.items():
            name = f"b{size}"
            field = block.reshape(1, -1)
            spec = ArraySpec("float64", global_shape=field.shape, start=(0, 0), shape=field.shape)
            arrays = {lane: f"{name}_{lane.replace(' ', '_')}" for lane in ways}
            bridges = {}
            for lane, (proto, transport) in ways.items():
                scheduler_file = workdir / f"scheduler-{proto}.json"
                scheduler_file.write_text(json.dumps({"address": addresses[proto]}))
                bridges[lane] = Bridge(
                    str(scheduler_file), {arrays[lane]: spec},
                    comm=MPI.COMM_SELF, mode="sync", transport=transport,
                )  # fmt: skip
            try:
                descriptors = {lane: adapters[ways[lane][0]][arrays[lane]] for lane in ways}
                for step in range(repeat + 1):
                    for lane in order(tuple(ways), step):
                        pid = pids[ways[lane][0]]
                        here, there = time.process_time(), cpu_s(pid)
                        bridges[lane].publish(arrays[lane], field, step)
                        if step:  # the first is a warm-up
                            add("sender cpu", lane, size, time.process_time() - here)
                            add("receiver cpu", lane, size, cpu_s(pid) - there)
                        descriptors[lane][step, :, :]  # take it: the worker's memory is freed
                info[f"transport {size}"] = {lane: b.transport for lane, b in bridges.items()}
            finally:
                for bridge in bridges.values():
                    bridge.close()
            for lane, bridge in bridges.items():
                for t in bridge.timings[1:]:
                    add("deisa send", lane, size, t.send_s)
                    add("deisa publish", lane, size, t.send_s + t.sync_s)
    return {"samples": samples, "info": info}


def protocol_records(samples: dict[tuple[str, str, int], list[float]]) -> list[dict[str, Any]]:
    """One record per (path, lane, block size): its samples, their median, and the bandwidth
    for the transfer paths."""
    records = []
    for (path, lane, size), seconds in samples.items():
        record: dict[str, Any] = {"path": path, "lane": lane, "block_bytes": size,
                                  "seconds": seconds, "median_s": median(seconds)}  # fmt: skip
        if path in UCX_PATHS:
            record["gib_per_s"] = size / GiB / median(seconds)
            record["best_gib_per_s"] = size / GiB / min(seconds)
        records.append(record)
    return records


def main_protocol(args: argparse.Namespace) -> int:
    """``--protocol ucx``: UCX against plain TCP and the Bridge's shared memory, side by side;
    writes ``bandwidth_<protocol>.json``. No target: the numbers say whether it is worth it."""
    from deisa.launcher.ucx import INSTALL, MODULE, ucx_available

    if not ucx_available():  # distributed's own 'ucx' is a stub that warns and fails
        print(f"--protocol {args.protocol}: no module {MODULE!r}; {INSTALL}", file=sys.stderr)
        return 2
    sizes = [s * MiB for s in args.sizes]
    blocks = {s: np.random.default_rng(0).random(s // 8) for s in sizes}
    load_before = loadavg()
    ucx_env = {k: v for k, v in os.environ.items() if k.startswith(("UCX_", "UCXPY_"))}
    print(f"{args.protocol} against tcp and shared memory (no TLS), one block to one worker, "
          f"taking turns: median (best) of {args.repeat}; load {load_before}; "
          f"{ucx_env or 'no UCX_ variable'}", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        result = time_protocols(blocks, args.repeat, Path(tmp), args.protocol)
    load_after = loadavg()
    records = protocol_records(result["samples"])

    def find(path: str, lane: str, size: int) -> dict[str, Any] | None:
        return next((r for r in records if (r["path"], r["lane"], r["block_bytes"]) ==
                     (path, lane, size)), None)  # fmt: skip

    rows = []
    for path in UCX_PATHS:
        measured = [lane for lane in lanes(args.protocol) if find(path, lane, sizes[0])]
        for lane in measured:
            row: list[Any] = [path, lane]
            for s in sizes:
                r = find(path, lane, s)
                assert r is not None
                row.append(f"{r['gib_per_s']:.2f} ({r['best_gib_per_s']:.2f}) GiB/s")
            rows.append(row)
        for lane in measured[1:]:
            ratios = []
            for s in sizes:
                ours, tcp = find(path, lane, s), find(path, "tcp", s)
                assert ours is not None and tcp is not None
                ratios.append(f"{100 * ours['gib_per_s'] / tcp['gib_per_s']:.0f} %")
            rows.append([path, f"{lane} / tcp", *ratios])
    print(table(["path", "lane", *[f"{s // MiB} MiB" for s in sizes]], rows))
    for s in sizes:
        cpu = []
        for lane in lanes(args.protocol):
            sender, worker = find("sender cpu", lane, s), find("receiver cpu", lane, s)
            assert sender is not None and worker is not None
            cpu.append(f"{lane} {1e3 * sender['median_s']:.1f} / {1e3 * worker['median_s']:.1f}")
        print(f"{s // MiB} MiB: deisa publish CPU ms per block, sender / worker: {', '.join(cpu)}")
    info = result["info"]
    idle = [f"{p} {100 * info[f'idle worker cpu share {p}']:.0f} %" for p in ("tcp", args.protocol)]
    print(f"idle worker CPU over {IDLE_S:.0f} s, share of a core: {', '.join(idle)}")
    print(f"the Bridges' transports: {info[f'transport {sizes[-1]}']}")
    print(f"load {load_before} before, {load_after} after")
    import distributed

    info["distributed"] = distributed.__version__
    info["ucx environment"] = ucx_env
    return finish(
        args.out, f"bandwidth_{args.protocol}", [], repeat=args.repeat,
        load_before=load_before, load_after=load_after, records=records, info=info,
    )  # fmt: skip


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
    parser.add_argument(
        "--tls",
        action="store_true",
        help="TLS against plain TCP, side by side (writes bandwidth_tls.json)",
    )
    parser.add_argument(
        "--tls-ciphers",
        default=None,
        help="with --tls: distributed.comm.tls.ciphers (TLS 1.2 only)",
    )
    parser.add_argument(
        "--tls-max-version",
        type=float,
        choices=[1.2, 1.3],
        default=None,
        help="with --tls: distributed.comm.tls.max-version",
    )
    parser.add_argument(
        "--tls12",
        action="store_true",
        help=f"with --tls: also a lane of TLS 1.2 limited to {TLS12_CIPHERS} (forward secrecy, "
        "AEAD), taking turns with the others",
    )
    parser.add_argument(
        "--protocol",
        choices=["ucx"],
        default=None,
        help="this protocol against plain TCP, side by side (needs distributed-ucxx; writes "
        "bandwidth_ucx.json)",
    )
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = min(args.repeat, 5)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tls:
        return main_tls(args)
    if args.protocol is not None:
        return main_protocol(args)
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
