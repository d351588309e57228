"""A job's security (deisa.launcher.security): its credentials, its private files, and a local
run attacked from outside while it runs.

The attacks are made server-side: each stranger trusts the job's CA, so that a refusal can only
come from the server (:mod:`attack`), and the same probe with the job's own credentials
succeeds first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack import (
    job_security,
    listening,
    private_key_leaks,
    private_violations,
    process_tree,
    refusals,
    wildcard,
)
from conftest import STARTUP, test_env
from distributed.utils_test import poll_for
from user_code import write_user_code

from deisa._dask_internals import workers_of
from deisa.bridge.scheduler_file import read_scheduler_address
from deisa.bridge.tls_files import TLS_FILES_ENV
from deisa.launcher import cli
from deisa.launcher.dask_processes import scheduler_command, worker_command
from deisa.launcher.defaults import UsageError
from deisa.launcher.security import (
    make_credentials,
    open_log,
    output_problem,
    path_problem,
    tls_env,
)

# -- in process ------------------------------------------------------------------------------


def test_credentials_are_private_and_replaced(tmp_path: Path) -> None:
    old = make_credentials(tmp_path / "tls")
    first = old.key.read_bytes()
    new = make_credentials(tmp_path / "tls")  # a previous run's, replaced
    assert new.key.read_bytes() != first
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    for path in (new.ca_file, new.cert, new.key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in new.key.read_bytes()
    assert b"PRIVATE KEY" not in new.cert.read_bytes()
    # the environment names the files, never their contents
    env = new.env()
    assert env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"] == str(new.key)
    assert env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "True"
    assert not any("PRIVATE" in value for value in env.values())
    new.remove()
    assert not (tmp_path / "tls").exists()


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (0700), filled: a new file can be made, nothing written to it. Needs
    the right to mount (root); skipped elsewhere."""
    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")
    try:
        with open(mount / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
            while True:
                filler.write(b"\0" * 4096)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_credentials_on_a_full_disk_name_the_file_and_leave_nothing(full_disk: Path) -> None:
    """Issue 54: ``OSError: [Errno 28] No space left on device`` without the path, and an empty
    ``ca.pem`` left behind."""
    with pytest.raises(OSError) as raised:
        make_credentials(full_disk / "tls")
    assert raised.value.errno == errno.ENOSPC
    assert str(full_disk / "tls" / "ca.pem") in str(raised.value)
    assert not (full_disk / "tls").exists()


@pytest.mark.timeout(400)
def test_a_run_on_a_full_disk_fails_naming_the_file_and_leaves_no_credentials(
    full_disk: Path,
) -> None:
    out = full_disk / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "deisa.launcher", "--solver", "python", "--ranks", "2",
         "--workers", "1", "--steps", "2", "--timeout", "240", "--output", str(out)],
        env=test_env(), cwd=full_disk.parent, capture_output=True, text=True, timeout=360,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    failed = [line for line in proc.stderr.splitlines() if line.startswith("deisa-run: failed")]
    assert failed == [
        f"deisa-run: failed: OSError: [Errno 28] No space left on device: '{out}/tls/ca.pem'"
    ], proc.stderr
    assert not (out / "tls").exists()


def test_credentials_refuse_a_planted_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "tls").symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):
        make_credentials(tmp_path / "tls")
    assert list(target.iterdir()) == []


def test_logs_do_not_follow_links(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "scheduler.log").symlink_to(victim)
    with pytest.raises(OSError):
        open_log(tmp_path / "scheduler.log")
    assert victim.read_text() == "mine"
    with open_log(tmp_path / "worker.log") as log:
        log.write(b"x")
    assert stat.S_IMODE((tmp_path / "worker.log").stat().st_mode) == 0o600


def test_output_owned_by_others_or_open_to_them_is_refused(tmp_path: Path) -> None:
    assert output_problem(tmp_path / "new") is None
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    assert "writable by other accounts" in (output_problem(open_dir) or "")
    open_dir.chmod(0o1777)  # sticky, as /tmp: nobody replaces another's files
    assert output_problem(open_dir) is None
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 4242, 4242)
        assert "another account" in (output_problem(theirs) or "")
        for command in (["--solver", "python"], ["slurm", "--solver", "python"]):
            argv = [*command[:-2], "--output", str(theirs), *command[-2:]]
            assert cli.main(argv) == 2
    open_dir.chmod(0o777)
    assert cli.main(["--solver", "python", "--output", str(open_dir)]) == 2


def test_every_existing_parent_of_output_and_workdir_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output DIR/out`` under a DIR that another account may change (its own, or open
    to all without the sticky bit) is refused, naming DIR: whoever may write DIR could rename
    ``out`` and put their own in its place. ``--workdir`` alike (the job runs there)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    deep = shared / "a" / "b" / "out"
    assert f"{shared} is writable by other accounts" in (output_problem(deep) or "")
    assert f"{shared} is writable" in (path_problem(shared / "work") or "")
    runs = [
        (["--solver", "python", "--output", str(deep)], "--output"),
        (["slurm", "--solver", "python", "--output", str(deep)], "--output"),
        (["slurm", "--solver", "python", "--output", str(tmp_path / "o"),
          "--workdir", str(shared / "work")], "--workdir"),
    ]  # fmt: skip
    for argv, option in runs:
        capsys.readouterr()
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert option in err and str(shared) in err, err
    assert not (shared / "a").exists() and not (tmp_path / "o").exists()
    shared.chmod(0o1777)  # sticky, as /tmp: nobody renames another's entries
    assert output_problem(deep) is None and path_problem(shared / "work") is None
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 4242, 4242)
        assert f"{theirs} belongs to another account" in (output_problem(theirs / "out") or "")
        assert cli.main(["--solver", "python", "--output", str(theirs / "out")]) == 2


