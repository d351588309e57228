"""Rank 0's calls relayed by a worker of its node (deisa.bridge.link.relay,
deisa.worker.relay): against real workers in process (``gen_cluster``), the routes answer as
through distributed, a call the
relay does not make is refused, a lost relay hands its calls to distributed, and the relay and
rank 0 each refuse a process of another account (server-side: a real process of uid 65534);
then a real rank 0 against real dask processes, which never imports distributed."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bridge.shm.test_transport import AS_NOBODY, REFUSED, as_root, attack, squat
from conftest import STARTUP, start_dask, test_env
from distributed.utils_test import gen_cluster

from deisa import Adapter
from deisa.bridge.link.connect import Connections, route
from deisa.bridge.link.relay import Relay, RemoteError
from deisa.wire import Route
from deisa.wire.relay import pack, read_frame, relay_name
from deisa.worker.services import WorkerServices


async def relayed(c: Any, s: Any) -> Relay:
    """The plugin on the workers, then rank 0's connection to the node's relay."""
    await c.register_plugin(WorkerServices())
    relay = await Relay.open(s.address, STARTUP)
    assert relay is not None
    return relay


def relaying(relay: Relay, *workers: Any) -> Any:
    """The worker (of ``workers``) whose relay ``relay`` reached."""
    (worker,) = [w for w in workers if w.address == relay.worker]
    return worker


@gen_cluster(client=True, timeout=STARTUP)
async def test_the_routes_answer_through_the_relay_as_through_distributed(c, s, a, b) -> None:
    relay = await relayed(c, s)
    assert relay.worker in (a.address, b.address)  # one relay per node: the first to bind it
    pool, direct = Connections(), Connections()
    pool.relay = relay
    try:
        await relay.call("install", shared_memory=True)
        workers = await route(pool, s.address, Route.WORKERS)()
        assert workers == await route(direct, s.address, Route.WORKERS)()
        assert sorted(w for w, _ in workers) == sorted([a.address, b.address])
        meta = {"dtype": "<f8", "shape": [4], "chunks": [[4]], "run": "r1"}
        opened = await route(pool, s.address, Route.OPEN)(
            name="x", run="r1", meta=meta, buffer_nb=None, on_full="block"
        )
        assert opened["status"] == "OK", opened
        key = ("deisa-r1-x-0", 0)
        await c.scatter({key: 1.0}, workers=[a.address])  # a block on its worker, as a rank sends
        reply = await route(pool, s.address, Route.PUBLISH)(
            name="x", run="r1", step=0, blocks=[(key, a.address, 8)], timeout=None, contract=None
        )
        assert reply["status"] == "OK", reply
        wrong = await route(pool, s.address, Route.PUBLISH)(
            name="x", run="other", step=1, blocks=[], timeout=None, contract=None
        )
        assert wrong["status"] == "error" and "not opened by run other" in wrong["message"]
        value = await route(pool, s.address, Route.GET_VALUE)(name="nothing-set")
        assert value == await route(direct, s.address, Route.GET_VALUE)(name="nothing-set")
        # an exception raised by the route itself comes back as one, naming its type
        with pytest.raises(RemoteError, match="TypeError"):
            await relay.call(Route.OPEN.value, name="x")
        # a reply msgpack cannot carry is answered with an error, not left unanswered
        real = s.handlers[Route.GET_VALUE.value]
        s.handlers[Route.GET_VALUE.value] = lambda **kw: {"status": "OK", "value": {1, 2}}
        try:
            with pytest.raises(RemoteError, match="cannot be relayed"):
                await relay.call(Route.GET_VALUE.value, name="v")
        finally:
            s.handlers[Route.GET_VALUE.value] = real
        assert pool._pool is None, "a call went through distributed"
    finally:
        await pool.close()
        await direct.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_the_relay_makes_deisas_calls_only(c, s, a, b) -> None:
    relay = await relayed(c, s)
    await relay.call("install", shared_memory=True)
    plugins = set(s.worker_plugins)
    try:
        for op in ("register_worker_plugin", "run_function", "terminate", "hello2"):
            with pytest.raises(RemoteError, match="deisa's calls only"):
                await relay.call(op, plugin=b"\x80\x04K\x01.", name="x", idempotent=False)
        assert set(s.worker_plugins) == plugins
        # not our wire at all: that connection ends, the relay goes on serving
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        await loop.sock_connect(sock, relay_name(s.address))
        try:
            await loop.sock_sendall(sock, struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")
            assert await asyncio.wait_for(loop.sock_recv(sock, 1024), STARTUP) == b""
        finally:
            sock.close()
        assert (await relay.call(Route.GET_VALUE.value, name="v"))["status"] == "OK"
    finally:
        await relay.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_lost_relay_hands_its_calls_to_distributed(c, s, a, b) -> None:
    relay = await relayed(c, s)
    pool = Connections()
    pool.relay = relay
    try:
        await relay.call("install", shared_memory=True)
        # a call waiting on the scheduler when the relay's worker leaves: answered anyway
        watching = asyncio.ensure_future(
            route(pool, s.address, Route.WATCH_WORKERS)(known=[a.address, b.address], timeout=60)
        )
        await asyncio.sleep(0.5)
        await relaying(relay, a, b).close()
        reply = await asyncio.wait_for(watching, STARTUP)
        assert reply["status"] == "OK", reply
        assert relay.lost
        again = await route(pool, s.address, Route.WORKERS)()
        assert len(again) == 1
    finally:
        await pool.close()


@gen_cluster(client=True, timeout=STARTUP)
async def test_no_relay_without_the_plugin(c, s, a, b) -> None:
    assert await Relay.open(s.address, STARTUP) is None
    assert await Relay.open("tcp://127.0.0.1:9", STARTUP) is None  # another scheduler's name


ATTACKER = """
import socket, struct
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout({timeout})
sock.connect({name!r})
try:
    sock.sendall({frame!r})
    print("reply:", sock.recv(65536)[:40])
