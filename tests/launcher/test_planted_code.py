"""Code planted by another account for a run to import, or files swapped under it: each attack
is first shown to work against a deliberately unsafe setting (the positive control), then
blocked by ``deisa-run`` by default, the run still analysing every step.

The attacker is a real process of uid 65534 (:data:`bridge.shm.test_transport.AS_NOBODY`); the
planted code writes a marker file with the uid that ran it, which must never appear under the
run. The node's shared temporary directory is one of the test's own (mode 1777, as ``/tmp``),
never the machine's ``/tmp``, where other users' Dask processes would meet the plant.

- **Dask's scratch directory** (issue 43, item 1): the attacker makes
  ``$TMPDIR/dask-scratch-space`` mode 777 first and swaps each ``scheduler-*`` directory that
  appears there for one of its own holding a ``deisa`` package; Dask puts that directory first on
  the scheduler's ``sys.path``, so the scheduler imports it when the Bridge installs deisa's
  extension.
- **The working directory on sys.path** (item 6): a ``dask/`` package in a world-writable
  current directory, which ``python -m`` without ``-P`` imports.
- **A parent of --output open to others** (item 2): the attacker renames the run's directory
  and puts its own in its place.
- **The dashboard** (item 7): its ``/info`` pages, read by the attacker through loopback.
- **A library planted in an open --build-dir**: the ADIOS2 memory selection guard, which
  deisa-run preloads into the simulation.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from attack import job_security
from bridge.shm.test_transport import AS_NOBODY, FOREIGN_PYTHON, as_root
from conftest import STARTUP, test_env
from distributed.utils_test import poll_for
from test_slurm import Slurm, check_results, run_job, slurm  # noqa: F401 - a fixture
from user_code import write_user_code

from deisa.bridge.scheduler_file import read_scheduler_address
from deisa.launcher.dask_processes import LOOPBACK, http_env

pytestmark = as_root

PLANTED = """\
import os
with open({marker!r}, "w") as out:
    out.write(str(os.getuid()))
"""
"""What the attacker's module does when imported: write the uid that imported it."""

SWAPPER = """
import os, sys, time
space = os.path.join({shared!r}, "dask-scratch-space")
os.mkdir(space)
os.chmod(space, 0o777)
print("planted", flush=True)
seen = set()
while True:
    for name in os.listdir(space):
        path = os.path.join(space, name)
        if not name.startswith("scheduler-") or "." in name or name in seen:
            continue
        seen.add(name)
        try:
            os.rename(path, path + ".moved")  # the directory is 777: anybody renames
            os.mkdir(path, 0o755)
            os.mkdir(os.path.join(path, "deisa"), 0o755)
            with open(os.path.join(path, "deisa", "__init__.py"), "w") as out:
                out.write({planted!r})
        except OSError as exc:
            print("failed", name, exc, flush=True)
            continue
        print("swapped", name, flush=True)
    time.sleep(0.01)
"""
"""The attacker of Dask's scratch directory (item 1), as uid 65534: it prints ``planted``, then
``swapped NAME`` for each ``scheduler-*`` directory it replaced."""


