"""Listeners another account cannot flood (deisa.wire.guard), server-side: rank 0's notices
listener runs in a process of its own with 512 descriptors, a real process of uid 65534 opens
1,000 connections to it and holds them. The positive control, the guard switched off (no cap,
no margin, no handshake deadline), runs the listener's process out of descriptors; by default
its files still open, a rank's notice still arrives, and the refusals make at most a few log
lines. The workers' listeners (shared memory, relay), flooded the same way, log one line each
and serve the run's ranks; the control, a line per refusal as before the count."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
from unittest import mock

import numpy as np
import pytest
from bridge.shm.test_transport import AS_NOBODY, FOREIGN_PYTHON, as_root, attack
from conftest import STARTUP
from distributed.utils_test import gen_cluster

from deisa.bridge.link.relay import Relay
from deisa.bridge.shm.transport import Transport
from deisa.wire import guard as _guard
from deisa.wire.relay import relay_names
from deisa.wire.shm import socket_name
from deisa.worker.services import WorkerServices

CONNECTIONS = 1000

LISTENER = """
import asyncio, logging, os, resource, sys, time
from deisa.wire import guard as _guard
from deisa.bridge.registration.notices import NoticeListener, Notifier

resource.setrlimit(resource.RLIMIT_NOFILE, (512, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="LOG %(message)s")
if {unsafe}:  # the positive control: no cap, no margin, no deadline
    _guard.EXTRA, _guard.HANDSHAKE_S = 10**6, 1e9
    _guard.margin = lambda: 0


async def main():
    arrived = []
    listener = NoticeListener(4, lambda *notice: arrived.append(notice))
    address = await listener.listen("tcp://127.0.0.1:1")
    print(address, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    try:
        files = [os.open("/dev/null", os.O_RDONLY) for _ in range(32)]
        print("files: ok", flush=True)
        for fd in files:
            os.close(fd)
    except OSError as exc:
        print("files:", exc, flush=True)
    if {unsafe}:
        return  # the control ends here: its descriptors are gone
    start = time.monotonic()
    notifier, deadline = Notifier(address, listener.token, 1), start + {timeout}
    while not arrived and time.monotonic() < deadline:  # a rank's notice, retried
        await notifier.notify(0, 8, "tcp://w:1")
        await asyncio.sleep(0.5)
    print("notice:", "arrived" if arrived else "lost", time.monotonic() - start, flush=True)
    await notifier.close()
    await listener.close()


asyncio.run(main())
"""

ATTACKER = """
import resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
held = []
for _ in range({n}):
    sock = socket.socket()
    sock.settimeout(10)  # SYN retries at 1, 3 and 7 s, a loaded listener catches up
    try:
        sock.connect(({host!r}, {port}))
    except OSError:
        break
    held.append(sock)
print("held", len(held), flush=True)
time.sleep({timeout})
"""


def flood(unsafe: bool) -> tuple[int, str, list[str]]:
    """Connections the attacker held, what the listener's process printed, its log lines."""
    assert FOREIGN_PYTHON is not None
    listener = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(LISTENER).format(unsafe=unsafe, timeout=STARTUP)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    attacker = None
    try:
        assert listener.stdout is not None and listener.stdin is not None
        port = int(listener.stdout.readline().rpartition(":")[2])
        script = ATTACKER.format(n=CONNECTIONS, host="127.0.0.1", port=port, timeout=4 * STARTUP)
        attacker = subprocess.Popen(
            [FOREIGN_PYTHON, "-c", script], stdout=subprocess.PIPE, text=True, **AS_NOBODY
        )
        assert attacker.stdout is not None
        held = int(attacker.stdout.readline().split()[1])
        listener.stdin.write("\n")
        listener.stdin.flush()
        out, err = listener.communicate(timeout=4 * STARTUP)
    finally:
        if attacker is not None:
            attacker.kill()
            attacker.wait()
        listener.kill()
        listener.wait()
    return held, out, [line for line in err.splitlines() if "Too many open" in line or
                       line.startswith("LOG")]  # fmt: skip


@pytest.mark.integration
@as_root
def test_a_thousand_connections_of_another_account_cost_the_listener_nothing() -> None:
    held, out, lines = flood(unsafe=True)
    assert "files: [Errno 24] Too many open files" in out, (held, out)  # the control
    held, out, lines = flood(unsafe=False)
    assert held == CONNECTIONS, out
    assert "files: ok" in out and "notice: arrived" in out, out
    assert not [line for line in lines if "Too many open files" in line], lines
    assert len(lines) <= 3, lines  # the refusals, counted in one line (and one at the close)
    assert "refused" in lines[0], lines


def test_refusals_are_counted_and_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = _guard.Guard("a test listener", peers=2)
    with caplog.at_level(logging.WARNING, logger=_guard.__name__):
        for _ in range(2000):
            guard.refuse("a process of uid 65534")
        guard.flush()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # the first at once, the other 1,999 at the flush
    assert "refused 1 connection" in lines[0] and "refused 1999 connection" in lines[1]
    assert guard.total_refused == 2000 and guard.cap == 2 + _guard.EXTRA


def test_a_connection_beyond_the_cap_or_the_descriptors_is_closed() -> None:
    guard = _guard.Guard("a test listener", peers=1)
    left, right = socket.socketpair()
    try:
        assert guard.admit(left)
        guard.pending = guard.cap
        assert not guard.admit(left) and left.fileno() == -1  # closed
    finally:
        right.close()
    assert _guard.descriptors_short(10**9) and not _guard.descriptors_short(3)


UNIX_FLOOD = """
import resource, socket
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
held = []
for _ in range({n}):
    sock = socket.socket(socket.AF_UNIX, socket.{kind})  # blocking: waits for the backlog
    try:
        sock.connect({name!r})
    except OSError:
        break
    held.append(sock)
print("held", len(held))
"""


async def unix_flood(name: bytes, kind: str) -> tuple[int, list[str]]:
    """Connections uid 65534 made to ``name`` (all held until the last), the guard's lines."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger(_guard.__name__).addHandler(handler)
    try:
        script = UNIX_FLOOD.format(n=CONNECTIONS, kind=kind, name=name)
        held = int((await attack(script, **AS_NOBODY)).split()[1])
    finally:
        logging.getLogger(_guard.__name__).removeHandler(handler)
    return held, lines


@as_root
@gen_cluster(client=True, timeout=4 * STARTUP)
async def test_a_flood_of_another_account_on_the_workers_listeners_logs_a_line(c, s, a, b) -> None:
    await c.register_plugin(WorkerServices())
    # the control: a line per refusal, as before the count
    with mock.patch.object(_guard, "LOG_INTERVAL_S", 0.0):
        held, lines = await unix_flood(socket_name(a.address), "SOCK_SEQPACKET")
    assert held == CONNECTIONS and len(lines) >= CONNECTIONS, (held, len(lines))
    for name, kind in ((socket_name(a.address), "SOCK_SEQPACKET"),
                       (relay_names(s.address)[0], "SOCK_STREAM")):  # fmt: skip
        held, lines = await unix_flood(name, kind)
        assert held == CONNECTIONS and len(lines) <= 1, (kind, held, lines)
    transport = Transport()
    try:  # the run goes on: a rank's block through shared memory, rank 0's call relayed
        assert await transport.send_shared(a.address, ("k", 0), np.ones(8)) == 64
        relay = await Relay.open(s.address, STARTUP)
        assert relay is not None
        await relay.close()
    finally:
        await transport.close()
