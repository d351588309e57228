"""deisa-run with the user's own code: ``deisa-run [options] [--analytics CMD] -- SIMULATION``.

Real processes: a Python mpi4py simulation and an analytics script written to ``tmp_path``
(outside the repository), each finding the scheduler through ``DEISA_SCHEDULER_FILE``; the C
solver through PDI with a YAML that has no ``scheduler_file``; the failure of either part.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import (
    REPO,
    STARTUP,
    deisa_run,
    kill_if_running,
    left_behind,
    start_deisa_run,
    test_env,
    uses_mpi,
)
from user_code import write_user_code


@pytest.fixture
def user_code(tmp_path: Path) -> tuple[Path, Path]:
    """The simulation and the analytics, in ``tmp_path/code``."""
    return write_user_code(tmp_path / "code")


COMMON = ["--ranks", "2", "--workers", "1", "--timeout", "240"]
RUN_S = 400  # deisa-run's own limit: a whole run on a loaded machine


def run_user_code(
    user_code: tuple[Path, Path], out: Path, analytics: str, *simulation: str
) -> subprocess.CompletedProcess[str]:
    """deisa-run of the user's simulation and analytics, with these arguments, into ``out``."""
    simulation_path, analytics_path = user_code
    return deisa_run(
        *COMMON, "-o", str(out), "--analytics", f"{analytics_path} {analytics}",
        "--", str(simulation_path), *simulation, timeout=RUN_S,
    )  # fmt: skip


