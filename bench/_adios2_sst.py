"""The SST lane of ``bench.adios2_endstep``: a writer and its Python reader, with the ``adios2``
wheel (serial, SST over its EVPath ``WAN`` data plane: TCP on this node).

    python -P -m bench._adios2_sst write DIR RANK MIB STEPS QUEUE COMPUTE  # writes DIR/sst-RANK
    python -P -m bench._adios2_sst read DIR/sst-RANK                # one reader per writer

The wheel has no MPI (and segfaults under ``mpirun`` with mpi4py loaded here), so each "rank" is
a process of its own writing a stream of its own, read by a reader of its own, without barriers.
A writer times a copy of its block (``np.copyto``) and every step (``BeginStep`` + ``Put`` +
``EndStep``, after ``COMPUTE`` untimed passes of ``np.add`` over the block) as the C++ writer of
``bench/adios2/`` does, and prints the same JSON (its own times; ``bench.adios2_endstep`` takes
the slowest writer's per step). A reader ``Get``s every step into its own array and prints the
time each arrived (seconds since the epoch) as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

MiB = 2**20


def sst_io(adios: Any, queue: int) -> Any:
    io = adios.DeclareIO("bench-sst")
    io.SetEngine("SST")
    io.SetParameters({"RendezvousReaderCount": "1", "QueueLimit": str(queue),
                      "QueueFullPolicy": "Block", "DataTransport": "WAN"})  # fmt: skip
    return io


def write(directory: str, rank: int, mib: int, steps: int, queue: int, compute: int) -> None:
    import adios2.bindings as bindings
    import numpy as np

    n = mib * MiB // 8
    block = rank + 1e-9 * np.arange(n, dtype=np.float64)
    copy = np.zeros_like(block)
    memcpy_s, step_s, step_start = [], [], []
    for _ in range(steps):
        t0 = time.time()
        np.copyto(copy, block)
        memcpy_s.append(time.time() - t0)
    adios = bindings.ADIOS()  # kept: its IO and engine die with it
    io = sst_io(adios, queue)
    variable = io.DefineVariable("block", block, [n], [0], [n], True)
    engine = io.Open(f"{directory}/sst-{rank}", bindings.Mode.Write)
    for step in range(steps):
        for _ in range(compute):
            np.add(block, 1e-9, out=block)
        block[0] = step
        t0 = time.time()
        engine.BeginStep()
        engine.Put(variable, block, bindings.Mode.Deferred)
        engine.EndStep()
        step_s.append(time.time() - t0)
        step_start.append(t0)
    engine.Close()
    print(json.dumps({"ranks": 1, "bytes_per_rank": block.nbytes, "memcpy_s": memcpy_s,
                      "step_s": step_s, "step_start": step_start}), flush=True)  # fmt: skip


def read(stream: str) -> None:
    import adios2.bindings as bindings
    import numpy as np

    adios = bindings.ADIOS()
    io = sst_io(adios, 1)
    engine = io.Open(stream, bindings.Mode.Read)
    arrived, first = [], []
    while engine.BeginStep() == bindings.StepStatus.OK:
        variable = io.InquireVariable("block")
        out = np.empty(variable.Shape()[0])
        engine.Get(variable, out, bindings.Mode.Sync)
        engine.EndStep()
        arrived.append(time.time())
        first.append(float(out[0]))
    engine.Close()
    print(json.dumps({"arrived": arrived, "first": first}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], *(int(a) for a in sys.argv[3:8]))
    else:
        read(sys.argv[2])
