"""deisa.insitu with real processes: a simulation under mpirun, a scheduler and workers of
their own, the analytics in a process of its own.

deisa-dask's getting-started example (tests/test_ecosystem.py's SIMULATION and ANALYSIS) runs
with its import changed to ``deisa.insitu`` and nothing else; a second simulation has an array
that half of the ranks hold (a Bridge over ``comm.Split``), an AND trigger over it and a
window of another, and the analytics' feedback read per timestep by every rank.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import STARTUP, DaskProcesses, mpirun, test_env
from test_ecosystem import ANALYSIS, SIMULATION, _expected_sum

pytest.importorskip("deisa.core", reason="deisa.insitu needs deisa-core: pip install deisa-core")


def _ours(script: str) -> str:
    assert "from deisa.dask import" in script
    return script.replace("from deisa.dask import", "from deisa.insitu import")


def _run_both(
    tmp_path: Path, cluster: DaskProcesses, simulation: str, analysis: str, nranks: int
) -> tuple[subprocess.CompletedProcess[str], str]:
    (tmp_path / "simulation.py").write_text(simulation)
    (tmp_path / "analysis.py").write_text(analysis)
    env = test_env()
    env["DEISA_SCHEDULER_FILE"] = str(cluster.scheduler_file)
    ana = subprocess.Popen(
        [sys.executable, "analysis.py"], cwd=tmp_path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        sim = subprocess.run(
            mpirun(nranks, sys.executable, "simulation.py"), cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=3 * STARTUP,
        )  # fmt: skip
        out, err = ana.communicate(timeout=2 * STARTUP)
    finally:
        if ana.poll() is None:
            ana.kill()
            ana.wait()
    assert sim.returncode == 0, sim.stdout[-2000:] + sim.stderr[-3000:]
    assert ana.returncode == 0, err[-3000:]
    return sim, out


def test_deisa_dasks_getting_started_runs_on_deisa_insitu(
    tmp_path: Path, shared_dask: DaskProcesses
) -> None:
    _, out = _run_both(tmp_path, shared_dask, _ours(SIMULATION), _ours(ANALYSIS), 4)
    sums = {}
    for line in out.splitlines():
        if line.startswith("latest temperature t="):
            head, value = line.split(", sum=")
            sums[int(head.rsplit("=", 1)[1])] = float(value)
    assert sorted(sums) == list(range(5)), out  # every step: the go waits for the callbacks
    for ts, value in sums.items():
        assert value == pytest.approx(_expected_sum(ts), rel=1e-12), ts


FEEDBACK_SIMULATION = """\
import time
import numpy as np
from mpi4py import MPI
from deisa.insitu import Bridge

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
arrays = {"field": {"global_shape": (8, 6), "chunk_shape": (2, 6), "chunk_position": (rank, 0)}}
if rank < 2:  # an edge of two ranks: a Bridge over comm.Split
    arrays["edge"] = {"global_shape": (2,), "chunk_shape": (1,), "chunk_position": (rank,),
                      "dtype": "int64"}
bridge = Bridge(comm, arrays)
for t in range(4):
    bridge.send("field", np.full((2, 6), 10.0 * t + rank), t)
    if rank < 2:
        bridge.send("edge", np.array([t * 100 + rank]), t)
    deadline = time.monotonic() + 120
    while bridge.get("seen", timestep=t) is None:  # collective: the same answer on every rank
        assert time.monotonic() < deadline, f"no feedback for step {t}"
        time.sleep(0.05)
feedback = bridge.get("seen")
bridge.close(timestep=4)
print(f"rank {rank} feedback {list(feedback)}", flush=True)
"""

FEEDBACK_ANALYSIS = """\
from deisa.core import Window
from deisa.insitu import Deisa

deisa = Deisa()
print("arrays", sorted(deisa.arrays_metadata), flush=True)


@deisa.register(Window("field", 2), "edge")
def both(fields, edges):
    t = fields[-1].t
    assert edges[-1].t == t
    total = float(fields[-1].sum().compute()) + float(edges[-1].sum().compute())
    print(f"step {t} window {[f.t for f in fields]} total {total}", flush=True)
    deisa.set("seen", total, t)


deisa.execute_callbacks()
deisa.close()
"""


def test_windows_and_triggers_and_feedback_on_four_ranks(
    tmp_path: Path, shared_dask: DaskProcesses
) -> None:
    sim, out = _run_both(tmp_path, shared_dask, FEEDBACK_SIMULATION, FEEDBACK_ANALYSIS, 4)
    assert "arrays ['edge', 'field']" in out, out
    totals = {t: 12 * sum(10.0 * t + r for r in range(4)) + 2 * t * 100 + 1 for t in range(4)}
    for t in range(4):
        window = [t] if t == 0 else [t - 1, t]
        assert f"step {t} window {window} total {totals[t]}" in out, out
    expected = [(t, totals[t]) for t in range(4)]
    for rank in range(4):
        assert f"rank {rank} feedback {expected}" in sim.stdout, sim.stdout
