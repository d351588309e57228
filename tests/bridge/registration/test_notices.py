"""deisa.bridge.registration.notices: the notices' wire format, where rank 0 listens, and a
listener with its ranks' connections in one event loop (TLS with in-memory certificates), feeding
rank 0's step accounting (:class:`~deisa.bridge.registration.registrar.EarlyRegistration`, whose
own tests are in ``test_registrar.py``); no MPI, no cluster.

The attacks on a real run's listener (2 ranks under mpirun) are in ``test_security.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import pytest
from conftest import test_env
from distributed.utils_test import async_poll_for

from deisa.bridge._publisher import Entry, Sent
from deisa.bridge.registration import notices as _notices
from deisa.bridge.registration.notices import (
    ADMITTED,
    MAX_LINE,
    NoticeListener,
    Notifier,
    decode_notice,
    encode_notice,
)
from deisa.bridge.registration.registrar import EarlyRegistration
from deisa.launcher.security import make_credentials
from deisa.wire import guard as _guard
from deisa.wire.tls_files import TLS_FILES_ENV

W = "tcp://127.0.0.1:4242"
TOKEN = "f" * 32
# a deadline for what must happen in this process: generous, a loaded machine still meets it
WAIT = 30.0


@pytest.fixture(autouse=True)
def _no_job_files_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's TLS settings alone, whatever environment runs the tests."""
    for name in TLS_FILES_ENV:
        monkeypatch.delenv(name, raising=False)


def line(**fields: Any) -> bytes:
    notice = {"token": TOKEN, "seq": 0, "rank": 1, "nbytes": 8, "worker": W, **fields}
    return json.dumps(notice).encode() + b"\n"


def test_notice_round_trip() -> None:
    assert decode_notice(encode_notice(TOKEN, 7, 2, 800, W), TOKEN, 3) == (7, 2, 800, W, None)
    assert len(encode_notice(TOKEN, 2**40, 4095, 2**40, "tls://[::1]:65535")) < MAX_LINE // 4


