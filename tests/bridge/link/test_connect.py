"""deisa.bridge.link.connect against a real scheduler in process (``gen_cluster``): a scheduler that
already holds the extension of another deisa (a long-lived one, where an older Bridge installed
it) is refused at the connection, naming both protocols, before any step."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import STARTUP
from distributed.utils_test import gen_cluster

from deisa import ArraySpec, BridgeError, BridgeOptions
from deisa.bridge.arrays.decomposition import Decomposition
from deisa.bridge.contracts import ContractBook
from deisa.bridge.link.connect import Connections, connect_rank_0
from deisa.scheduler import StreamExtension
from deisa.wire import EXTENSION_NAME, PROTOCOL


class OlderExtension(StreamExtension):
    """The extension as deisa's protocol 1 had it: ``deisa_open`` did not say its protocol."""

    async def open_stream(self, *args: Any, **kwargs: Any) -> Any:
        reply = await super().open_stream(*args, **kwargs)
        del reply["protocol"]
        return reply


async def connect_to(address: str, decompositions: dict[str, Decomposition]) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        scheduler_file = Path(tmp) / "scheduler.json"
        scheduler_file.write_text(json.dumps({"address": address}))
        pool = Connections()
        try:
            return await connect_rank_0(
                pool, str(scheduler_file), BridgeOptions(connect_timeout=STARTUP),
                decompositions, ContractBook(), None,
            )  # fmt: skip
        finally:
            await pool.close()


def field() -> dict[str, Decomposition]:
    spec = ArraySpec(np.dtype("f8"), (4, 4), (0, 0), (4, 4))
    return {"f": Decomposition.from_specs("f", [spec])}


@gen_cluster(client=True, timeout=STARTUP)
async def test_the_extension_of_this_protocol_connects(c: Any, s: Any, a: Any, b: Any) -> None:
    connection = await connect_to(s.address, field())
    assert connection.address == s.address and connection.workers


@gen_cluster(client=True, timeout=STARTUP)
async def test_an_extension_of_another_protocol_is_refused_naming_both(
    c: Any, s: Any, a: Any, b: Any
) -> None:
    await c.register_plugin(OlderExtension(), name=EXTENSION_NAME)  # before any Bridge of ours
    with pytest.raises(
        BridgeError, match=rf"protocol 1, and this Bridge speaks protocol {PROTOCOL}"
    ):
        await connect_to(s.address, field())