@pytest.fixture
def shared() -> Iterator[Path]:
    """The node's shared temporary directory: mode 1777, as ``/tmp``."""
    path = Path(tempfile.mkdtemp(prefix="deisa-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_nobody(script: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    """``script`` started by a Python of uid 65534, its output a pipe."""
    assert FOREIGN_PYTHON is not None
    return subprocess.Popen(
        [FOREIGN_PYTHON, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE, text=True, cwd=cwd, **AS_NOBODY,
    )  # fmt: skip


def swapper(shared: Path, marker: Path) -> subprocess.Popen[str]:
    """The item 1 attacker, once its ``dask-scratch-space`` is there."""
    planted = PLANTED.format(marker=str(marker))
    proc = as_nobody(SWAPPER.format(shared=str(shared), planted=planted))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "planted"
    return proc


def plant_package(directory: Path, name: str, marker: Path) -> None:
    """A package ``name`` in ``directory`` (world-writable), made by uid 65534."""
    script = f"""
        import os
        os.mkdir({str(directory / name)!r}, 0o755)
        with open({str(directory / name / "__init__.py")!r}, "w") as out:
            out.write({PLANTED.format(marker=str(marker))!r})
    """
    proc = as_nobody(script)
    assert proc.wait(timeout=STARTUP) == 0


def stop(proc: subprocess.Popen[Any]) -> str:
    """Kill ``proc``; what it printed."""
    proc.kill()
    out, _ = proc.communicate(timeout=STARTUP)
    return str(out or "")


def old_scheduler(scheduler_file: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """``dask scheduler`` as deisa-run started it before issue 43: ``python`` without ``-P``,
    Dask's scratch in the node's ``$TMPDIR``, the dashboard's pages served."""
    cmd = [sys.executable, "-m", "dask", "scheduler", "--host", LOOPBACK, "--port", "0",
           "--scheduler-file", str(scheduler_file),
           "--dashboard-address", f"{LOOPBACK}:0"]  # fmt: skip
    return subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
    )


def http_get(url: str) -> str:
    """What uid 65534 gets from ``url``: ``"<status>"``, or the error."""
    script = f"""
        import urllib.request, urllib.error
        try:
            print(urllib.request.urlopen({url!r}, timeout=60).status)
        except urllib.error.HTTPError as exc:
            print(exc.code)
    """
    proc = as_nobody(script)
    out, _ = proc.communicate(timeout=STARTUP)
    return str(out).strip()


# -- the positive controls: each attack works where the setting is unsafe ---------------------


@pytest.mark.timeout(300)
def test_positive_control_an_old_scheduler_imports_the_planted_scratch(
    shared: Path, tmp_path: Path
) -> None:
    """A scheduler with Dask's scratch in a shared TMPDIR imports another account's module as
    soon as a Bridge installs deisa's extension; without ``-P`` it imports a ``dask/`` from
    its working directory; its ``/info`` pages answer any account."""
    from distributed import Client

    from deisa.scheduler import StreamExtension

    marker = shared / "marker-scratch"
    attacker = swapper(shared, marker)
    env = {**test_env(), "TMPDIR": str(shared)}
    scheduler = old_scheduler(tmp_path / "s.json", env, tmp_path)
    try:
        assert attacker.stdout is not None
        assert attacker.stdout.readline().startswith("swapped scheduler-")
        with Client(scheduler_file=str(tmp_path / "s.json"), timeout=STARTUP) as client:
            with contextlib.suppress(Exception):  # the planted deisa has no .scheduler
                client.register_plugin(StreamExtension())
            port = client.scheduler_info()["services"]["dashboard"]
            info = f"http://{LOOPBACK}:{port}/info/main/workers.html"
            assert http_get(info) == "200"  # another account reads the scheduler's pages
    finally:
        scheduler.kill()
        scheduler.wait()
        stop(attacker)
    assert marker.read_text() == "0"  # imported, and run, as root

    cwd_marker = shared / "marker-cwd"
    open_dir = shared / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    plant_package(open_dir, "dask", cwd_marker)
    subprocess.run([sys.executable, "-m", "dask", "--help"], cwd=open_dir, env=test_env(),
                   capture_output=True, timeout=STARTUP)  # fmt: skip
    assert cwd_marker.read_text() == "0"
    cwd_marker.unlink()
    subprocess.run([sys.executable, "-P", "-m", "dask", "--help"], cwd=open_dir, env=test_env(),
                   capture_output=True, timeout=STARTUP)  # fmt: skip
    assert not cwd_marker.exists()  # -P: what deisa-run gives every Python it starts


def test_positive_control_an_open_parent_lets_another_account_swap_the_output(
    shared: Path,
) -> None:
    """Under a parent open to every account, another account renames the run's directory and
    puts its own in its place; deisa-run refuses that parent (exit 2, naming it) and starts
    nothing."""
    parent = shared / "project"
    parent.mkdir()
    parent.chmod(0o777)
    out = parent / "out"
    out.mkdir(mode=0o700)  # a previous run's, the user's own
    script = f"""
        import os
        os.rename({str(out)!r}, {str(parent / "gone")!r})
        os.mkdir({str(out)!r}, 0o777)
        open({str(out / "scheduler.json")!r}, "w").write("{{}}")
    """
    assert as_nobody(script).wait(timeout=STARTUP) == 0
    assert out.stat().st_uid == 65534  # the attack worked: the run's directory is theirs
    shutil.rmtree(out)
    done = subprocess.run(
        [sys.executable, "-P", "-m", "deisa.launcher", "--solver", "python", "--output",
         str(out)],
        env=test_env(), cwd=shared, capture_output=True, text=True, timeout=STARTUP,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{parent} is writable by other accounts" in done.stderr
    assert not out.exists()


PLANTED_LIBRARY = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    FILE *out = fopen(MARKER, "w");
    if (out) { fprintf(out, "%d", (int)getuid()); fclose(out); }
}
"""
"""The attacker's library: loaded, it writes the uid that loaded it to ``MARKER``."""


def planted_build(build: Path, marker: Path) -> Path:
    """A world-writable ``build`` where uid 65534 planted its own
    ``plugin/adios2/libdeisa_adios2_guard.so`` (and an engine beside it): the guard."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler to build the attacker's library")
    source, made = build.parent / "planted.c", build.parent / "planted.so"
    source.write_text(PLANTED_LIBRARY)
    subprocess.run(["cc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(made),
                    str(source)], check=True, timeout=STARTUP)  # fmt: skip
    build.mkdir(mode=0o777)
    build.chmod(0o777)
    engine = build / "plugin" / "adios2"
    script = f"""
        import os, shutil
        os.makedirs({str(engine)!r}, 0o755)
        shutil.copy({str(made)!r}, {str(engine / "libdeisa_adios2_guard.so")!r})
        shutil.copy({str(made)!r}, {str(engine / "libdeisa_adios2_engine.so")!r})
    """
    assert as_nobody(script).wait(timeout=STARTUP) == 0
    return engine / "libdeisa_adios2_guard.so"


def test_positive_control_a_library_planted_in_an_open_build_dir_runs_as_the_user(
    shared: Path, tmp_path: Path
) -> None:
    """The guard that another account planted in a world-writable ``--build-dir`` runs as
    the user once preloaded, as deisa-run preloads the guard into the simulation; deisa-run
    refuses that build directory (exit 2, naming it) before it runs anything: locally (no
    mpirun, no Dask process, no output) and for Slurm (no script)."""
    marker = shared / "marker-build"
    guard = planted_build(shared / "build", marker)
    subprocess.run(["true"], env={**test_env(), "LD_PRELOAD": str(guard)}, timeout=STARTUP)
    assert marker.read_text() == "0"  # run as root
    marker.unlink()
    simulation, analytics = write_user_code(tmp_path / "code")
    out = tmp_path / "out"
    for command in ([], ["slurm"]):
        done = subprocess.run(
            [sys.executable, "-P", "-m", "deisa.launcher", *command, "--ranks", "2",
             "--build-dir", str(shared / "build"), "--output", str(out),
             "--analytics", f"{analytics} 3 2", "--", str(simulation), "3", "-1", "1"],
            env=test_env(), cwd=tmp_path, capture_output=True, text=True, timeout=STARTUP,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert f"--build-dir: {shared / 'build'} is writable by other accounts" in done.stderr
        assert done.stdout == ""  # no job script
    assert not marker.exists() and not out.exists()


# -- blocked by default ------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_a_run_imports_nothing_planted_and_serves_no_pages(shared: Path, tmp_path: Path) -> None:
    """The attackers of the positive controls at work around a real ``deisa-run``: a 777
    ``dask-scratch-space`` in its TMPDIR swapped as it fills, ``dask/`` and ``deisa/``
    packages in its world-writable working directory. The run analyses every step, no planted
    module runs, Dask's scratch stays in the run's private directory (removed at the end), and
    the scheduler's HTTP server answers another account's ``/health`` only."""
    marker = shared / "marker"
    open_dir = shared / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    for package in ("dask", "deisa", "distributed"):
        plant_package(open_dir, package, marker)
    attacker = swapper(shared, marker)
    simulation, analytics = write_user_code(tmp_path / "code")
    out, gate, steps = tmp_path / "out", tmp_path / "gate", 3
    env = {**test_env(), "TMPDIR": str(shared)}
    run = subprocess.Popen(
        [sys.executable, "-P", "-m", "deisa.launcher", "--ranks", "2", "--workers", "2",
         "--timeout", "240", "--output", str(out),
         "--analytics", f"{analytics} {steps} 2 gate={gate}",
         "--", str(simulation), str(steps), "-1", "1"],
        env=env, cwd=open_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        from distributed import Client

        read_scheduler_address(out / "scheduler.json", wait=STARTUP)
        private = [p for p in shared.iterdir() if p.name.startswith("deisa-")]
        assert len(private) == 1 and (private[0].stat().st_mode & 0o777) == 0o700, private
        poll_for(lambda: (private[0] / "dask-scratch-space").exists(), STARTUP)
        with Client(
            scheduler_file=str(out / "scheduler.json"),
            security=job_security(out / "tls"),
            timeout=STARTUP,
        ) as client:
            client.wait_for_workers(2, timeout=STARTUP)
            port = client.scheduler_info()["services"]["dashboard"]
        assert http_get(f"http://{LOOPBACK}:{port}/health") == "200"  # the probe reaches it
        assert http_get(f"http://{LOOPBACK}:{port}/info/main/workers.html") == "404"
    finally:
        gate.touch()
        stdout, stderr = run.communicate(timeout=2 * STARTUP)
        swapped = stop(attacker)
    assert run.returncode == 0, stderr + stdout
    assert "my analytics: every step is right" in stdout
    assert "swapped" not in swapped, swapped  # no scheduler-* ever reached its directory
    assert not marker.exists()
    assert [p.name for p in shared.iterdir() if p.name.startswith("deisa-")] == []  # removed
    assert "Dashboard: off" in stderr and "--dashboard" in stderr


def test_the_health_only_routes_close_the_info_pages_of_a_real_scheduler(tmp_path: Path) -> None:
    """The environment that deisa-run gives its Dask processes without ``--dashboard``
    (:func:`~deisa.launcher.dask_processes.http_env`) leaves another account ``/health``, and
    no ``/info`` page, of a real scheduler (the positive control above reads them)."""
    from distributed import Client

    env = {**test_env(), **http_env(False)}
    scheduler = old_scheduler(tmp_path / "s.json", env, tmp_path)
    try:
        with Client(scheduler_file=str(tmp_path / "s.json"), timeout=STARTUP) as client:
            port = client.scheduler_info()["services"]["dashboard"]
        assert http_get(f"http://{LOOPBACK}:{port}/health") == "200"
        assert http_get(f"http://{LOOPBACK}:{port}/info/main/workers.html") == "404"
    finally:
        scheduler.kill()
        scheduler.wait()


@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_a_slurm_job_imports_nothing_planted_in_its_tmpdir(
    slurm: Slurm,  # noqa: F811 - the fixture of test_slurm
    shared: Path,
    tmp_path: Path,
) -> None:
    """A job submitted with a shared TMPDIR where the item 1 attacker waits: every task runs in
    a private directory of its own (deisa_private_tmp), the attacker finds no ``scheduler-*``
    directory to swap, nothing planted runs, and the job analyses every step."""
    marker = shared / "marker"
    attacker = swapper(shared, marker)
    planted = Slurm(env={**slurm.env, "TMPDIR": str(shared)}, root=slurm.root)
    try:
        job = run_job(planted, tmp_path, 3)
    finally:
        swapped = stop(attacker)
    assert job.state == "COMPLETED", job.diagnostics()
    check_results(job, steps=3)
    assert "swapped" not in swapped, swapped
    assert not marker.exists()
    left = [str(q) for p in shared.iterdir() if p.name.startswith("deisa-") for q in p.rglob("*")]
    assert [p.name for p in shared.iterdir() if p.name.startswith("deisa-")] == [], left  # removed
