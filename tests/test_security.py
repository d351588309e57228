"""Security: local mode listens on loopback only; Dask TLS passes through the Bridge and Adapter;
rank 0's notices listener and the steering values run no pickle, attacked in real runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import re
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, STARTUP, DaskProcesses, kill_if_running, mpirun, test_env
from distributed.utils_test import poll_for

from deisa import Adapter
from deisa._dask_internals import workers_of
from deisa.bridge.scheduler_file import read_scheduler_address
from deisa.launcher.dask_processes import scheduler_command, worker_command
from deisa.wire import Status, SteeringError, status

PUBLISHER = REPO / "tests" / "publish_blocks.py"
sys.path.insert(0, str(PUBLISHER.parent))
from publish_blocks import expected  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "bridge" / "shm"))
from test_transport import AS_NOBODY, FOREIGN_PYTHON, as_root  # noqa: E402
from wire.test_guard import ATTACKER, CONNECTIONS  # noqa: E402


def test_local_mode_listens_on_loopback_only(tmp_path: Path) -> None:
    for dashboard in (False, True):
        cmd = scheduler_command(tmp_path / "s.json", dashboard)
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        if dashboard:
            assert cmd[cmd.index("--dashboard-address") + 1].startswith("127.0.0.1:")
    cmd = worker_command(tmp_path / "s.json", 0, 1, tmp_path)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"


@pytest.fixture
def tls_cluster(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A scheduler and a worker speaking TLS only, with a self-signed certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    # without deisa.bridge.worker: a rank 0 here calls the scheduler itself, with its own
    # credentials or none; a worker's relay would make its calls with the worker's (same
    # account only: docs/security.md), and the plain rank 0 below would get through
    cluster = DaskProcesses(
        tmp_path / "scheduler.json", log_dir=tmp_path, env=test_env(),
        credentials=_SelfSigned(cert, key), bridge_preload=False,
    )  # fmt: skip
    try:
        cluster.start_scheduler(STARTUP)
        cluster.start_workers(2)
        client_env = {
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(cert),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(cert),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(key),
        }
        yield cluster.scheduler_file, client_env
    finally:
        cluster.stop()


@dataclass(frozen=True)
class _SelfSigned:
    """A self-signed certificate that is its own CA, for ``dask scheduler`` and ``dask
    worker`` (:mod:`deisa.launcher.dask_processes`)."""

    cert: Path
    key: Path

    def cli_args(self) -> list[str]:
        return ["--protocol", "tls", "--tls-ca-file", str(self.cert), "--tls-cert",
                str(self.cert), "--tls-key", str(self.key)]  # fmt: skip


def test_tls_passes_through_bridge_and_adapter(tls_cluster: tuple[Path, dict[str, str]]) -> None:
    from distributed import Client, Security

    sched_file, client_env = tls_cluster
    address = read_scheduler_address(sched_file, wait=STARTUP)
    assert address.startswith("tls://127.0.0.1:")
    security = Security(
        tls_ca_file=client_env["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"],
        tls_client_cert=client_env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"],
        tls_client_key=client_env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"],
    )
    with Client(address, security=security, timeout=STARTUP) as client:
        client.wait_for_workers(2, timeout=STARTUP)
        workers = list(workers_of(client))
        assert all(w.startswith("tls://") for w in workers)

        # a plain client fails at once (no TLS context), so a long connect_timeout costs nothing
        base = [sys.executable, str(PUBLISHER), str(sched_file), "--connect-timeout", str(STARTUP)]
        plain = subprocess.run(
            mpirun(2, *base, "--grid", "2", "1", "--name", "plain"),
            env=test_env(), capture_output=True, text=True, timeout=2 * STARTUP,
        )  # fmt: skip
        assert plain.returncode != 0
        assert f"the Dask scheduler at {address}" in plain.stderr, plain.stderr[-3000:]

        proc = subprocess.run(
            mpirun(4, *base, "--name", "secret"),
            env={**test_env(), **client_env}, capture_output=True, text=True, timeout=2 * STARTUP,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        # the run is over and its steps are queued: nothing left to wait for
        steps = [(s, f.compute()) for s, f in Adapter(client, timeout=STARTUP)["secret"].items()]
    assert [s for s, _ in steps] == [0, 1, 2]
    for s, values in steps:
        np.testing.assert_array_equal(values, expected(s, (8, 6)))


# -- rank 0's notices listener and steering values carry no pickle ----------------------------
#
# Each attack sends code that, if it were unpickled, would create MARKER (``open(MARKER, "w")``)
# in whichever process unpickles it: rank 0, or the scheduler. The ranks below publish 4 steps
# on 2 ranks in mode="async", holding after the steps listed in ``holds`` until the test touches
# ``go-<step>``: a step published before a hold reaches the analytics only through the ranks'
# "block sent" notices (no rank calls MPI during a hold), so the analytics receiving it shows
# that rank 0's listener took the genuine notices.

ATTACKED_RANKS = """
import json, logging, os, sys, time
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge, BridgeError