def test_a_notice_carries_a_moving_steps_geometry_in_plain_form() -> None:
    geometry = ((8, 8), ((0, 0, 2, 4), (2, 0, 2, 4)))
    notice = encode_notice(TOKEN, 3, 1, 64, W, geometry)
    assert decode_notice(notice, TOKEN, 3) == (3, 1, 64, W, geometry)
    assert b'"geometry":[[8,8],[[0,0,2,4],[2,0,2,4]]]' in notice
    assert b"geometry" not in encode_notice(TOKEN, 3, 1, 64, W)  # a plain block: today's notice


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (line()[:-1], "not a notice line"),
        (b" " * MAX_LINE + line(), "not a notice line"),
        (b"\x80\x03cbuiltins\nopen\n", "can't decode"),  # a pickle
        (b"{not json}\n", "Expecting property name"),
        (b"[1, 2, 3]\n", "has the fields"),
        (json.dumps({"token": TOKEN}).encode() + b"\n", "has the fields"),
        (line(extra=1), "has the fields"),
        (line(seq=True), "seq is a int, got bool"),
        (line(nbytes="8"), "nbytes is a int, got str"),
        (line(worker=["tcp://w"]), "worker is a str, got list"),
        (line(token=None), "token is a str, got NoneType"),
        (line(token="e" * 32), "another job's token"),
        (line(token="é"), "another job's token"),
        (line(rank=3), "rank 3 of 3"),
        (line(rank=-1), "rank -1 of 3"),
        (line(seq=-1), "seq -1"),
        (line(geometry=[[4], [[-1]]]), "non-negative integers"),
        (line(geometry={"__reduce__": 1}), "a geometry is a"),
        (line(geometry=[[4], [[1, 2]]], token="e" * 32), "another job's token"),  # token first
    ],
)
def test_notice_refusals_name_the_problem(bad: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode_notice(bad, TOKEN, 3)


def _rank_0(
    nranks: int = 3,
) -> tuple[NoticeListener, EarlyRegistration, list[tuple[int, list[Sent]]]]:
    """Rank 0's listener feeding its step accounting, as the registrar wires them, and the
    publications the accounting hands on."""
    handed: list[tuple[int, list[Sent]]] = []
    early = EarlyRegistration(nranks, lambda entry, sent: handed.append((entry.seq, sent)))
    early.activate()
    return NoticeListener(nranks, early.sent), early, handed


@pytest.mark.parametrize(
    ("scheduler", "why"),
    [
        ("tcp://10.1.2.3:8786", "plain TCP between hosts"),
        ("tcp://scheduler.example.org:8786", "plain TCP between hosts"),
        ("inproc://10.1.2.3/1/2", "no notices over inproc://"),
        ("tls://127.0.0.1:8786", "no client certificate"),  # no TLS settings in this process
    ],
)
def test_no_listener_where_anyone_could_reach_it(
    scheduler: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    listener, _, _ = _rank_0()
    with caplog.at_level(logging.INFO, logger="deisa.bridge.registration.notices"):
        assert asyncio.run(listener.listen(scheduler)) is None
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert scheduler in record.getMessage() and why in record.getMessage()
    assert "registered at the next publish" in record.getMessage()


async def _serving(
    scheduler: str, nranks: int, body: Callable[[NoticeListener, EarlyRegistration, str], Any]
) -> list[tuple[int, list[Sent]]]:
    listener, early, handed = _rank_0(nranks)
    address = await listener.listen(scheduler)
    assert address is not None
    try:
        await body(listener, early, address)
    finally:
        await listener.close()
    return handed


def test_loopback_listener_takes_the_ranks_notices_and_drops_the_rest() -> None:
    async def body(listener: NoticeListener, early: EarlyRegistration, address: str) -> None:
        assert address.startswith("tcp://127.0.0.1:")
        host, port = address[len("tcp://") :].rsplit(":", 1)
        # garbage first, on connections of their own: each is dropped and closed
        for junk in (b"\x80\x04\x95junk\n", line(token="x" * 32), b"y" * (2 * MAX_LINE)):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(junk)
            # admitted, then closed by the listener
            assert await asyncio.wait_for(reader.read(), WAIT) == ADMITTED
            writer.close()
        ranks = [Notifier(address, listener.token, rank) for rank in (1, 2)]
        early.known(Entry(0, "a", 0, 0))
        early.known(Entry(1, "a", 1, 0))
        early.sent(0, 0, 5, W)  # rank 0's own block: no notice
        early.sent(1, 0, 5, W)
        for seq in (1, 0):
            await asyncio.gather(*(r.notify(seq, 10 * seq + r.rank, W) for r in ranks))
        await async_poll_for(lambda: early.next_seq == 2, WAIT, period=0.01)
        for r in ranks:
            await r.close()

    handed = asyncio.run(_serving("tcp://127.0.0.1:8786", 3, body))
    assert handed == [(0, [(5, W), (1, W), (2, W)]), (1, [(5, W), (11, W), (12, W)])]


def test_a_notice_that_cannot_be_sent_is_dropped_quietly() -> None:
    async def body() -> None:
        listener, _, _ = _rank_0()
        address = await listener.listen("tcp://localhost:8786")
        assert address is not None
        await listener.close()  # nothing listens there any more
        notifier = Notifier(address, listener.token, 1)
        await notifier.notify(0, 8, W)  # refused: logged at debug level, not raised
        await notifier.notify(1, 8, W)  # within NOTICE_RETRY_S of the failure: not even tried
        await notifier.close()

    asyncio.run(body())


def test_a_notice_refused_while_the_listener_is_full_arrives_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Silent connections hold every unauthenticated place of the listener: a rank's
    connection is refused (it reads no ADMITTED), and its notices are sent again once those
    places are dropped (after HANDSHAKE_S, shortened here)."""
    monkeypatch.setattr(_guard, "HANDSHAKE_S", 5.0)
    monkeypatch.setattr(_notices, "NOTICE_RETRY_S", 0.2)

    async def body(listener: NoticeListener, early: EarlyRegistration, address: str) -> None:
        host, port = address[len("tcp://") :].rsplit(":", 1)
        assert listener._server is not None
        guard = listener._server.guard
        silent = [await asyncio.open_connection(host, int(port)) for _ in range(guard.cap)]
        await async_poll_for(lambda: guard.pending == guard.cap, WAIT)
        notifier = Notifier(address, listener.token, 1)
        early.known(Entry(0, "a", 0, 0))
        early.sent(0, 0, 5, W)
        await notifier.notify(0, 7, W)  # refused: the listener is full
        assert early.next_seq == 0 and guard.total_refused >= 1
        await async_poll_for(lambda: early.next_seq == 1, WAIT, period=0.05)
        await notifier.close()
        for _, writer in silent:
            writer.close()

    handed = asyncio.run(_serving("tcp://127.0.0.1:8786", 2, body))
    assert handed == [(0, [(5, W), (7, W)])]


def test_a_rank_idle_past_the_bound_is_dropped_and_its_next_notice_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The listener closes a connection idle for IDLE_S after its notice; once the rank has
    seen it closed, its next notice opens another. (A notice written while rank 0 is closing
    the connection is lost, for the exchange to carry: hence the wait on the rank's side, not
    only on the listener's.)"""
    monkeypatch.setattr(_notices, "IDLE_S", 0.5)
    monkeypatch.setattr(_notices, "NOTICE_RETRY_S", 0.0)

    async def body(listener: NoticeListener, early: EarlyRegistration, address: str) -> None:
        server = listener._server
        assert server is not None
        notifier = Notifier(address, listener.token, 1)

        async def deliver(seq: int) -> None:
            early.known(Entry(seq, "a", seq, 0))
            early.sent(seq, 0, 5, W)
            await notifier.notify(seq, 7, W)
            await async_poll_for(lambda: early.next_seq == seq + 1, WAIT, period=0.05)
            # the listener closes the connection idle past IDLE_S, and the rank sees it closed
            await async_poll_for(lambda: not server.writers, WAIT, period=0.05)
            await async_poll_for(lambda: not notifier.connected, WAIT, period=0.01)

        await deliver(0)
        await deliver(1)  # on a new connection
        await notifier.close()

    handed = asyncio.run(_serving("tcp://127.0.0.1:8786", 2, body))
    assert [seq for seq, _ in handed] == [0, 1]


def test_a_ranks_first_notice_may_come_later_than_the_idle_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The idle bound counts from a connection's last notice: its first may take as long as any
    first message to the guarded listener (HANDSHAKE_S, the deadline of this test here)."""
    monkeypatch.setattr(_notices, "IDLE_S", 0.5)
    monkeypatch.setattr(_guard, "HANDSHAKE_S", WAIT)

    async def body(listener: NoticeListener, early: EarlyRegistration, address: str) -> None:
        host, port = address[len("tcp://") :].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await asyncio.wait_for(reader.readexactly(len(ADMITTED)), WAIT) == ADMITTED
        early.known(Entry(0, "a", 0, 0))
        early.sent(0, 0, 5, W)
        await asyncio.sleep(2 * _notices.IDLE_S)  # a rank slow to write, past the idle bound
        writer.write(encode_notice(listener.token, 0, 1, 7, W))
        await async_poll_for(lambda: early.next_seq == 1, WAIT, period=0.05)
        writer.close()

    handed = asyncio.run(_serving("tcp://127.0.0.1:8786", 2, body))
    assert handed == [(0, [(5, W), (7, W)])]


# -- TLS: the job's credentials from the dask configuration, as the ranks have them ------------


def _tls_config(security: Any) -> dict[str, str]:
    return {
        "distributed.comm.tls.ca-file": security.tls_ca_file,
        "distributed.comm.tls.client.cert": security.tls_client_cert,
        "distributed.comm.tls.client.key": security.tls_client_key,
    }


@pytest.fixture
def job_tls() -> Any:
    """A temporary CA and certificate, in memory, as the job's TLS configuration."""
    pytest.importorskip("cryptography")
    from distributed import Security

    job = Security.temporary()
    with dask.config.set(_tls_config(job)):
        yield job


def _client_context(tmp_path: Path, security: Any) -> ssl.SSLContext:
    """An attacker's client, which checks nothing of the server; with ``security``'s
    certificate, if any."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if security is not None:
        cert, key = tmp_path / "foreign.pem", tmp_path / "foreign.key"
        cert.write_text(security.tls_client_cert)
        key.write_text(security.tls_client_key)
        context.load_cert_chain(cert, key)
    return context


async def _refused(address: str, context: ssl.SSLContext, token: str) -> bytes | str:
    """What a client that knows the token gets from the listener: the error that closed it,
    or what it read (a listener that took its notice would keep reading: a timeout)."""
    host, port = address[len("tls://") :].rsplit(":", 1)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=context), WAIT
        )
        writer.write(line(token=token))  # in TLS 1.3 the client's handshake may complete
        got = await asyncio.wait_for(reader.read(), WAIT)
        writer.close()
        return got
    except (ssl.SSLError, ConnectionError) as exc:
        return type(exc).__name__


def test_tls_listener_takes_notices_from_the_jobs_certificate_only(
    job_tls: Any, tmp_path: Path
) -> None:
    from distributed import Security

    foreign = Security.temporary()  # a certificate that no CA of the job signed

    async def body(listener: NoticeListener, early: EarlyRegistration, address: str) -> None:
        assert address.startswith("tls://127.0.0.1:")
        for security in (None, foreign):
            outcome = await _refused(address, _client_context(tmp_path, security), listener.token)
            assert outcome in ("SSLError", "ConnectionResetError", b""), outcome
        early.known(Entry(0, "a", 0, 0))
        early.sent(0, 0, 4, W)
        assert early.next_seq == 0  # nothing was taken from them
        # the job's certificate: in memory here, so the rank takes it from its own dask
        # configuration (files would come from rank 0, test_notices_tls_from_rank_0s_files)
        assert listener.client_files is None
        rank = Notifier(address, listener.token, 1, listener.client_files)
        await rank.notify(0, 6, W)
        await async_poll_for(lambda: early.next_seq == 1, WAIT, period=0.01)
        await rank.close()

    handed = asyncio.run(_serving("tls://127.0.0.1:8786", 2, body))
    assert handed == [(0, [(4, W), (6, W)])]


def test_notices_tls_from_rank_0s_files(tmp_path: Path) -> None:
    """The job's credentials as files (as deisa-run writes them): rank 0 passes their paths in
    the connection and the other ranks connect with them, without distributed's Security."""
    pytest.importorskip("cryptography")
    from distributed import Security

    job = Security.temporary()
    files = {}
    for name, pem in (("ca", job.tls_ca_file), ("cert", job.tls_client_cert),
                      ("key", job.tls_client_key)):  # fmt: skip
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text(pem)
        files[name].chmod(0o600)
    config = {
        "distributed.comm.tls.ca-file": str(files["ca"]),
        "distributed.comm.tls.client.cert": str(files["cert"]),
        "distributed.comm.tls.client.key": str(files["key"]),
    }

    async def body(listener: NoticeListener, early: EarlyRegistration, address: str) -> None:
        assert listener.client_files == (str(files["ca"]), str(files["cert"]), str(files["key"]))
        early.known(Entry(0, "a", 0, 0))
        early.sent(0, 0, 4, W)
        rank = Notifier(address, listener.token, 1, listener.client_files)
        await rank.notify(0, 6, W)
        await async_poll_for(lambda: early.next_seq == 1, WAIT, period=0.01)
        await rank.close()

    with dask.config.set(config):
        handed = asyncio.run(_serving("tls://127.0.0.1:8786", 2, body))
    assert handed == [(0, [(4, W), (6, W)])]


# -- rank 0 without dask nor distributed (deisa-run's environment) -----------------------------


def test_one_rank_opens_no_listener_and_still_registers_early(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener, early, handed = _rank_0(1)
    with caplog.at_level(logging.INFO, logger="deisa.bridge.registration.notices"):
        assert asyncio.run(listener.listen("tcp://127.0.0.1:8786")) is None
    assert caplog.records == []  # nobody to hear from: nothing to say
    early.known(Entry(0, "a", 0, 0))
    early.sent(0, 0, 5, W)  # rank 0's own send, fed by its loop thread
    assert handed == [(0, [(5, W)])] and early.early == 1


def _write_job_files(directory: Path) -> tuple[str, str, str]:
    """A job's CA, certificate and key as files, as deisa-run writes them (0600)."""
    pytest.importorskip("cryptography")
    job = make_credentials(directory)
    return str(job.ca_file), str(job.cert), str(job.key)


def test_rank_0_takes_the_files_deisa_run_names_without_distributed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deisa-run's names of the job's files: the listener's context and the files it passes on
    come from them, and distributed's ``Security`` is not asked (nor, then, dask's
    configuration, here one without any certificate)."""
    files = _write_job_files(tmp_path / "tls")
    for name, path in zip(TLS_FILES_ENV, files, strict=True):
        monkeypatch.setenv(name, path)
    monkeypatch.setattr(_notices, "import_distributed", _no_distributed)
    context, passed = _notices._listen_tls()
    assert isinstance(context, ssl.SSLContext) and passed == files
    assert context.verify_mode == ssl.CERT_REQUIRED


def _no_distributed() -> None:
    raise AssertionError("distributed imported for credentials that deisa-run named")


@pytest.mark.parametrize(
    "names",
    [
        {},  # a user's own run: the dask configuration alone
        {"DEISA_TLS_CA_FILE": "/nowhere/ca.pem", "DEISA_TLS_CERT": "/nowhere/cert.pem"},
        {"DEISA_TLS_KEY": "{key}"},  # no CA nor certificate
    ],
    ids=["unset", "no-such-files", "key-only"],
)
def test_without_deisa_runs_files_rank_0_takes_the_dask_configurations(
    names: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _write_job_files(tmp_path / "tls")
    for name, value in names.items():
        monkeypatch.setenv(name, value.format(key=files[2]))
    config = {
        "distributed.comm.tls.ca-file": files[0],
        "distributed.comm.tls.client.cert": files[1],
        "distributed.comm.tls.client.key": files[2],
    }
    with dask.config.set(config):
        context, passed = _notices._listen_tls()
    assert isinstance(context, ssl.SSLContext) and passed == files  # through Security
    with dask.config.set({"distributed.comm.tls.client.cert": None}):
        assert _notices._listen_tls() == (None, None)  # no client certificate: no listener


# Rank 0's listener in a fresh interpreter, as deisa-run starts it: a stranger (no certificate)
# tries a notice, then rank 1 (the job's certificate, from rank 0's files) sends its own.
LISTENER = """
import asyncio, json, logging, ssl, sys
from deisa.bridge.registration.notices import NoticeListener, Notifier, encode_notice
from deisa.bridge.registration.registrar import EarlyRegistration
from deisa.bridge._publisher import Entry

async def stranger(address, token, wait):
    host, port = address[len("tls://"):].rsplit(":", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=context), wait
        )
        writer.write(encode_notice(token, 0, 1, 99, "w"))
        got = await asyncio.wait_for(reader.read(), wait)
        writer.close()
        return repr(got)
    except (ssl.SSLError, ConnectionError) as exc:
        return type(exc).__name__
    except asyncio.TimeoutError:
        return "kept open"

async def main(scheduler, wait):
    handed = []
    early = EarlyRegistration(2, lambda entry, sent: handed.append([entry.seq, sent]))
    early.activate()
    listener = NoticeListener(2, early.sent)
    address = await listener.listen(scheduler)
    report = {"address": address, "files": listener.client_files}
    if address is not None:
        if address.startswith("tls://"):
            report["stranger"] = await stranger(address, listener.token, wait)
        early.known(Entry(0, "a", 0, 0))
        early.sent(0, 0, 4, "w")
        rank = Notifier(address, listener.token, 1, listener.client_files)
        await rank.notify(0, 6, "w")
        for _ in range(int(wait * 100)):
            if handed:
                break
            await asyncio.sleep(0.01)
        await rank.close()
        await listener.close()
    report["handed"] = handed
    report["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed"))
    print(json.dumps(report))

