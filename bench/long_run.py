"""Memory over a long run: does the scheduler (and its workers) keep something per step?

    python -m bench.long_run --out results/            # 2,000 steps, a few minutes on 2 cores
    python -m bench.long_run --quick --out results/    # 600 steps

In one process, as ``tests/scheduler/test_extension.py`` drives it: a real scheduler with
deisa's stream extension, two real workers and a client. Each step is published as rank 0 of a
two-rank Bridge does (a block sent to each worker under the step's keys, then one
``deisa_publish``), taken as an Adapter takes it (``deisa_get``, futures on its keys) and
computed on (the sum of the step, one computation per step, as an analytics makes); the workers
run deisa's worker plugin, as ``deisa-run``'s do (it folds their metrics per computation). The
memory Python holds (``tracemalloc``: the scheduler, the workers and the client together; RSS
would add the allocator's own slack) is printed after a warm-up (start), at the middle and at
the end, with the records distributed keeps per computation (spans, task groups, the workers'
metrics). At each mark the extension's trim and the workers' fold run, as they do every 100th
step and every 10 s, and dask's key-prefix cache, which the trim empties past 2,000 entries, is
emptied: what is measured is what stays, not how full a bounded cache happens to be.

distributed's own histories, bounded by count or by wall time (:data:`HISTORIES`), are shortened
so that they are full before the start mark.

Target: from the middle to the end, at most ``--max-growth`` bytes a step (default 512; before
issue 54 about 8.5 KiB). The extension forgets a finished computation 15 s after it ended
(``SPANS_GRACE_S``, so that a worker's late heartbeat still finds it): memory is bounded by
steps and by time. This benchmark runs faster than that, so it sets the grace to ``--grace``
seconds (default 1), which compresses the time scale without changing what is kept. Writes
``long_run.json``; exit status 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

HISTORIES = {
    "distributed.admin.low-level-log-length": 100,
    "distributed.admin.system-monitor.log-length": 10,
    "distributed.worker.profile.enabled": False,
}
"""distributed's own histories, bounded by count (1,000 messages per batched stream, 1,000
transitions) or by time (an hour of profiles and system samples, one a second): shortened here
so that they are full before the first mark, and what grows after it is what a step leaves."""


async def _run(steps: int, grace: float) -> dict[str, Any]:
    import dask
    import dask.array as da
    from dask.utils import key_split
    from distributed import Client, Scheduler, Worker

    from deisa import _dask_internals
    from deisa.scheduler import _state
    from deisa.scheduler.extension import EXTENSION_NAME, StreamExtension
    from deisa.wire import step_key_name
    from deisa.worker.services import WorkerServices

    _state.SPANS_GRACE_S = grace
    dask.config.set(HISTORIES)
    marks = {"start": steps // 10, "middle": steps // 2, "end": steps - 1}
    rows: dict[str, dict[str, Any]] = {}
    async with (
        Scheduler(dashboard_address=":0", port=0) as s,
        Worker(s.address, nthreads=1) as a,
        Worker(s.address, nthreads=1) as b,
        Client(s.address, asynchronous=True) as c,
    ):
        await c.register_plugin(StreamExtension())
        await c.register_plugin(WorkerServices())  # deisa's worker services, as deisa-run's
        ext = s.plugins[EXTENSION_NAME]
        await ext.open_stream("t", "run", {"dtype": "<f8"}, buffer_nb=2)
        began = time.perf_counter()
        for step in range(steps):
            blocks = []
            for i, worker in enumerate((a, b)):
                key = (step_key_name("run", "t", step), i, 0)
                sent = await _dask_internals.send_blocks_to_worker(
                    c.rpc, worker.address, {key: np.full((4, 4), float(step))}
                )
                blocks.append((key, worker.address, sent[key]))
            await ext.publish_step("t", "run", step, blocks, timeout=60)
            record = await ext.get_step("t", c.id, timeout=60, run="run", consumer="bench")
            futures = [_dask_internals.future_in_memory(k, c) for k in record["keys"]]
            parts = [da.from_delayed(f, (4, 4), float) for f in futures]
            assert await c.compute(da.concatenate(parts).sum()) == 32 * step
            del futures, parts
            for mark, at in marks.items():
                if step == at:
                    await asyncio.sleep(max(2 * grace, 0.5))  # past the grace, heartbeats in
                    ext._trim()  # as at every TRIM_EVERY-th step: each mark sees it just done
                    key_split.cache_clear()  # bounded (KEY_SPLIT_CACHE): its fill is not kept
                    for worker in (a, b):  # as deisa's worker plugin does every 10 s
                        _dask_internals.fold_span_digests(worker)
                    gc.collect()
                    rows[mark] = {
                        "step": step,
                        "seconds": round(time.perf_counter() - began, 1),
                        "traced_kib": tracemalloc.get_traced_memory()[0] // 1024,
                        "spans": len(s.extensions["spans"].spans),
                        "task_groups": len(s.task_groups),
                        "key_split_cache": key_split.cache_info().currsize,
                        "worker_digests": len(a.digests_total) + len(b.digests_total),
                    }
        await ext.close_stream("t", "run", steps)
        await ext.get_step("t", c.id, timeout=60, run="run", consumer="bench")  # its end
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.long_run", description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="600 steps")
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--max-growth", type=float, default=512.0, help="bytes per step")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    steps = 600 if args.quick else args.steps
    tracemalloc.start(1)
    rows = asyncio.run(_run(steps, args.grace))
    tracemalloc.stop()
    print(f"{'':8}{'step':>6}{'s':>8}{'KiB':>9}{'spans':>7}{'groups':>8}{'keys':>7}{'digests':>9}")
    widths = (6, 8, 9, 7, 8, 7, 9)
    for mark, row in rows.items():
        print(f"{mark:8}" + "".join(f"{v:>{w}}" for v, w in zip(row.values(), widths, strict=True)))
    middle, end = rows["middle"], rows["end"]
    growth = 1024 * (end["traced_kib"] - middle["traced_kib"]) / (end["step"] - middle["step"])
    passed = growth <= args.max_growth
    print(f"growth middle -> end: {growth:.0f} B/step (target <= {args.max_growth:.0f}): "
          f"{'PASS' if passed else 'FAIL'}")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"steps": steps, "grace_s": args.grace, "marks": rows, "bytes_per_step": growth,
              "targets": {"flat memory": passed}}  # fmt: skip
    (args.out / "long_run.json").write_text(json.dumps(result, indent=1))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