scheduler_file, out, nsteps = sys.argv[1], sys.argv[2], int(sys.argv[3])
holds = [int(s) for s in sys.argv[4].split(",") if s]
rank = MPI.COMM_WORLD.Get_rank()
logging.basicConfig(filename=f"{out}/log-{rank}.txt", level=logging.WARNING)
logging.getLogger("deisa.bridge.registration.notices").setLevel(logging.DEBUG)
spec = ArraySpec("float64", global_shape=(4, 3), start=(2 * rank, 0), shape=(2, 3))
x, y = np.indices((2, 3))
report = {"rank": rank}
with Bridge(scheduler_file, {"field": spec}, mode="async", connect_timeout=STARTUP) as bridge:
    bridge.flush()  # connected: every send starts at once, with its notice
    for step in range(nsteps):
        bridge.publish("field", step * 1e6 + (2 * rank + x) * 1e3 + y, step)
        deadline = time.monotonic() + STARTUP
        while step in holds and not os.path.exists(f"{out}/go-{step}"):
            assert time.monotonic() < deadline, f"rank {rank}: go-{step} never came"
            time.sleep(0.02)
    try:
        report["param"] = repr(bridge.get("param", "unset"))
    except BridgeError as exc:
        report["error"] = str(exc)
    if rank == 0:
        report["early"] = bridge._async.early.early
with open(f"{out}/rank-{rank}.json", "w") as f:
    json.dump(report, f)
