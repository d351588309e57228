"""A user's simulation and analytics for the lost-node Slurm test (issue 25, item 5).

``lost_node_simulation.py STEPS MIN_WORKERS`` (mpi4py): rank r publishes rows 4r..4r+3 of a
``(4 * ranks) x 6`` float64 ``field`` worth ``step * 1e6 + row * 1e3 + column`` at every step
(:func:`expected`), through ``deisa.Bridge()`` (``DEISA_SCHEDULER_FILE``, ``buffer_nb=2``), and
prints ``published STEPS steps`` at the end.

``lost_node_analytics.py CONTROL PAUSE_AT KEEP`` reads every step of ``field`` and records it.
Once it holds step ``PAUSE_AT`` it writes ``CONTROL/paused`` and waits for the test to take a
worker node down (the test writes the time into ``CONTROL/down``), then for the scheduler to
list ``KEEP`` workers, and reads on. At the end of the stream it waits (60 s at most) for no key of
``field`` to be left in memory, and writes ``CONTROL/report.json``: the steps received with their
BLAKE2 digests, the lost ones from ``Adapter.stats()``, the lost-step warnings, the time the
workers were dropped, the keys left.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

SIMULATION = """\
import sys, time
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge

steps, min_workers = int(sys.argv[1]), int(sys.argv[2])
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
spec = ArraySpec("float64", (4 * size, 6), (4 * rank, 0), (4, 6))
x, y = np.indices((4, 6))
with Bridge(arrays={"field": spec}, buffer_nb=2, min_workers=min_workers,
            connect_timeout=300) as bridge:
    for step in range(steps):
        bridge.publish("field", step * 1e6 + (4 * rank + x) * 1e3 + y, step)
        time.sleep(0.1)
print(f"lost-node simulation: rank {rank} published {steps} steps", flush=True)
"""

ANALYTICS = """\
import hashlib, json, os, sys, time, warnings
from pathlib import Path
from distributed import Client
from deisa import Adapter

control, pause_at, keep = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def workers(dask_scheduler):
    return len(dask_scheduler.workers)


def keys_of_field(dask_scheduler):
    return sorted(
        f"{key} {ts.state}" for key, ts in dask_scheduler.tasks.items() if "-field-" in str(key)
    )


def in_memory(dask_scheduler):
    return sum(1 for ts in dask_scheduler.tasks.values()
               if ts.state == "memory" and "-field-" in str(ts.key))


def wait(condition, what, timeout=300):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"lost-node analytics: {what} never happened")
        time.sleep(0.2)


received, removed_at = {}, None
with Client(scheduler_file=os.environ["DEISA_SCHEDULER_FILE"]) as client:
    adapter = Adapter(client, timeout=300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step, field in adapter["field"].items():
            received[step] = hashlib.blake2b(field.compute().tobytes()).hexdigest()
            print(f"lost-node analytics: step {step}", flush=True)
            if step == pause_at:
                (control / "paused").write_text(str(time.time()))
                wait(lambda: (control / "down").exists(), "the node's loss")
                wait(lambda: client.run_on_scheduler(workers) == keep, "the workers' removal")
                removed_at = time.time()
                print(f"lost-node analytics: {keep} workers left", flush=True)
        del field  # the last step's futures: held, its keys would stay
    lost = adapter.stats()["lost"].get("field", [])
    adapter.close()
    try:
        wait(lambda: client.run_on_scheduler(in_memory) == 0, "the keys' release", 60)
    except TimeoutError as exc:
        print(exc, flush=True)
    report = {
        "received": list(received),
        "digests": received,
        "lost": lost,
        "warnings": [str(w.message) for w in caught if "was lost" in str(w.message)],
        "removed_at": removed_at,
        "keys_left": client.run_on_scheduler(in_memory),
        "tasks_left": client.run_on_scheduler(keys_of_field),
    }
(control / "report.json").write_text(json.dumps(report))
print("lost-node analytics: done", flush=True)
"""


def expected(step: int, ranks: int) -> np.ndarray:
    """``field`` at ``step``, as the ranks publish it."""
    x, y = np.indices((4 * ranks, 6))
    return step * 1e6 + x * 1e3 + y


def digest(step: int, ranks: int) -> str:
    """The BLAKE2 digest the analytics writes for a step received whole."""
    return hashlib.blake2b(expected(step, ranks).tobytes()).hexdigest()


def write_lost_node_code(directory: Path) -> tuple[Path, Path]:
    """Write both scripts into ``directory``; their paths (simulation, analytics)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "lost_node_simulation.py").write_text(SIMULATION)
    (directory / "lost_node_analytics.py").write_text(ANALYTICS)
    return directory / "lost_node_simulation.py", directory / "lost_node_analytics.py"
