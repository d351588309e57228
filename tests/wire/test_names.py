"""Abstract socket names another account cannot take first (deisa.wire.names), server-side:
a real process of uid 65534 binds names before a real worker's listener and relay do. The
positive control: without the run's secret (the names as public as address and uid), holding
them all sends the ranks by TCP and rank 0 through distributed. With the run's TLS key, the
names are others, and a name held anyway (leaked) is replaced by the next, on both sides; a
rank with the key still finds a worker started without it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from bridge.shm.test_transport import as_root, squat
from conftest import STARTUP
from distributed.utils_test import gen_cluster

from deisa.bridge.link.relay import Relay
from deisa.bridge.shm import channel as _shm
from deisa.wire import names as _names
from deisa.wire.relay import relay_names
from deisa.wire.shm import socket_names
from deisa.wire.tls_files import TLS_FILES_ENV
from deisa.worker.services import WorkerServices

KEY = "-----BEGIN PRIVATE KEY-----\na stand-in, secret all the same\n-----END PRIVATE KEY-----"


def test_names_depend_on_the_secret_the_address_and_the_uid() -> None:
    base = _names.names("shm", "tls://10.0.0.1:1")
    assert len(base) == len(set(base)) == _names.TRIES
    assert all(name.startswith(b"\0deisa-shm-") for name in base)
    assert base == _names.names("shm", "tls://10.0.0.1:1", uid=os.getuid())
    for other in (
        _names.names("shm", "tls://10.0.0.1:1", b"secret"),
        _names.names("shm", "tls://10.0.0.1:2"),
        _names.names("shm", "tls://10.0.0.1:1", uid=os.getuid() + 1),
        _names.names("relay", "tls://10.0.0.1:1"),
    ):
        assert not set(other) & set(base)


def test_the_secret_is_the_hash_of_the_runs_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "key.pem"
    key.write_text(KEY + "\n")
    expected = hashlib.sha256(KEY.encode()).digest()
    monkeypatch.setenv(TLS_FILES_ENV[2], str(key))
    assert _names.run_secret() == expected
    assert _names.rank_secrets() == [expected, b""]  # then the names of a worker without it
    monkeypatch.setenv(TLS_FILES_ENV[2], KEY)  # the key itself, not a file
    assert _names.run_secret() == expected
    monkeypatch.delenv(TLS_FILES_ENV[2])
    assert _names.run_secret() == b"" and _names.rank_secrets() == [b""]
    assert _names._key_secret(str(tmp_path / "missing")) == b""


def squat_all(names: list[bytes], kind: str = "SOCK_SEQPACKET") -> list[Any]:
    return [squat(name, kind) for name in names]


@as_root
@gen_cluster(client=True, timeout=STARTUP)
async def test_names_held_by_another_account_are_replaced(c, s, a, b) -> None:
    key = Path(os.environ.get("TMPDIR", "/tmp")) / f"deisa-test-key-{os.getpid()}.pem"
    key.write_text(KEY)
    secret = hashlib.sha256(KEY.strip().encode()).digest()
    squatters = squat_all(socket_names(a.address))
    squatters += squat_all(relay_names(s.address), "SOCK_STREAM")
    try:
        # the control: public names (no secret), all held: TCP, and no relay
        await c.register_plugin(WorkerServices())
        assert await _shm.Channel.open(a.address) is None
        assert await Relay.open(s.address, STARTUP) is None
        await c.unregister_worker_plugin(WorkerServices.name)
        # the run's secret; its first names leaked and held too
        os.environ[TLS_FILES_ENV[2]] = str(key)
        squatters += [squat(socket_names(a.address, secret)[0])]
        squatters += [squat(relay_names(s.address, secret)[0], "SOCK_STREAM")]
        await c.register_plugin(WorkerServices())
        channel = await _shm.Channel.open(a.address)
        assert channel is not None
        assert channel.sock.getpeername() == socket_names(a.address, secret)[1]
        await channel.close()
        relay = await Relay.open(s.address, STARTUP)
        assert relay is not None
        await relay.close()
    finally:
        os.environ.pop(TLS_FILES_ENV[2], None)
        key.unlink()
        for squatter in squatters:
            squatter.kill()
            squatter.wait()


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_rank_with_the_secret_finds_a_worker_started_without_it(c, s, a, b) -> None:
    await c.register_plugin(WorkerServices())  # no DEISA_TLS_KEY: the names without secret
    key = Path(os.environ.get("TMPDIR", "/tmp")) / f"deisa-test-key-{os.getpid()}.pem"
    key.write_text(KEY)
    os.environ[TLS_FILES_ENV[2]] = str(key)
    try:
        channel = await _shm.Channel.open(a.address)
        assert channel is not None
        assert channel.sock.getpeername() == socket_names(a.address)[0]
        await channel.close()
        relay = await Relay.open(s.address, STARTUP)
        assert relay is not None
        await relay.close()
    finally:
        os.environ.pop(TLS_FILES_ENV[2], None)
        key.unlink()
