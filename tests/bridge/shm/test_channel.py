"""deisa.bridge.shm.channel: a step's blocks handed to a worker together (issue 56 item 9): the
puts of one loop turn go as one ``puts`` message (within ``MAX_MESSAGE``) and come back as one
``stored-many`` answer, each block stored as a view of its slot; against real workers in process
(``gen_cluster``); the grouping and the answers' reading, pure."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from conftest import STARTUP
from distributed.utils_test import gen_cluster

from deisa.bridge.shm.channel import answers, fitting
from deisa.bridge.shm.transport import Transport
from deisa.wire.shm import MAX_MESSAGE, encode
from deisa.worker import shm as worker_shm
from deisa.worker.services import WorkerServices


def test_blocks_are_grouped_in_messages_that_fit_in_order() -> None:
    blocks = [
        {"id": i, "slot": i, "key": [f"deisa-run-array-{i}-0", 0, 0], "dtype": "<f8",
         "shape": [512, 512]}
        for i in range(2000)
    ]  # fmt: skip
    groups = fitting(blocks)
    assert len(groups) > 1 and [b for g in groups for b in g] == blocks
    assert all(len(encode(op="puts", blocks=g)) <= MAX_MESSAGE for g in groups)
    assert fitting(blocks[:3]) == [blocks[:3]]


def test_a_stored_many_answer_is_read_as_one_answer_per_put() -> None:
    many = {"op": "stored-many", "stored": [[3, 64], [4, 128]], "errors": [[5, "ValueError: x"]]}
    assert answers(many) == [
        (3, {"op": "stored", "nbytes": 64}),
        (4, {"op": "stored", "nbytes": 128}),
        (5, {"op": "error", "message": "ValueError: x"}),
    ]
    one = {"op": "stored", "id": 7, "nbytes": 8}
    assert answers(one) == [(7, one)]


@gen_cluster(client=True, timeout=STARTUP)
async def test_the_blocks_of_one_loop_turn_go_in_one_message_and_are_stored(c, s, a, b) -> None:
    await c.register_plugin(WorkerServices())
    ops: list[str] = []
    handle = worker_shm._Peer.handle

    def recording(self: Any, message: dict[str, Any], fds: list[int]) -> Any:
        ops.append(message.get("op", "?"))
        return handle(self, message, fds)

    worker_shm._Peer.handle = recording  # type: ignore[method-assign]
    transport = Transport()
    blocks = [np.full((64, 8), float(i)) for i in range(5)]
    try:
        assert await transport.channel(a.address) is not None
        ops.clear()
        sizes = await asyncio.gather(
            *(transport.send_shared(a.address, (f"deisa-test-{i}", 0), blk)
              for i, blk in enumerate(blocks))
        )  # fmt: skip
        assert sizes == [blk.nbytes for blk in blocks]
        assert ops.count("puts") == 1 and "put" not in ops  # one hand-over for the five
        for i, blk in enumerate(blocks):
            np.testing.assert_array_equal(a.data[(f"deisa-test-{i}", 0)], blk)
            assert type(a.data[(f"deisa-test-{i}", 0)].base).__name__ == "_SlotView"
        ops.clear()
        assert await transport.send_shared(a.address, ("deisa-test-alone", 0), blocks[0]) == 4096
        assert [op for op in ops if op != "slot"] == ["put"]  # a block alone: a put, as before
    finally:
        worker_shm._Peer.handle = handle  # type: ignore[method-assign]
        await transport.close()
