"""Arrays held by some ranks only: a Bridge over its own communicator, real `mpirun` ranks.

4 ranks publish ``field`` (8 x 6, 2 x 2 blocks) through a Bridge over ``MPI.COMM_WORLD``;
ranks 0 and 1 (the top row of the process grid) also publish ``boundary`` (the global top
row, 1 x 6) through a second Bridge over ``comm.Split``. The other ranks never construct it,
so never take part in its collectives. Two ways, one run each: two Bridges written by hand, and
one :class:`deisa.BridgeGroup` (what the PDI plugin builds from per-entry communicators). Then
the same through the PDI plugin (plugin/pdi/tests/edge_driver.c; skipped without PDI 1.12): a
`write' entry with ``communicator: $edge_comm``, a communicator the simulation exposes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import STARTUP, DaskProcesses, kill_if_running, mpirun, test_env

from deisa import Adapter

# Values encode (step, global row, global column): a misplaced or stale block shows.
PUBLISHER = """
import json, sys
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge, BridgeGroup

scheduler_file, out, nsteps, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
world = MPI.COMM_WORLD
rank = world.Get_rank()
x0, y0 = 4 * (rank // 2), 3 * (rank % 2)  # 2 x 2 ranks of 4 x 3
on_edge = x0 == 0
edge = world.Split(0 if on_edge else MPI.UNDEFINED, rank)  # MPI.COMM_NULL off the edge
field_spec = ArraySpec("float64", (8, 6), (x0, y0), (4, 3))
edge_spec = ArraySpec("float64", (1, 6), (0, y0), (1, 3))
if how == "bridges":  # by hand: a second Bridge, on the edge ranks only
    field = Bridge(scheduler_file, {"field": field_spec}, connect_timeout=STARTUP)
    boundary = None
    if on_edge:
        boundary = Bridge(scheduler_file, {"boundary": edge_spec}, comm=edge,
                          connect_timeout=STARTUP)
else:  # one BridgeGroup, as the PDI plugin does
    group = BridgeGroup(
        scheduler_file, {"field": field_spec, **({"boundary": edge_spec} if on_edge else {})},
        array_comms={"boundary": edge}, connect_timeout=STARTUP,
    )
    field = group.bridge("field")
    boundary = group.bridge("boundary") if on_edge else None
    assert list(group.bridges) == [("field",), ("boundary",)][: 2 if on_edge else 1]
x, y = np.indices((4, 3))
for step in range(nsteps):
    block = step * 1e6 + (x0 + x) * 1e3 + (y0 + y)
    if how == "bridges":
        field.publish("field", block, step)
        if boundary is not None:
            boundary.publish("boundary", block[:1], step)
    else:
        group.publish("field", block, step)
        if on_edge:
            group.publish("boundary", block[:1], step)
if how == "bridges":
    field.close()
    if boundary is not None:
        boundary.close()
else:
    group.close()
report = {"rank": rank, "edge_size": boundary.comm.Get_size() if boundary else None,
          "edge_exchanges": boundary.exchanges if boundary else 0,
          "field_exchanges": field.exchanges, "runs": [field.run, boundary and boundary.run]}
with open(f"{out}/rank-{rank}.json", "w") as f:
    json.dump(report, f)
""".replace("STARTUP", str(STARTUP))


def expected(step: int, shape: tuple[int, int] = (8, 6)) -> np.ndarray:
    x, y = np.indices(shape)
    return step * 1e6 + x * 1e3 + y


@pytest.mark.parametrize("how", ["bridges", "group"])
def test_array_on_two_of_four_ranks_assembles_bitwise_beside_a_whole_domain_array(
    shared_dask: DaskProcesses, tmp_path: Path, how: str
) -> None:
    nsteps = 6
    script = tmp_path / "publisher.py"
    script.write_text(PUBLISHER)
    out = tmp_path / "out"
    out.mkdir()
    cmd = mpirun(4, sys.executable, str(script), str(shared_dask.scheduler_file), str(out),
                 str(nsteps), how)  # fmt: skip
    sim = subprocess.Popen(
        cmd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        with shared_dask.client() as client, Adapter(client, timeout=STARTUP) as adapter:
            pairs = [
                (step, field.compute(), boundary.compute())
                for step, (field, boundary) in adapter.zip("field", "boundary")
            ]
            geometry = adapter["boundary"].shape, adapter["boundary"].chunks
        _, err = sim.communicate(timeout=2 * STARTUP)
    finally:
        kill_if_running(sim)
    assert sim.returncode == 0, err[-3000:]
    assert [step for step, _, _ in pairs] == list(range(nsteps))
    for step, field, boundary in pairs:
        np.testing.assert_array_equal(field, expected(step))
        np.testing.assert_array_equal(boundary, expected(step)[:1])
    assert geometry == ((1, 6), ((1,), (3, 3)))
    reports = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(4)]
    # the members' Bridge spans 2 ranks; ranks 2 and 3 never built it (no exchange of theirs)
    assert [r["edge_size"] for r in reports] == [2, 2, None, None]
    assert [r["edge_exchanges"] > 0 for r in reports] == [True, True, False, False]
    # each Bridge is its own run, the same on its ranks
    assert len({r["runs"][0] for r in reports}) == 1
    assert len({r["runs"][1] for r in reports[:2]}) == 1
    assert reports[0]["runs"][0] != reports[0]["runs"][1]


# The PDI configuration of plugin/pdi/tests/edge_driver.c: `top' goes to `gtop' over `edge_comm'.
EDGE_PDI = """
metadata:
  nsteps: int
  x0: int
  y0: int
  step: int
  edge_comm: MPI_Comm  # a type of PDI's mpi plugin; MPI_COMM_NULL outside the top row
data:
  field: {type: array, subtype: double, size: [4, 3]}
  top: {type: array, subtype: double, size: 3}
plugins:
  mpi: ~
  deisa:
    scheduler_file: SCHEDULER
    connect_timeout: STARTUP
    datasets:
      gfield: {type: array, subtype: double, size: [$nsteps, 8, 6]}
      gtop: {type: array, subtype: double, size: [$nsteps, 6]}
    write:
      field:
        dataset: gfield
        dataset_selection: {size: [1, 4, 3], start: [$step, $x0, $y0]}
      top:
        dataset: gtop
        communicator: $edge_comm
        dataset_selection: {size: [1, 3], start: [$step, $y0]}
"""


@pytest.mark.pdi
def test_pdi_entry_communicator_publishes_an_array_of_two_of_four_ranks(
    built: Path, shared_dask: DaskProcesses, tmp_path: Path
) -> None:
    nsteps = 4
    config = tmp_path / "pdi.yml"
    config.write_text(
        EDGE_PDI.replace("SCHEDULER", str(shared_dask.scheduler_file)).replace(
            "STARTUP", str(STARTUP)
        )
    )
    env = test_env()
    env["PDI_PLUGIN_PATH"] = str(built / "plugin")
    with shared_dask.client() as client:  # the module's earlier runs count in the scheduler's
        calls_before = Adapter(client).stats()["calls"]
    cmd = mpirun(
        4, str(built / "plugin" / "pdi" / "tests" / "deisa_edge_driver"), str(config), str(nsteps)
    )
    sim = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        with shared_dask.client() as client, Adapter(client, timeout=STARTUP) as adapter:
            pairs = [
                (step, field.compute(), top.compute())
                for step, (field, top) in adapter.zip("gfield", "gtop")
            ]
            chunks = adapter["gtop"].chunks
            stats = adapter.stats()
        out, err = sim.communicate(timeout=2 * STARTUP)
    finally:
        kill_if_running(sim)
    assert sim.returncode == 0, (out + err)[-3000:]
    assert [step for step, _, _ in pairs] == list(range(nsteps))
    for step, field, top in pairs:
        np.testing.assert_array_equal(field, expected(step))
        np.testing.assert_array_equal(top, expected(step)[0])  # no NaN of ranks 2 and 3
    assert chunks == ((3, 3),)  # two blocks: the top ranks'
    # one Bridge per communicator, one scheduler message per step and array
    calls = {key: stats["calls"].get(key, 0) - calls_before.get(key, 0) for key in stats["calls"]}
    assert calls["open"] == 2 and calls["publish"] == 2 * nsteps
