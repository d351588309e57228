"""deisa-dask 0.6.3: time ``Bridge.send`` of one rank's block, for the ``deisa-dask 0.6.3`` lane of
:mod:`bench.bandwidth.peaks`: run as a script in deisa-dask's own venv
(``python deisa_dask_sender.py ADDRESS SIZES REPEAT OUT``)."""

import contextlib
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI


def main() -> None:
    sizes, repeat, out = json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    from deisa.dask import Bridge  # deisa-dask's package, in the venv
    from distributed import LocalCluster

    # its own cluster, of the same shape, started from the venv: deisa-dask's handshake actor must
    # be importable on the scheduler and workers (there, ``deisa`` is deisa-dask's namespace)
    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        memory_limit=0,
    )
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
        with contextlib.suppress(Exception):  # the release's close may fail: times are taken
            bridge.close(repeat)
    with open(out, "w") as f:
        json.dump(results, f)
    cluster.close()


if __name__ == "__main__":  # the cluster's nanny re-imports this file
    main()
