"""deisa.bridge.group in-process, on this process's one-rank communicators.

Its real run (4 ranks, an array on 2 of them, bitwise on the analytics side) is in
test_partial_arrays.py; the PDI plugin's per-entry communicators in test_pdi_plugin.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from deisa import ArraySpec, BridgeError, BridgeGroup
from deisa.bridge.arrays.decomposition import Decomposition, DecompositionError
from deisa.bridge.group import _groups, _members_disagree, _ranks_in

SPEC = ArraySpec("float64", (4, 4), (0, 0), (4, 4))


def test_groups_put_comm_first_then_each_communicator_by_first_name() -> None:
    probe = MPI.COMM_WORLD.Dup()
    try:
        arrays = dict.fromkeys(["z", "a", "probe_b", "probe_a", "self"], SPEC)
        array_comms = {"probe_b": probe, "probe_a": probe, "self": MPI.COMM_SELF}
        groups, problem = _groups(arrays, array_comms, MPI.COMM_NULL)
        assert problem is None
        assert groups == [
            (("a", "z"), None),
            (("probe_a", "probe_b"), probe),  # one Bridge per communicator
            (("self",), MPI.COMM_SELF),
        ]
    finally:
        probe.Free()


def test_groups_refuse_a_block_outside_its_communicator_and_a_member_without_one() -> None:
    _, problem = _groups({"edge": SPEC}, {"edge": MPI.COMM_NULL}, MPI.COMM_NULL)
    assert problem is not None and "array_comms['edge'] is MPI.COMM_NULL here" in problem
    _, problem = _groups({}, {"edge": MPI.COMM_SELF}, MPI.COMM_NULL)
    assert problem is not None and "gives no block of it" in problem
    groups, problem = _groups({"field": SPEC}, {"edge": MPI.COMM_NULL}, MPI.COMM_NULL)
    assert problem is None and groups == [(("field",), None)]  # a non-member rank


def test_group_refuses_a_block_outside_its_communicator_on_every_rank(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        BridgeGroup(str(tmp_path / "none.json"), {"field": SPEC}, bogus=1)
    with pytest.raises(BridgeError, match=r"rank 0 holds a block of 'edge' but array_comms"):
        BridgeGroup(
            str(tmp_path / "none.json"),
            {"field": SPEC, "edge": SPEC},
            array_comms={"edge": MPI.COMM_NULL},
        )


def test_group_dispatches_by_array_and_names_what_this_rank_does_not_hold(
    tmp_path: Path,
) -> None:
    # no scheduler: the Bridges connect in the background and fail at close
    group = BridgeGroup(
        str(tmp_path / "none.json"),
        {"probe": SPEC},
        array_comms={"probe": MPI.COMM_SELF, "edge": MPI.COMM_NULL},
        connect_timeout=0.2,
    )
    try:
        assert list(group.bridges) == [("probe",)]
        assert group.bridge("probe").comm == MPI.COMM_SELF
        assert group.options.connect_timeout == 0.2
        with pytest.raises(BridgeError, match=r"holds no block of 'edge'.*ranks of its comm"):
            group.publish("edge", SPEC, 0)  # type: ignore[arg-type]
        with pytest.raises(BridgeError, match=r"get\('stop'\) needs an array that every rank"):
            group.get("stop")
    finally:
        with pytest.raises(BridgeError, match=r"none\.json"):
            group.close()
    group.close()  # idempotent


def test_missing_block_error_hints_at_a_communicator_of_its_own() -> None:
    three = [ArraySpec("float64", (4, 4), start, (2, 2)) for start in [(0, 0), (0, 2), (2, 0)]]
    with pytest.raises(DecompositionError, match=r"by no rank: \[2:4, 2:4\].*comm.Split"):
        Decomposition.from_specs("edge", three)


def test_ranks_holding_an_array_must_be_exactly_its_communicators() -> None:
    assert _ranks_in(MPI.COMM_SELF, MPI.COMM_WORLD) == [0]
    edge = {"edge": [0, 1]}
    assert _members_disagree([edge, edge, {}, {}]) is None
    # every rank passed its own MPI_COMM_SELF: four one-rank communicators for one array
    problem = _members_disagree([{"edge": [rank]} for rank in range(4)])
    assert problem is not None
    assert "'edge' is held by ranks [0, 1, 2, 3] of comm, but the communicator rank 0" in problem
    assert "holds ranks [0]" in problem
    # rank 2 holds it, outside the communicator of ranks 0 and 1
    assert "held by ranks [0, 1, 2]" in (_members_disagree([edge, edge, {"edge": [2]}]) or "")


def test_declare_adds_arrays_to_the_bridge_over_comm_making_one_if_needed(
    tmp_path: Path,
) -> None:
    # a group of single values only (the ADIOS2 engine's rank 0): its arrays over comm come
    # later, with declare (a variable first Put after the first step)
    group = BridgeGroup(
        str(tmp_path / "none.json"),
        {"step": SPEC},
        array_comms={"step": MPI.COMM_SELF},
        connect_timeout=0.2,
    )
    try:
        group.declare({"x": ArraySpec.moving("float64", 1)})
        assert list(group.bridges) == [("x",), ("step",)]  # the one over comm first
        assert group.bridge("x").comm == group.comm and group.bridge("x") is not group.bridge(
            "step"
        )
    finally:
        with pytest.raises(BridgeError, match=r"none\.json"):
            group.close()
    with pytest.raises(BridgeError, match=r"declare\(\) after close\(\)"):
        group.declare({"y": SPEC})


def test_a_groups_step_holds_each_bridges_exchange_and_routes_by_array(tmp_path: Path) -> None:
    """``group.step(t)``: a step scope on each of this rank's Bridges (the ADIOS2 engine's
    arrays over comm and its single values over rank 0's), each publish on its array's."""
    group = BridgeGroup(
        str(tmp_path / "none.json"),
        {"field": SPEC, "probe": SPEC},
        array_comms={"probe": MPI.COMM_SELF, "edge": MPI.COMM_NULL},
        connect_timeout=0.2,
    )
    field, probe = group.bridge("field"), group.bridge("probe")
    assert field is not probe
    block = np.ones((4, 4))
    try:
        with group.step(0) as s:
            s.publish("field", block)
            s.publish("probe", block)
            # each Bridge holds its own publish's exchange until the end of the step
            assert [call for call, _ in field._async.held or []] == [("field", 0)]
            assert [call for call, _ in probe._async.held or []] == [("probe", 0)]
            with pytest.raises(BridgeError, match=r"holds no block of 'edge'"):
                s.publish("edge", block)
            with pytest.raises(RuntimeError, match=r"inside another bridge\.step"):
                group.step(1).__enter__()
        assert field._async.held is None and probe._async.held is None
        with pytest.raises(RuntimeError, match=r"publish\('field'\) outside its group\.step\(0\)"):
            s.publish("field", block)
    finally:
        with pytest.raises(BridgeError, match=r"none\.json"):
            group.close()
