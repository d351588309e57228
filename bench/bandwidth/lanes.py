"""The lanes every bandwidth benchmark times: one block to one worker by a raw stream, distributed's
comm, ``client.scatter``, a Bridge's ``publish`` (its send part too), and the CPU each side
spent."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._common import (
    PINS,
    TLSFiles,
)

os.environ.update(PINS)

import numpy as np

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


class Stream:
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


class DaskComm:
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


def time_tcp(blocks: dict[int, np.ndarray], repeat: int) -> dict[int, list[float]]:
    stream = Stream()
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


PROTOCOLS = ("tcp", "tls")
"""The protocols the TLS lanes compare, taking turns (:func:`turns`)."""


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