def test_dask_commands_listen_on_loopback_with_the_job_credentials(tmp_path: Path) -> None:
    credentials = make_credentials(tmp_path / "tls")
    for dashboard in (False, True):  # the HTTP server runs even without the dashboard
        cmd = scheduler_command(tmp_path / "s.json", dashboard, credentials)
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        assert cmd[cmd.index("--dashboard-address") + 1] == "127.0.0.1:0"
        assert cmd[cmd.index("--protocol") + 1] == "tls"
        assert cmd[cmd.index("--tls-key") + 1] == str(credentials.key)
    cmd = worker_command(tmp_path / "s.json", 0, 1, tmp_path, None, credentials)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--dashboard-address") + 1] == "127.0.0.1:0"
    assert cmd[cmd.index("--tls-ca-file") + 1] == str(credentials.ca_file)
    plain = scheduler_command(tmp_path / "s.json", False)
    assert "--protocol" not in plain and "--dashboard-address" in plain


def test_tls_env_names_every_role() -> None:
    env = tls_env("ca", "cert", "key")
    for role in ("SCHEDULER", "WORKER", "CLIENT"):
        assert env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__CERT"] == "cert"
        assert env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__KEY"] == "key"


def test_tls_env_names_the_same_files_under_deisas_names(tmp_path: Path) -> None:
    """What rank 0's notices listener reads (deisa.bridge.tls_files) are the files that Dask's
    variables name, in deisa-run's local environment and in the Slurm job's exports."""
    job = make_credentials(tmp_path / "tls")
    env = job.env()
    tls = "DASK_DISTRIBUTED__COMM__TLS__"
    ca, cert, key = (env[name] for name in TLS_FILES_ENV)
    assert (ca, cert, key) == (str(job.ca_file), str(job.cert), str(job.key))
    assert ca == env[f"{tls}CA_FILE"]
    assert cert == env[f"{tls}CLIENT__CERT"] and key == env[f"{tls}CLIENT__KEY"]
    assert TLS_FILES_ENV == ("DEISA_TLS_CA_FILE", "DEISA_TLS_CERT", "DEISA_TLS_KEY")


# -- a local run, attacked while it runs -------------------------------------------------------


@pytest.mark.timeout(600)
def test_local_run_refuses_strangers_and_keeps_its_files_private(tmp_path: Path) -> None:
    """Scheduler and worker of a running ``deisa-run`` refuse a plain client, a TLS client
    without a certificate and one with a foreign certificate; the run listens on loopback
    only, still analyses every step, and leaves no file others may read and no key."""
    simulation, analytics = write_user_code(tmp_path / "code")
    out, gate, steps = tmp_path / "out", tmp_path / "gate", 3
    proc = subprocess.Popen(
        [sys.executable, "-m", "deisa.launcher", "--ranks", "2", "--workers", "2",
         "--timeout", "240", "--output", str(out),
         "--analytics", f"{analytics} {steps} 2 gate={gate}",
         "--", str(simulation), str(steps), "-1", "1"],
        env=test_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        from distributed import Client

        address = read_scheduler_address(out / "scheduler.json", wait=STARTUP)
        assert address.startswith("tls://127.0.0.1:")
        tls = out / "tls"
        with Client(address, security=job_security(tls), timeout=STARTUP) as client:
            client.wait_for_workers(2, timeout=STARTUP)
            worker = next(iter(workers_of(client)))
        for server in (address, worker):
            refused = refusals(server, tls)
            assert set(refused) == {"plain", "no certificate", "foreign certificate"}

        # Dask processes and ranks; not Open MPI's mpirun, whose PMIx tool listener binds
        # every interface whatever its MCA parameters (docs/security.md)
        def ours() -> list[tuple[int, str, str, int]]:
            return [s for s in listening(process_tree(proc.pid)) if "mpirun" not in s[1]]

        # the ranks may still be starting: wait until rank 0 has opened its notices listener
        sockets = ours()

        def rank0_listens() -> bool:
            sockets[:] = ours()
            return any("my_simulation" in s[1] for s in sockets)

        def no_listener() -> None:
            raise AssertionError(f"rank 0 opened no listener: {sockets}")

        poll_for(rank0_listens, STARTUP, no_listener, period=0.5)
        assert len(sockets) >= 5, sockets  # scheduler, workers, their HTTP servers, rank 0
        assert wildcard(sockets) == [], sockets
    finally:
        gate.touch()  # the analytics reads every step, the run ends
        stdout, stderr = proc.communicate(timeout=2 * STARTUP)
    assert proc.returncode == 0, stderr + stdout
    assert "my analytics: every step is right" in stdout
    assert "TLS handshake failed" in (out / "logs" / "scheduler.log").read_text()
    assert not tls.exists()  # removed with the run
    assert private_violations(out) == []
    assert private_key_leaks(out.rglob("*")) == []
    assert "PRIVATE KEY" not in stdout + stderr
    assert "insecure" not in stderr
    # the dashboard: off, every account of the node could read it; one line says how to turn it on
    assert re.search(r"Dashboard: off \(.*\); --dashboard .* turns it on", stderr)


@pytest.mark.timeout(400)
def test_insecure_says_so_once_and_speaks_plain_tcp(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "deisa.launcher", "--insecure", "--solver", "python",
         "--ranks", "2", "--workers", "1", "--steps", "2", "--output-period", "5",
         "--timeout", "240", "--output", str(out)],
        env=test_env(), cwd=tmp_path, capture_output=True, text=True, timeout=360,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "--insecure" in line]
    assert len(warnings) == 1 and "warning" in warnings[0], proc.stderr
    assert "tcp://127.0.0.1:" in (out / "logs" / "scheduler.log").read_text()
    assert not (out / "tls").exists()
