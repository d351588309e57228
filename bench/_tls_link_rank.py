"""One MPI rank of ``bench.tls_link``: publishes blocks over plain TCP and over TLS in turns.

Run by ``bench.tls_link`` as ``mpirun -n RANKS python -P -m bench._tls_link_rank SPEC.json``
in the sender's network namespace. ``SPEC.json`` holds ``lanes`` (lane -> scheduler file),
``tls_config`` (the dask settings of the TLS files), ``sizes`` (MiB), ``repeat``, ``workers``
and ``out``. Every rank publishes its own ``(1, n)`` row of a ``(ranks, n)`` array with a
``Bridge`` per lane (``mode="sync"``, ``transport="tcp"``: the path to a worker on another
node), the lanes taking turns at every step (the first step of each size is a warm-up); rank 0
takes every step with an ``Adapter`` per lane so the workers' memory is freed, and writes, per
lane and size, the wall time of each step from a barrier to the barrier after every rank's
publish, its own CPU seconds per publish, the workers' (``worker_pids``: same machine, /proc)
and every rank's ``send_s + sync_s``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

MiB = 2**20
STARTUP = 120.0


def _cpu_s(pids: list[int]) -> float:
    """The CPU seconds (user + system) of processes ``pids`` so far, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def _turns(step: int, lanes: list[str]) -> list[str]:
    return lanes if step % 2 == 0 else lanes[::-1]


def _adapters(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rank 0's Adapter per lane, and the cipher each lane's connection negotiated."""
    from distributed import Client, Security

    from deisa import Adapter

    adapters, ciphers = {}, {}
    for lane, path in spec["lanes"].items():
        security = Security() if lane != "tcp" else None
        client = Client(scheduler_file=path, security=security, timeout=STARTUP)
        adapters[lane] = Adapter(client, timeout=STARTUP)
        scheduler_comm: Any = client.scheduler_comm
        ciphers[lane] = (getattr(scheduler_comm.comm, "extra_info", {}) or {}).get("cipher")
    return adapters, ciphers


def _publish_size(
    spec: dict[str, Any], comm: Any, mib: int, adapters: dict[str, Any], out: dict[str, Any]
) -> dict[str, Any]:
    """Every step of a ``mib`` MiB block over each lane in turns; the Bridges, closed."""
    import numpy as np

    from deisa import ArraySpec, Bridge

    rank, ranks, n = comm.Get_rank(), comm.Get_size(), mib * MiB // 8
    block = np.random.default_rng(rank).standard_normal((1, n))
    array = ArraySpec("float64", global_shape=(ranks, n), start=(rank, 0), shape=(1, n))
    name = f"b{mib}"
    bridges = {
        lane: Bridge(path, {name: array}, mode="sync", transport="tcp",
                     min_workers=spec["workers"], connect_timeout=STARTUP)
        for lane, path in spec["lanes"].items()
    }  # fmt: skip
    try:
        for step in range(spec["repeat"] + 1):
            for lane in _turns(step, list(spec["lanes"])):
                comm.Barrier()
                w0 = _cpu_s(spec["worker_pids"][lane]) if rank == 0 else 0.0
                t0, c0 = time.perf_counter(), time.process_time()
                bridges[lane].publish(name, block, step)
                cpu = time.process_time() - c0
                comm.Barrier()
                wall = time.perf_counter() - t0
                if rank == 0:
                    adapters[lane][name][step, :, :]  # take it: the worker frees it
                    if step:
                        worker = _cpu_s(spec["worker_pids"][lane]) - w0
                        sample = {"lane": lane, "mib": mib, "wall_s": wall, "cpu_s": cpu}
                        out["samples"].append({**sample, "worker_cpu_s": worker})
    finally:
        for bridge in bridges.values():
            bridge.close()
    return bridges


def main(spec_path: str) -> None:
    import dask
    from mpi4py import MPI

    spec = json.loads(Path(spec_path).read_text())
    dask.config.set(spec["tls_config"])  # TLS files for tls:// (tcp:// ignores them)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    adapters, ciphers = _adapters(spec) if rank == 0 else ({}, {})
    out: dict[str, Any] = {"ranks": comm.Get_size(), "samples": [], "cipher": ciphers}
    for mib in spec["sizes"]:
        bridges = _publish_size(spec, comm, mib, adapters, out)
        own = {lane: [t.send_s + t.sync_s for t in b.timings[1:]] for lane, b in bridges.items()}
        every = comm.gather(own, root=0)
        if rank == 0:
            out.setdefault("publish_s", {})[str(mib)] = every
            out.setdefault("transport", {})[str(mib)] = {
                lane: b.transport for lane, b in bridges.items()
            }
    if rank == 0:
        for adapter in adapters.values():
            adapter.client.close()
        Path(spec["out"]).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