logging.basicConfig(level=logging.INFO)
asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""


@pytest.mark.parametrize(
    "case", ["tcp", "tls-deisa-run", "tls-dask-env", "tls-config-file", "tls-none"]
)
def test_rank_0s_listener_without_dask_takes_the_jobs_notices_only(
    case: str, tmp_path: Path
) -> None:
    """tcp://, and tls:// in deisa-run's environment (deisa's names of the job's files beside
    Dask's variables): neither dask nor distributed imported. The job's files in Dask's
    variables alone, or in a dask configuration file (a user's own run): distributed's
    ``Security`` reads them. No credentials at all: no listener, the same line."""
    env = {
        name: v
        for name, v in test_env().items()
        if not name.startswith("DASK_") and name not in TLS_FILES_ENV
    }
    if case.startswith("tls-") and case != "tls-none":
        pytest.importorskip("cryptography")
        job = make_credentials(tmp_path / "tls")
        files = [str(job.ca_file), str(job.cert), str(job.key)]
    if case == "tls-deisa-run":
        env.update(job.env())
        assert all(name in env for name in TLS_FILES_ENV)
    elif case == "tls-dask-env":
        env.update({k: v for k, v in job.env().items() if k not in TLS_FILES_ENV})
    elif case == "tls-config-file":
        (tmp_path / "dask").mkdir()
        tls = {"ca-file": files[0], "client": {"cert": files[1], "key": files[2]}}
        config = {"distributed": {"comm": {"tls": tls}}}
        (tmp_path / "dask" / "job.json").write_text(json.dumps(config))
        env["DASK_CONFIG"] = str(tmp_path / "dask")
    scheduler = "tcp://127.0.0.1:8786" if case == "tcp" else "tls://127.0.0.1:8786"
    proc = subprocess.run(
        [sys.executable, "-c", LISTENER, scheduler, str(WAIT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=4 * WAIT,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    if case == "tls-none":  # only the dask configuration can tell: distributed's Security
        assert report["address"] is None and "distributed" in report["loaded"]
        assert "no client certificate in the dask configuration" in proc.stderr
        return
    assert report["handed"] == [[0, [[4, "w"], [6, "w"]]]], proc.stderr
    if case == "tcp":
        assert report["address"].startswith("tcp://127.0.0.1:")
        assert report["files"] is None and report["loaded"] == []
        return
    assert report["address"].startswith("tls://127.0.0.1:")
    assert report["files"] == files  # passed on to the other ranks
    assert report["stranger"] in ("SSLError", "ConnectionResetError", "b''"), report
    if case == "tls-deisa-run":
        assert report["loaded"] == []
    else:
        assert "distributed" in report["loaded"]