except OSError as exc:
    print("refused:", type(exc).__name__)
"""


@as_root
@gen_cluster(client=True, timeout=STARTUP)
async def test_the_relay_refuses_another_account(c, s, a, b) -> None:
    relay = await relayed(c, s)
    await relay.close()
    frame = pack({"id": 1, "op": "hello", "kwargs": {}})
    script = ATTACKER.format(timeout=STARTUP, name=relay_name(s.address), frame=frame)
    assert (await attack(script)).startswith("reply: b'\\x00"), "no positive control"
    refused = await attack(script, **AS_NOBODY)
    assert refused in REFUSED, refused


@as_root
def test_rank_0_refuses_a_relay_of_another_account() -> None:
    """Another account took the relay's name first: rank 0 sees whose socket it is and calls
    the scheduler through distributed (nothing is sent to the squatter)."""
    scheduler = "tcp://127.0.0.1:9"
    squatter = squat(relay_name(scheduler), "SOCK_STREAM")
    try:
        assert asyncio.run(Relay.open(scheduler, STARTUP)) is None
    finally:
        squatter.kill()
        squatter.wait()


def test_frames_are_length_prefixed_msgpack_maps() -> None:
    async def read(data: bytes) -> Any:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_frame(reader)

    message = {"id": 3, "op": "deisa_publish", "kwargs": {"blocks": [(("k", 0), "w", 8)]}}
    assert asyncio.run(read(pack(message)))["kwargs"]["blocks"] == ((("k", 0), "w", 8),)
    with pytest.raises(ValueError, match="a relay frame is a map"):
        asyncio.run(read(struct.pack(">I", 1) + b"\x01"))
    with pytest.raises(ValueError, match="at most"):
        asyncio.run(read(struct.pack(">I", 1 << 30)))
    with pytest.raises(ConnectionResetError):
        asyncio.run(read(pack(message)[:-1]))


RANK_0 = """
import logging, sys
import numpy as np
from deisa import ArraySpec, Bridge

logging.basicConfig(level=logging.INFO, format="%%(name)s: %%(message)s")
block = np.arange(64.0).reshape(8, 8)
spec = ArraySpec(block.dtype, block.shape, (0, 0), block.shape)
bridge = Bridge(sys.argv[1], {"field": spec}, connect_timeout=%(timeout)s)
for step in range(3):
    bridge.publish("field", block + step, step)
bridge.close()
print("distributed" in sys.modules, bridge.transport)
"""


@pytest.mark.parametrize("first", ["workers", "analytics", "rank 0"])
def test_a_rank_0_on_a_workers_node_imports_distributed_only_when_it_installs_the_plugin(
    tmp_path: Path, first: str
) -> None:
    """Who installs deisa's worker services: the workers' preload (as deisa-run's), else the
    first side to connect: the analytics' Adapter, or rank 0 itself (with distributed, said in
    one log line)."""
    cluster = start_dask(tmp_path, n_workers=1, bridge_preload=first == "workers")
    try:
        client = cluster.client()
        try:
            adapter = Adapter(client, timeout=STARTUP) if first == "analytics" else None
            proc = subprocess.run(
                [sys.executable, "-c", RANK_0 % {"timeout": STARTUP}, str(cluster.scheduler_file)],
                env=test_env(), capture_output=True, text=True, timeout=3 * STARTUP,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            installs = first == "rank 0"
            assert proc.stdout.split() == [str(installs), "shared", "memory"], proc.stderr
            said = [line for line in proc.stderr.splitlines() if "no worker of this node" in line]
            assert len(said) == installs, proc.stderr
            assert all("--preload deisa.worker" in line for line in said)
            adapter = adapter or Adapter(client, timeout=STARTUP)
            steps = [(s, f.compute()) for s, f in adapter["field"].items()]
            assert [s for s, _ in steps] == [0, 1, 2]
            for s, values in steps:
                np.testing.assert_array_equal(values, np.arange(64.0).reshape(8, 8) + s)
        finally:
            client.close()
    finally:
        cluster.stop()
