"""The workers' preload under both its names: ``dask worker --preload deisa.worker`` and the
older ``--preload deisa.bridge.worker`` (deisa-run's, its Slurm job's, the benchmarks'), in
process (``gen_cluster``): the worker registers deisa's worker services with its scheduler before
it joins, and runs it."""

from __future__ import annotations

import pytest
from conftest import STARTUP
from distributed import Worker
from distributed.utils_test import gen_cluster

from deisa.wire.shm import SERVICES_NAME


@pytest.mark.parametrize("module", ["deisa.worker", "deisa.bridge.worker"])
def test_the_preload_registers_the_worker_plugin(module: str) -> None:
    @gen_cluster(client=True, nthreads=[], timeout=STARTUP)
    async def run(c, s) -> None:  # type: ignore[no-untyped-def]
        assert SERVICES_NAME not in s.worker_plugins
        async with Worker(s.address, nthreads=1, preload=[module]) as worker:
            assert SERVICES_NAME in s.worker_plugins
            assert SERVICES_NAME in worker.plugins

    run()