@pytest.mark.timeout(500)
def test_user_simulation_and_analytics(user_code: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_user_code(user_code, out, "3 2", "3", "-1", "2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # the analytics' output reaches the terminal, and its log
    assert "my analytics: every step is right" in proc.stdout
    assert "my analytics: every step is right" in (out / "logs" / "analytics.log").read_text()
    assert "published 3 steps" in (out / "logs" / "simulation.log").read_text()
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("deisa-run: done in ")
    assert "field: 3 steps published, 3 taken, 1,152 bytes" in summary  # 3 x 8 x 6 float64
    # and how long flow control held the simulation, as its Bridge counted it
    held = r"publish held by flow control \d+\.\d\d s of \d+\.\d\d s \(\d+\.\d %\)"
    assert re.search(held, summary), summary
    # and how the ranks sent their blocks: every rank shares this machine with its worker
    assert re.search(r"blocks by shared memory \(\d ranks?\)", summary), summary
    assert "by tcp" not in summary, summary
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(500)
def test_failing_simulation_is_named(user_code: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_user_code(user_code, out, "3 2", "5", "1", "2")
    assert proc.returncode == 1, proc.stderr
    assert "deisa-run: failed: simulation failed (exit status" in proc.stderr, proc.stderr
    assert "my simulation: giving up at step 1" in proc.stderr  # the tail of its log
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(500)
def test_failing_analytics_stops_the_simulation(
    user_code: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    # 100000 steps, at most 1 queued: the simulation waits on flow control once the analytics
    # is gone; deisa-run must stop it
    proc = run_user_code(user_code, out, "3 2 fail", "100000", "-1", "1")
    assert proc.returncode == 1, proc.stderr
    assert "deisa-run: failed: analytics failed (exit status 1)" in proc.stderr, proc.stderr
    assert "RuntimeError: my analytics: failing on purpose" in proc.stderr
    assert left_behind(tmp_path) == []


def builtin_pca(
    user_code: tuple[Path, Path], out: Path, *simulation: str, timeout: str = "240"
) -> list[str]:
    """deisa-run's arguments: the user's simulation with the built-in PCA of its array
    ``field``."""
    return [
        *COMMON, "--timeout", timeout, "--array", "field", "--n-components", "2", "-o", str(out),
        "--", str(user_code[0]), *simulation,
    ]  # fmt: skip


def run_builtin_pca(
    user_code: tuple[Path, Path], out: Path, *simulation: str, timeout: str = "240"
) -> subprocess.CompletedProcess[str]:
    """deisa-run of :func:`builtin_pca`, to its end."""
    return deisa_run(*builtin_pca(user_code, out, *simulation, timeout=timeout), timeout=RUN_S)


@pytest.mark.timeout(500)
@pytest.mark.parametrize(
    ("simulation", "reason"),
    [
        # every rank finalizes MPI and exits 0 at step 1 without closing its Bridge
        (("quit_at=1",), "analytics: the simulation exited (status 0) without closing 'field', "
                         "after publishing 1 step(s) (waiting for step 1); log "),
        # every rank exits 7 at step 1 (mpirun reports it)
        (("1",), "simulation failed (exit status"),
    ],
    ids=["exits-without-closing", "dies"],
)  # fmt: skip
def test_simulation_gone_without_closing_fails_the_run_at_once(
    user_code: tuple[Path, Path], tmp_path: Path, simulation: tuple[str, ...], reason: str
) -> None:
    """Not after a timeout (240 s here): as soon as the simulation is gone, naming it, with
    the tail of its log."""
    fail_at = simulation[0] if simulation[0].isdigit() else "-1"
    extra = [arg for arg in simulation if "=" in arg]
    proc = run_builtin_pca(user_code, tmp_path / "out", "3", fail_at, "2", *extra)
    assert proc.returncode == 1, proc.stderr
    assert f"deisa-run: failed: {reason}" in proc.stderr, proc.stderr
    assert "my simulation: " in proc.stderr  # the tail of its log
    assert "no step of" not in proc.stderr
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(500)
def test_c_solver_as_a_user_command_with_the_builtin_pca(built: Path, tmp_path: Path) -> None:
    heat = built / "simulation" / "heat"
    if not heat.exists():
        pytest.skip(f"{heat} not built")
    pdi = yaml.safe_load((REPO / "configs" / "heat_deisa.yml").read_text())
    del pdi["plugins"]["deisa"]["scheduler_file"]  # DEISA_SCHEDULER_FILE instead
    (tmp_path / "pdi.yml").write_text(yaml.safe_dump(pdi))
    sim = {"global_size": [32, 32], "process_grid": [2, 1], "steps": 3, "output_period": 2}
    (tmp_path / "sim.yml").write_text(yaml.safe_dump(sim))
    out = tmp_path / "out"
    proc = deisa_run(
        *COMMON,
        "--n-components",
        "2",
        "--build-dir",
        str(built),
        "-o",
        str(out),
        "--",
        str(heat),
        str(tmp_path / "sim.yml"),
        str(tmp_path / "pdi.yml"),
        timeout=RUN_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"the deisa PDI plugin: built in {built / 'plugin'}" in proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert [s["step"] for s in results["steps"]] == [0, 1, 2]
    assert "gtemp: 3 steps published, 3 taken" in proc.stdout
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(500)
def test_python_solver_as_a_user_command(tmp_path: Path) -> None:
    """``-- python -m deisa_simulation.heat CONFIG``: the solver takes the scheduler file from
    ``DEISA_SCHEDULER_FILE``; the built-in PCA analyses every step."""
    sim = {"global_size": [32, 32], "process_grid": [2, 1], "steps": 3, "output_period": 2}
    (tmp_path / "sim.yml").write_text(yaml.safe_dump(sim))
    out = tmp_path / "out"
    proc = deisa_run(
        *COMMON, "--n-components", "2", "-o", str(out), "--",
        sys.executable, "-m", "deisa_simulation.heat", str(tmp_path / "sim.yml"),
        "--connect-timeout", "240", timeout=RUN_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert [s["step"] for s in results["steps"]] == [0, 1, 2]
    assert "gtemp: 3 steps published, 3 taken, 24,576 bytes" in proc.stdout  # 3 x 32 x 32 x 8
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(500)
def test_a_killed_scheduler_ends_the_run_within_seconds_naming_it(
    user_code: tuple[Path, Path], tmp_path: Path
) -> None:
    """Issue 54: the scheduler SIGKILLed mid-run, under two busy loops. ``deisa-run`` printed a
    raw ``CommClosedError ... Stream is closed`` (its analytics' call), with distributed's
    traceback, or waited 121 s (its client in distributed's reconnect, its checks not
    running); now one line naming the scheduler and its address, within seconds, and nothing
    left running."""
    out = tmp_path / "out"
    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(2)]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deisa.launcher", *COMMON, "--array", "field",
             "--n-components", "2", "-o", str(out), "--", str(user_code[0]), "100000", "-1", "1"],
            env=test_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            scheduler = _part(proc.pid, "-m dask scheduler", wait=STARTUP)
            _part(proc.pid, "my_simulation", wait=STARTUP)  # the ranks run, the PCA reads
            time.sleep(5)
            scheduler.kill()
            killed = time.monotonic()
            _, stderr = proc.communicate(timeout=RUN_S)
            took = time.monotonic() - killed
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    said = "\n".join(line for line in stderr.splitlines() if "in situ PCA" not in line)
    assert proc.returncode == 1, f"exit status {proc.returncode}:\n{said[-3000:]}"
    failed = [line for line in stderr.splitlines() if line.startswith("deisa-run: failed")]
    assert len(failed) == 1, said[-3000:]
    assert re.match(
        r"deisa-run: failed: scheduler at tls://127\.0\.0\.1:\d+ failed \(killed by SIGKILL\)",
        failed[0],
    ), failed
    for raw in ("Traceback", "CommClosedError", "Stream is closed"):
        assert raw not in stderr, said[-3000:]
    assert took < STARTUP / 2, (took, said[-3000:])  # seconds: the parts stopped included
    assert left_behind(tmp_path) == []


def _part(pid: int, marker: str, wait: float) -> psutil.Process:
    """The descendant of ``pid`` whose command line names ``marker``, once it runs."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if marker in " ".join(child.cmdline()) and child.name() != "mpirun":
                    return child
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no {marker} under {pid} after {wait} s")


# last in the module: its run started with the module's first test (slow_run)
SLOW = "test_slow_simulation_is_waited_for_past_the_timeout"


@pytest.fixture(scope="module", autouse=True)
def slow_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, subprocess.Popen[str]] | None]:
    """The run of :func:`test_slow_simulation_is_waited_for_past_the_timeout` and its
    directory, started with the module's first test: its simulation sleeps past STARTUP s
    before its first step, idle, while the module's other tests run (2.5 min of a worker's
    time otherwise); its test takes what is left. ``None`` where that test does not run."""
    module = request.module
    if not any(item.name == SLOW and item.module is module for item in request.session.items):
        yield None
        return
    tmp = tmp_path_factory.mktemp("slow")
    args = builtin_pca(write_user_code(tmp / "code"), tmp / "out", "3", "-1", "2",
                       f"sleep={STARTUP + 15}", timeout=str(STARTUP))  # fmt: skip
    proc = start_deisa_run(*args)
    yield tmp, proc
    kill_if_running(proc)


@pytest.mark.timeout(500)
def test_slow_simulation_is_waited_for_past_the_timeout(
    slow_run: tuple[Path, subprocess.Popen[str]] | None,
) -> None:
    """Issue 36's 8192² run in small: the first step comes after ``--timeout`` (which bounded
    the wait for a step, and still bounds the start-up: no shorter than STARTUP here), and the
    run completes with every step, as long as the simulation runs. (The run starts with the
    module's first test: :func:`slow_run`.)"""
    assert slow_run is not None
    tmp, proc = slow_run
    uses_mpi()  # deisa-run started the simulation under mpirun
    try:
        stdout, stderr = proc.communicate(timeout=RUN_S)
    finally:
        kill_if_running(proc)
    assert proc.returncode == 0, stderr
    results = json.loads((tmp / "out" / "results.json").read_text())
    assert [s["step"] for s in results["steps"]] == [0, 1, 2]
    assert results["steps"][0]["wait_s"] > STARTUP  # it did wait that long for step 0
    assert "field: 3 steps published, 3 taken" in stdout
    assert left_behind(tmp) == []
