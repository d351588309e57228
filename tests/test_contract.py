"""deisa.contract: the Contract value object and the block geometry of a region, no cluster.

The scheduler's routes are tested in ``scheduler/test_scheduler_contracts.py``, the Adapter's
side in ``analysis/test_analysis_contracts.py``, real processes in ``test_contracts_mpi.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from deisa.contract import FULL, Contract, ContractError, block_box, local_slices, plan, sub_chunks

META = {"dtype": "<f8", "shape": [8, 6], "chunks": [[4, 4], [3, 3]], "run": "r1"}
# 2 x 2 blocks of 4 x 3, rank r at grid position (r // 2, r % 2)
CHUNKS = ((4, 4), (3, 3))
BLOCKS = ((0, 0), (0, 1), (1, 0), (1, 1))


# -- the value object ----------------------------------------------------------------------


def test_contract_build_resolves_and_selects_steps() -> None:
    c = Contract.build((slice(2, None), slice(None, 3)), slice(10, 30, 5))
    assert [s for s in range(40) if c.wants(s)] == [10, 15, 20, 25]
    assert c.resolved((8, 6)).region == ((2, 8), (0, 3))
    assert Contract.build(None, 3).wants(6) and not Contract.build(None, 3).wants(7)
    window = Contract.build(None, range(4, 8))
    assert window.wants(7) and not window.wants(8)
    assert Contract.from_wire(c.to_wire()) == c
    assert c.describe() == "region [2:, 0:3], steps 10:30:5"


@pytest.mark.parametrize(
    ("region", "steps", "message"),
    [
        (None, 0, "stride=0 must be a positive integer"),
        (None, slice(0, None, -5), "stride=-5 must be a positive integer"),
        (None, range(5, 2), "stop=2 must be after start=5"),
        (None, "every", "must be None, a range, a slice or an int stride"),
        (None, slice(0.5, None), "start=0.5 must be an integer"),
        ((slice(0, 4, 2),), None, "has step 2; a region is a box"),
        ((slice(-4, None),), None, "bound -4 on axis 0 must be a non-negative integer"),
        ((slice(3, 3),), None, "slice [3:3] on axis 0 is empty"),
        ("rows", None, "must be None or a tuple of one slice per spatial axis"),
        ((slice(0, 2), "x"), None, "axis 1 is 'x', not a slice"),
    ],
)
def test_contract_build_refuses_bad_selections(region: Any, steps: Any, message: str) -> None:
    with pytest.raises(ContractError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Contract.build(region, steps)


def test_contract_resolved_refuses_a_region_outside_the_array() -> None:
    with pytest.raises(ContractError, match=r"region \[0:9\] on axis 0 is outside array 'u'"):
        Contract.build((slice(0, 9), slice(0, 2))).resolved((8, 6), "u")
    with pytest.raises(ContractError, match=r"region \[8:\] on axis 0 is outside"):
        Contract.build((slice(8, None), slice(0, 2))).resolved((8, 6), "u")
    with pytest.raises(ContractError, match="region has 1 axes, array 'u' has 2"):
        Contract.build((slice(0, 2),)).resolved((8, 6), "u")
    with pytest.raises(ContractError, match="must be a dict"):
        Contract.from_wire([1, 2])


# -- geometry ------------------------------------------------------------------------------


def test_block_box_sub_chunks_and_local_slices() -> None:
    box = ((2, 5), (3, 6))  # rows 2-4 cross both block rows; columns 3-5 are block column 1
    blocks = block_box(box, CHUNKS)
    assert blocks == ((0, 2), (1, 2))
    assert sub_chunks(blocks, CHUNKS) == ((4, 4), (3,))
    assert local_slices(box, blocks, CHUNKS) == (slice(2, 5), slice(0, 3))
    assert block_box(((0, 8), (0, 6)), CHUNKS) == ((0, 2), (0, 2))
    assert block_box(((4, 5), (2, 3)), CHUNKS) == ((1, 2), (0, 1))  # edges are exclusive


def test_plan_names_the_ranks_whose_block_intersects_the_region() -> None:
    c = Contract.build((slice(0, 4), slice(3, 6)), 2).resolved((8, 6))
    p = plan(c, 4, CHUNKS, BLOCKS)
    assert (p.send, p.ranks, p.origin) == (True, (1,), (0, 1))
    assert p.key_index((0, 1)) == (0, 0) and p.sends(1) and not p.sends(0)
    assert not plan(c, 3, CHUNKS, BLOCKS).send  # a step not wanted: nobody sends
    assert plan(None, 3, CHUNKS, BLOCKS) is FULL and FULL.sends(3)
    steps_only = plan(Contract.build(None, 2), 2, CHUNKS, BLOCKS)
    assert steps_only.ranks is None and steps_only.key_index((1, 1)) == (1, 1)
    assert plan(c.resolved((8, 6)), 0, CHUNKS, BLOCKS).wire() == c.to_wire()