"""


class _Evil:
    """Unpickled, creates ``path`` (an attacker's code running where it is unpickled)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


def _start_attacked_ranks(
    tmp_path: Path, scheduler_file: Path, holds: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    script = tmp_path / "attacked_ranks.py"
    script.write_text(ATTACKED_RANKS.replace("STARTUP", str(STARTUP)))
    (tmp_path / "out").mkdir()
    return subprocess.Popen(
        mpirun(2, sys.executable, str(script), str(scheduler_file), str(tmp_path / "out"), "4",
               holds),
        env={**test_env(), **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def _listener_address(tmp_path: Path, proc: subprocess.Popen[str]) -> tuple[str, str, int]:
    """(protocol, host, port) of rank 0's notices listener, read from its debug log."""
    log = tmp_path / "out" / "log-0.txt"

    def address() -> re.Match[str] | None:
        text = log.read_text() if log.exists() else ""
        return re.search(r"notices at (tcp|tls)://([\d.]+):(\d+)", text)

    def none_logged() -> None:
        pytest.fail(f"rank 0 logged no listener address: {proc.communicate()[0][-3000:]}")

    def logged() -> bool:
        if address() is not None:
            return True
        if proc.poll() is not None:
            none_logged()
        return False

    poll_for(logged, STARTUP, none_logged, period=0.1)
    found = address()
    assert found is not None
    return found[1], found[2], int(found[3])


def _release_and_finish(
    tmp_path: Path, proc: subprocess.Popen[str], client: object, held: list[int]
) -> list[tuple[int, np.ndarray]]:
    """Take every step; each held step must arrive while the ranks still hold after it."""
    field = Adapter(client, timeout=STARTUP)["field"]
    steps = []
    for step, array in field.items():
        steps.append((step, array.compute()))
        if step in held:
            (tmp_path / "out" / f"go-{step}").touch()
    output, _ = proc.communicate(timeout=STARTUP)
    assert proc.returncode == 0, output[-3000:]
    return steps


def _check_steps(steps: list[tuple[int, np.ndarray]]) -> None:
    assert [s for s, _ in steps] == [0, 1, 2, 3]
    for s, values in steps:
        np.testing.assert_array_equal(values, expected(s, (4, 3)))


async def _distributed_attack(address: str, evil: _Evil) -> None:
    """What a distributed client sends: its handshake, then a ``deisa_sent`` message, each
    with a ``__Pickled__`` sub-frame (a ``distributed.core.Server`` unpickles both on read)."""
    from distributed.comm import connect
    from distributed.protocol import ToPickle

    # the handshake is sent at once; a listener that does not answer it leaves connect waiting
    # (the outcome does not matter, the bytes sent do): a deadline meant to expire
    try:
        comm = await asyncio.wait_for(
            connect(address, handshake_overrides={"evil": ToPickle(evil)}), 5
        )
        await comm.write({"op": "deisa_sent", "token": ToPickle(evil), "reply": False})
        await comm.close()
    except (OSError, asyncio.TimeoutError):
        pass


def test_notices_listener_runs_no_pickle(tmp_path: Path, dask_processes: DaskProcesses) -> None:
    marker = tmp_path / "pwned"
    evil = _Evil(marker)
    proc = _start_attacked_ranks(tmp_path, dask_processes.scheduler_file, "0,1")
    try:
        protocol, host, port = _listener_address(tmp_path, proc)
        assert (protocol, host) == ("tcp", "127.0.0.1")  # a loopback scheduler: loopback only
        asyncio.run(_distributed_attack(f"tcp://{host}:{port}", evil))
        forged = {
            "token": "0" * 32,
            "seq": 1,
            "rank": 1,
            "nbytes": 48,
            "worker": "tcp://127.0.0.1:1",
        }
        payload = pickle.dumps(evil)
        lines = [
            payload + b"\n",  # the pickle as a raw line
            json.dumps({**forged, "worker": payload.decode("latin-1")}).encode() + b"\n",
            b"x" * 100_000 + b"\n",  # over the line length
            # another token: were it taken, steps would be registered on a worker at port 1
            *(json.dumps({**forged, "seq": seq, "rank": rank}).encode() + b"\n"
              for seq in range(4) for rank in (0, 1)),
        ]  # fmt: skip
        for line in lines:  # each on its own connection: the listener closes one after a drop
            with (
                socket.create_connection((host, port), timeout=STARTUP) as sock,
                contextlib.suppress(ConnectionError),  # closed by the listener: its job
            ):
                sock.sendall(line)
        with dask_processes.client() as client:
            steps = _release_and_finish(tmp_path, proc, client, held=[0, 1])
    finally:
        kill_if_running(proc)
    _check_steps(steps)
    assert not marker.exists()
    root = json.loads((tmp_path / "out" / "rank-0.json").read_text())
    assert root["early"] >= 2  # steps 0 and 1 at least: the listener served after the attacks


def _limit_ranks(proc: subprocess.Popen[str], nofile: int) -> int:
    """Lower the soft descriptor limit of the ranks that ``proc`` (mpirun) started; how many."""
    import resource

    import psutil

    ranks = [p for p in psutil.Process(proc.pid).children(recursive=True)
             if "attacked_ranks.py" in " ".join(p.cmdline())]  # fmt: skip
    for rank in ranks:
        hard = resource.prlimit(rank.pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(rank.pid, resource.RLIMIT_NOFILE, (nofile, hard))
    return len(ranks)


@as_root
def test_a_thousand_connections_of_another_account_cost_the_run_no_step(
    tmp_path: Path, tls_cluster: tuple[Path, dict[str, str]]
) -> None:
    """uid 65534 holds 1,000 plain TCP connections to rank 0's TLS notices listener, whose
    ranks have 512 descriptors, through the run (the control, the listener unguarded, is
    tests/wire/test_guard.py's): every step arrives, nothing runs short of descriptors, and
    the refusals make a few log lines."""
    assert FOREIGN_PYTHON is not None
    sched_file, client_env = tls_cluster
    proc = _start_attacked_ranks(tmp_path, sched_file, "0,1", env=client_env)
    flooder = None
    try:
        _, host, port = _listener_address(tmp_path, proc)
        assert _limit_ranks(proc, 512) == 2
        script = ATTACKER.format(n=CONNECTIONS, host=host, port=port, timeout=4 * STARTUP)
        flooder = subprocess.Popen(
            [FOREIGN_PYTHON, "-c", script], stdout=subprocess.PIPE, text=True, **AS_NOBODY
        )
        assert flooder.stdout is not None
        held = int(flooder.stdout.readline().split()[1])
        from distributed import Client, Security

        security = Security(
            tls_ca_file=client_env["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"],
            tls_client_cert=client_env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"],
            tls_client_key=client_env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"],
        )
        with Client(read_scheduler_address(sched_file), security=security, timeout=STARTUP) as c:
            steps = _release_and_finish(tmp_path, proc, c, held=[0, 1])
    finally:
        if flooder is not None:
            flooder.kill()
            flooder.wait()
        kill_if_running(proc)
    _check_steps(steps)
    assert held == CONNECTIONS
    logs = [(tmp_path / "out" / f"log-{rank}.txt").read_text() for rank in (0, 1)]
    assert not any("Too many open files" in log for log in logs)
    refusals = [line for line in logs[0].splitlines() if "refused" in line]
    assert 1 <= len(refusals) <= 3, refusals


def _refused_by(host: str, port: int, context: ssl.SSLContext, line: bytes) -> str:
    """How the listener ends a TLS client's connection: the error, or ``"closed"``; a listener
    that took the client's line would keep reading (then ``socket.timeout``, failing the
    test)."""
    with socket.create_connection((host, port), timeout=STARTUP) as raw:
        try:
            with context.wrap_socket(raw) as sock:  # TLS 1.3: the client's side may complete
                sock.sendall(line)
                return "closed" if sock.recv(1) == b"" else "answered"
        except (ssl.SSLError, ConnectionError) as exc:
            return type(exc).__name__


def test_tls_notices_listener_refuses_clients_without_the_jobs_certificate(
    tmp_path: Path, tls_cluster: tuple[Path, dict[str, str]]
) -> None:
    sched_file, client_env = tls_cluster
    marker = tmp_path / "pwned"
    evil_line = pickle.dumps(_Evil(marker)) + b"\n"
    foreign_cert, foreign_key = tmp_path / "foreign.pem", tmp_path / "foreign.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(foreign_key), "-out", str(foreign_cert), "-subj", "/CN=localhost"],
        check=True, capture_output=True, timeout=STARTUP,
    )  # fmt: skip
    proc = _start_attacked_ranks(tmp_path, sched_file, "0,1", env=client_env)
    try:
        protocol, host, port = _listener_address(tmp_path, proc)
        assert protocol == "tls"
        with socket.create_connection((host, port), timeout=STARTUP) as sock:
            sock.sendall(evil_line)  # no TLS at all: not a handshake
        for cert in (None, foreign_cert):  # no certificate; a self-signed one
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # an attacker does not check the listener
            if cert is not None:
                context.load_cert_chain(cert, foreign_key)
            outcome = _refused_by(host, port, context, evil_line)
            assert outcome in ("SSLError", "ConnectionResetError", "closed"), (cert, outcome)
        from distributed import Client, Security

        security = Security(
            tls_ca_file=client_env["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"],
            tls_client_cert=client_env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"],
            tls_client_key=client_env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"],
        )
        with Client(read_scheduler_address(sched_file), security=security, timeout=STARTUP) as c:
            steps = _release_and_finish(tmp_path, proc, c, held=[0, 1])
    finally:
        kill_if_running(proc)
    _check_steps(steps)
    assert not marker.exists()
    root = json.loads((tmp_path / "out" / "rank-0.json").read_text())
    assert root["early"] >= 2  # the ranks' notices, over TLS with the job's certificate


def test_steering_values_run_no_pickle(tmp_path: Path, dask_processes: DaskProcesses) -> None:
    marker = tmp_path / "pwned"
    evil = _Evil(marker)
    with dask_processes.client() as client:
        adapter = Adapter(client, timeout=STARTUP)
        with pytest.raises(SteeringError, match=r"'param' is a test_security._Evil: accepted are"):
            adapter.set("param", evil)
        # what a client could send without deisa's Adapter, straight to the scheduler's route
        for payload in (
            pickle.dumps(evil),
            {"type": "ndarray", "dtype": "|O", "shape": [1], "data": pickle.dumps(evil)},
            {"type": "int", "value": pickle.dumps(evil)},
        ):
            reply = client.sync(client.scheduler.deisa_set_value, name="param", value=payload)
            assert status(reply) is Status.ERROR, reply
        assert client.sync(client.scheduler.deisa_get_value, name="param")["version"] == 0

        def plant(dask_scheduler: Any, payload: bytes) -> None:
            """A pickle in the store, as if the route had let one through."""
            from deisa.scheduler.steering import _Entry

            dask_scheduler.plugins["deisa"].steering._entries["param"] = _Entry(payload, 1)

        client.run_on_scheduler(plant, payload=pickle.dumps(evil))
        proc = _start_attacked_ranks(tmp_path, dask_processes.scheduler_file, "")
        try:
            steps = _release_and_finish(tmp_path, proc, client, held=[])
        finally:
            kill_if_running(proc)
    _check_steps(steps)
    assert not marker.exists()
    for rank in (0, 1):  # Bridge.get raised on every rank, naming the value
        report = json.loads((tmp_path / "out" / f"rank-{rank}.json").read_text())
        assert "SteeringError: steering value 'param' is not in the plain form" in report["error"]
