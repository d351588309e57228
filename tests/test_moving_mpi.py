"""Data that moves through the Python Bridge (issue 56), with real `mpirun` ranks and a real
Dask scheduler and workers: particles joined along an axis whose counts change at every step (a
rank with none at step 0), a 2-D field as two boxes a rank that move to the next rank at step 2
and grow at step 3, and a fixed array one of whose steps is published as boxes
(tests/publish_moving.py). The analytics side reads each step as plain dask would from what the
scheduler hands out (``deisa_get``: the step's keys and its layout), every step bitwise against
the code's own arrays; and the scheduler gets one ``deisa_publish`` per step and array whatever
the number of boxes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
from conftest import STARTUP, DaskProcesses, kill_if_running, mpirun, test_env
from publish_moving import NRANKS, truth

from deisa import Adapter, _dask_internals
from deisa.analysis.moving import assemble
from deisa.wire import is_ok
from deisa.wire.layout import StepLayout

HERE = Path(__file__).parent
NSTEPS = 4


def read_step(client: Any, name: str) -> tuple[int, dict[str, Any], list[np.ndarray]]:
    """One step of ``name`` as the scheduler hands it out: its number, the reply and the data
    of its keys (each rank's parcel, or a fixed array's blocks)."""
    reply = client.sync(client.scheduler.deisa_get, name=name, client=client.id, timeout=STARTUP)
    assert is_ok(reply), reply
    futures = [_dask_internals.future_in_memory(key, client) for key in reply["keys"]]
    return reply["step"], reply, client.gather(futures)


def whole(layout: StepLayout, parcels: list[np.ndarray]) -> np.ndarray:
    """The step's array from its parcels, with plain numpy, as the layout says (a box is a view
    of its parcel: ``parcel.reshape(-1)[o:o+n].reshape(count)``)."""
    out = np.full(layout.shape, np.nan)
    for box, p, offset in zip(layout.boxes, layout.parcel_of(), layout.offsets(), strict=True):
        out[box.slices] = parcels[p].reshape(-1)[offset : offset + box.size].reshape(box.count)
    return out


@pytest.mark.parametrize(("mode", "scoped"), [("async", False), ("sync", False), ("async", True)])
def test_moving_arrays_from_mpi_ranks_read_bitwise_through_their_layouts(
    shared_dask: DaskProcesses, tmp_path: Path, mode: str, scoped: bool
) -> None:
    with shared_dask.client() as client:  # the module's earlier runs count in the scheduler's
        calls_before = Adapter(client).stats()["calls"]
    cmd = mpirun(NRANKS, sys.executable, str(HERE / "publish_moving.py"),
                 str(shared_dask.scheduler_file), "--steps", str(NSTEPS), "--mode", mode,
                 "--connect-timeout", str(STARTUP), "--out", str(tmp_path),
                 *(["--scoped"] if scoped else []))  # fmt: skip
    sim = subprocess.Popen(
        cmd, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    got: dict[str, list[tuple[int, dict[str, Any], list[np.ndarray]]]] = {}
    try:
        with shared_dask.client() as client:
            for name in ("x", "rho", "T"):
                got[name] = [read_step(client, name) for _ in range(NSTEPS)]
            got["late"] = [read_step(client, "late") for _ in range(2, NSTEPS)]
            meta = got["x"][0][1]["meta"], got["rho"][0][1]["meta"]
            # assembled by deisa.analysis.moving, as the Adapter does, from the same parcels
            _, reply, parcels = got["rho"][2]
            layout = StepLayout.from_wire(reply["layout"])
            offsets, owner = layout.offsets(), layout.parcel_of()
            boxes = [
                da.from_array(parcels[p].reshape(-1)[o : o + b.size].reshape(b.count))
                for b, p, o in zip(layout.boxes, owner, offsets, strict=True)
            ]
            rho2 = assemble(layout, boxes).compute()
            stats = Adapter(client).stats()
        out, err = sim.communicate(timeout=2 * STARTUP)
    finally:
        kill_if_running(sim)
    assert sim.returncode == 0, (out + err)[-3000:]
    assert meta[0]["moving"] is True and meta[0]["joined_axis"] == 0 and meta[0]["ndim"] == 1
    assert "shape" not in meta[0] and list(meta[1]["dims"]) == ["y", "x"]
    for name in ("x", "rho"):
        for step, (number, reply, parcels) in enumerate(got[name]):
            assert number == step
            layout = StepLayout.from_wire(reply["layout"])
            np.testing.assert_array_equal(whole(layout, parcels), truth(name, step))
            # one key per rank that holds elements, named (step key, rank)
            assert [key[1] for key in reply["keys"]] == sorted({key[1] for key in reply["keys"]})
    x0 = StepLayout.from_wire(got["x"][0][1]["layout"])
    assert x0.parcels == (1, 1) and [k[1] for k in got["x"][0][1]["keys"]] == [1, 2]  # rank 0: none
    # two boxes a rank: the step with the boxes moved still has one parcel a rank
    assert StepLayout.from_wire(got["rho"][2][1]["layout"]).parcels == (2, 2, 2)
    np.testing.assert_array_equal(rho2, truth("rho", 2))
    for step, (_, reply, blocks) in enumerate(got["T"]):
        if step == 2:  # published as boxes: a layout, the rows in two boxes each
            layout = StepLayout.from_wire(reply["layout"])
            assert layout.parcels == (2, 2, 2)
            np.testing.assert_array_equal(whole(layout, blocks), truth("T", step))
        else:  # published plain: today's grid keys, no layout
            assert "layout" not in reply
            rows = [b for _, b in sorted(zip(reply["keys"], blocks, strict=True))]
            np.testing.assert_array_equal(np.concatenate(rows), truth("T", step))
    # declared after step 1 (Bridge.declare), published from step 2
    for step, (number, reply, blocks) in enumerate(got["late"], start=2):
        rows = [b for _, b in sorted(zip(reply["keys"], blocks, strict=True))]
        assert number == step and "layout" not in reply
        np.testing.assert_array_equal(np.concatenate(rows), truth("late", step))
    # one scheduler message per step and array, whatever the number of boxes and ranks
    calls = {k: stats["calls"].get(k, 0) - calls_before.get(k, 0) for k in stats["calls"]}
    assert calls["publish"] == 3 * NSTEPS + NSTEPS - 2 and calls["open"] == 4
    exchanges = [int((tmp_path / f"exchanges-{r}.txt").read_text()) for r in range(NRANKS)]
    assert len(set(exchanges)) == 1  # the same collectives on every rank, scoped or not


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        # seen by rank 0 as it builds the step's layout: the step fails, every rank raises it
        ("shape", r"step 1 of 'rho-\w+': rank 2 gives the shape \(7, 8\), rank 1 gives \(6, 8\)"),
        # seen by the rank itself: a wrong call, raised on every rank
        # Bridge.declare with names that differ: raised on every rank, as at the construction
        ("declare", r"rank 1 publishes arrays \['late-other-declare'\], rank 0 publishes "
                    r"\['late-declare'\]"),
        ("outside", r"rank 1: publish\('rho-\w+', step=1\) refused: box 1 \[2:4, 4:8\] of "
                    r"'rho-\w+' lies outside the step's shape \(6, 4\)"),
    ],
)  # fmt: skip
def test_a_moving_step_whose_boxes_do_not_hold_together_fails_on_every_rank_naming_the_ranks(
    shared_dask: DaskProcesses, tmp_path: Path, bad: str, message: str
) -> None:
    cmd = mpirun(NRANKS, sys.executable, str(HERE / "publish_moving.py"),
                 str(shared_dask.scheduler_file), "--steps", str(NSTEPS), "--bad", bad,
                 "--out", str(tmp_path), "--connect-timeout", str(STARTUP),
                 f"--tag=-{bad}")  # fmt: skip
    done = subprocess.run(cmd, env=test_env(), capture_output=True, text=True, timeout=4 * STARTUP)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    raised = [(tmp_path / f"rank-{r}.txt").read_text() for r in range(NRANKS)]
    assert len(set(raised)) == 1, raised  # the same error on every rank
    assert re.search(message, raised[0]), raised[0]
