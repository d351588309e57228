"""Security: local mode listens on loopback only; Dask TLS passes through the Bridge and Adapter."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, STARTUP, DaskProcesses, mpirun, test_env

from deisa import Adapter
from deisa.bridge.scheduler_file import read_scheduler_address
from deisa.launcher.local import scheduler_command, worker_command

PUBLISHER = REPO / "tests" / "publish_blocks.py"
sys.path.insert(0, str(PUBLISHER.parent))
from publish_blocks import expected  # noqa: E402


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
    tls = ["--tls-ca-file", str(cert), "--tls-cert", str(cert), "--tls-key", str(key)]
    sched_file = tmp_path / "scheduler.json"
    dask = [sys.executable, "-m", "dask"]
    env = test_env()
    procs = [
        subprocess.Popen(
            [*dask, "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", "0",
             "--no-dashboard", "--scheduler-file", str(sched_file), *tls],
            env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "s.log", "wb"),  # noqa: SIM115
        )
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + STARTUP
        while not sched_file.exists():
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the TLS scheduler did not start: {(tmp_path / 's.log').read_text()}")
            time.sleep(0.1)
        for i in range(2):
            procs.append(
                subprocess.Popen(
                    [*dask, "worker", "--scheduler-file", str(sched_file), "--nthreads", "1",
                     "--host", "127.0.0.1", "--no-nanny", "--no-dashboard", *tls],
                    env=env, stdout=subprocess.DEVNULL,
                    stderr=open(tmp_path / f"w{i}.log", "wb"),  # noqa: SIM115
                )
            )  # fmt: skip
        client_env = {
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(cert),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(cert),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(key),
        }
        yield sched_file, client_env
    finally:
        DaskProcesses(sched_file, procs).stop()


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
        workers = list(client.scheduler_info()["workers"])
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
