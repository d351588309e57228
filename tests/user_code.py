"""A user's own simulation and analytics, for the tests of ``deisa-run -- COMMAND``.

``my_simulation.py STEPS FAIL_AT BUFFER_NB`` (mpi4py): every rank publishes a 4 x 6 block of
``field`` (rank r holds rows 4r..4r+3) worth ``1000 * step + rank``, through ``deisa.Bridge()``
with no scheduler file (``DEISA_SCHEDULER_FILE``); it exits 7 at step ``FAIL_AT`` (-1: never;
with ``fail_rank=R``, rank ``R`` alone); ``BUFFER_NB`` 0 is unbounded. Options after them:
``sleep=S`` computes (sleeps) ``S`` seconds before its first publish, a slow simulation
(``gate=PATH``: until the file ``PATH`` exists); ``quit_at=K`` makes every rank finalize MPI and
exit 0 at step ``K`` without closing the stream (a C code that never calls ``PDI_finalize``).
``my_analytics.py STEPS RANKS [fail]`` reads every step through ``deisa.Adapter.from_env()``
and checks it, or raises at the first with ``fail``; with ``gate=PATH`` it reads nothing before
the file ``PATH`` exists (the simulation is meanwhile held by flow control: every process of the
run stays up while a test probes it).
"""

from __future__ import annotations

from pathlib import Path

SIMULATION = """\
import os, sys, time
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge

steps, fail_at, buffer_nb = (int(a) for a in sys.argv[1:4])
extra = dict(a.split("=", 1) for a in sys.argv[4:])
sleep, quit_at = float(extra.get("sleep", 0)), int(extra.get("quit_at", -1))
gate, fail_rank = extra.get("gate"), int(extra.get("fail_rank", -1))
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
spec = ArraySpec("float64", (4 * size, 6), (4 * rank, 0), (4, 6))
# no scheduler file: deisa-run's DEISA_SCHEDULER_FILE
with Bridge(arrays={"field": spec}, buffer_nb=buffer_nb or None, connect_timeout=300) as bridge:
    for step in range(steps):
        if step == fail_at and fail_rank in (-1, rank):
            print(f"my simulation: giving up at step {step}", flush=True)
            os._exit(7)
        if step == quit_at:
            print(f"my simulation: leaving at step {step} without closing", flush=True)
            bridge.flush()  # no exchange left in flight
            MPI.Finalize()
            os._exit(0)
        if step == 0:
            time.sleep(sleep)
            while gate is not None and not os.path.exists(gate):
                time.sleep(0.1)
        bridge.publish("field", np.full((4, 6), 1000.0 * step + rank), step)
print(f"my simulation: rank {rank} published {steps} steps", flush=True)
"""

ANALYTICS = """\
import os, sys, time
import numpy as np
from deisa import Adapter

steps, ranks, fail = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["fail"]
gate = next((a[len("gate="):] for a in sys.argv[3:] if a.startswith("gate=")), None)
while gate is not None and not os.path.exists(gate):
    time.sleep(0.1)
seen = []
with Adapter.from_env() as adapter:
    for step, field in adapter["field"].items():
        if fail:
            raise RuntimeError(f"my analytics: failing on purpose at step {step}")
        expected = 1000.0 * step + np.repeat(np.arange(ranks), 4)[:, None] + np.zeros((1, 6))
        assert np.array_equal(field.compute(), expected), step
        seen.append(step)
        print(f"my analytics: step {step} is right", flush=True)
assert seen == list(range(steps)), seen
print("my analytics: every step is right", flush=True)
"""


def write_user_code(directory: Path) -> tuple[Path, Path]:
    """Write both scripts into ``directory``; their paths (simulation, analytics)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "my_simulation.py").write_text(SIMULATION)
    (directory / "my_analytics.py").write_text(ANALYTICS)
    return directory / "my_simulation.py", directory / "my_analytics.py"
