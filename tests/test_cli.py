"""``deisa-run``: a whole local run, its report, and teardown on success, failure and signals.

Each run is a real ``python -m deisa.cli`` subprocess; a process is "left behind" if any
process still running mentions the test's temporary directory (the scheduler file, worker
scratch space and simulation config all live there) on its command line.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import REPO, test_env, write_config

from deisa import cli

LONG = ["--workers", "1", "--size", "64", "64", "--steps", "100000", "-o"]
SMALL = ["--size", "64", "64", "--steps", "4", "--output-period", "2", "--n-components", "3"]


def deisa_run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deisa.cli", *args],
        env=test_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def left_behind(marker: Path, grace: float = 3.0) -> list[str]:
    """Command lines of live processes mentioning ``marker``, after up to ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                cmdline = " ".join(proc.info["cmdline"] or [])
                if str(marker) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(f"{proc.info['pid']}: {cmdline}")
            except psutil.Error:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def check_report(out: Path, stdout: str, steps: int, n_components: int) -> None:
    assert "analytics s" in stdout and "total" in stdout, stdout
    for step in range(steps):
        assert any(line.split()[:1] == [str(step)] for line in stdout.splitlines()), stdout
    assert (out / "explained_variance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((out / "results.json").read_text())
    assert [s["step"] for s in results["steps"]] == list(range(steps))
    for s in results["steps"]:
        ratio = s["explained_variance_ratio"]
        assert len(ratio) == n_components
        assert all(0.0 <= r <= 1.0 for r in ratio) and sum(ratio) <= 1.0 + 1e-9
    assert [row["step"] for row in results["table"]] == list(range(steps))


# -- whole runs -----------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_run_small_python_completes_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = deisa_run("--solver", "python", "--ranks", "2", "--workers", "1", *SMALL, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    check_report(out, proc.stdout, steps=4, n_components=3)
    table = json.loads((out / "results.json").read_text())["table"]
    assert all(row["nbytes"] == 64 * 64 * 8 for row in table)  # both ranks' timings
    assert all(row["compute_s"] > 0 and row["bandwidth_Bps"] > 0 for row in table)
    assert "Dashboard:" in proc.stderr
    assert "in situ PCA" in proc.stderr  # the progress bar
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(300)
def test_run_with_defaults_completes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = deisa_run("-o", str(out))
    assert proc.returncode == 0, proc.stderr
    check_report(out, proc.stdout, steps=10, n_components=4)
    settings = json.loads((out / "results.json").read_text())["settings"]
    assert settings["ranks"] == 4 and settings["workers"] == 2
    assert settings["simulation"]["global_size"] == [256, 256]
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(300)
def test_run_c_solver_through_pdi(built: Path, tmp_path: Path) -> None:
    problem = cli.c_solver_problem(built, REPO / "configs" / "heat_deisa.yml")
    if problem:
        pytest.skip(problem)
    out = tmp_path / "out"
    proc = deisa_run("--solver", "c", "--ranks", "2", "--workers", "1", *SMALL, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "c solver" in proc.stderr
    check_report(out, proc.stdout, steps=4, n_components=3)
    pdi = yaml.safe_load((out / "pdi.yml").read_text())
    assert pdi["plugins"]["deisa"]["scheduler_file"] == str(out / "scheduler.json")
    assert left_behind(tmp_path) == []


# -- failures -------------------------------------------------------------------------------------


@pytest.mark.timeout(200)
def test_bad_simulation_config_fails_with_reason_and_cleans_up(tmp_path: Path) -> None:
    config = write_config(tmp_path / "bad.yml", global_size=[32, 32], bogus=1)
    out = tmp_path / "out"
    proc = deisa_run(
        "--solver", "python", "--config", str(config), "--workers", "1", "-o", str(out)
    )
    assert proc.returncode == 1, proc.stderr
    assert "deisa-run: failed: simulation failed" in proc.stderr
    assert "unknown key(s) ['bogus']" in proc.stderr
    assert left_behind(tmp_path) == []


def test_inconsistent_options_are_a_usage_error(tmp_path: Path) -> None:
    proc = deisa_run("--ranks", "4", "--process-grid", "3", "1", "-o", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "--process-grid 3 1 has 3 ranks, --ranks is 4" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(200)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_stops_everything(tmp_path: Path, signum: signal.Signals) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "deisa.cli", "--solver", "python", "--ranks", "2", *LONG, str(out)],
        env=test_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        results_so_far = out / "logs" / "simulation.log"
        while not (results_so_far.exists() and results_so_far.stat().st_size > 0):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the simulation never started"
            time.sleep(0.2)
        time.sleep(2)  # mid-run: steps are flowing
        assert proc.poll() is None
        spawned = [p for p in psutil.Process(proc.pid).children(recursive=True)]
        assert len(spawned) >= 4  # scheduler, worker, mpirun, ranks
        proc.send_signal(signum)
        try:
            _, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
            pytest.fail(f"deisa-run did not exit within 60 s of {signum.name}:\n{stderr}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, stderr
    assert f"interrupted by {signum.name}" in stderr
    assert not [p for p in spawned if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left_behind(tmp_path) == []


# -- settings -------------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    return cli._run_parser().parse_args(list(argv))


def test_squarest_grid() -> None:
    assert [cli.squarest_grid(n) for n in (1, 2, 4, 6, 7, 12)] == [
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 2),
        (7, 1),
        (4, 3),
    ]


def test_defaults_come_from_the_yaml_file() -> None:
    settings = cli.resolve_settings(parse("--solver", "python"))
    run = yaml.safe_load(cli.DEFAULTS_FILE.read_text())["run"]
    assert settings.ranks == run["ranks"] and settings.workers == run["workers"]
    assert settings.simulation["global_size"] == run["global_size"]
    assert settings.simulation["steps"] == run["steps"]
    assert settings.process_grid == (2, 2)


def test_options_override_the_config_file(tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim.yml", global_size=[48, 40], process_grid=[3, 1])
    settings = cli.resolve_settings(parse("--solver", "python", "--config", str(config)))
    assert settings.ranks == 3 and settings.simulation["global_size"] == [48, 40]
    settings = cli.resolve_settings(
        parse("--solver", "python", "--config", str(config), "--ranks", "2", "--steps", "7")
    )
    assert settings.ranks == 2 and settings.simulation["process_grid"] == [2, 1]
    assert settings.simulation["steps"] == 7


def test_user_defaults_file_is_checked(tmp_path: Path) -> None:
    user = tmp_path / "defaults.yml"
    user.write_text("run: {workers: 3}\n")
    assert cli.resolve_settings(parse("--solver", "python", "--defaults", str(user))).workers == 3
    user.write_text("run: {wokers: 3}\n")
    with pytest.raises(cli.UsageError, match="unknown key"):
        cli.load_defaults(user)


def test_c_solver_falls_back_to_python_when_not_built(tmp_path: Path) -> None:
    settings = cli.resolve_settings(parse("--build-dir", str(tmp_path)))
    assert settings.solver == "python"
    assert "not built" in settings.solver_reason
    with pytest.raises(cli.UsageError, match="--solver c: C solver not built"):
        cli.resolve_settings(parse("--solver", "c", "--build-dir", str(tmp_path)))


def test_c_solver_must_publish_the_analysed_array(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "c_solver_problem", lambda build_dir, pdi_config: None)
    assert cli.resolve_settings(parse("--solver", "c")).solver == "c"
    with pytest.raises(cli.UsageError, match="--array temp: the C solver publishes gtemp"):
        cli.resolve_settings(parse("--solver", "c", "--array", "temp"))


def test_unknown_solver_in_a_defaults_file(tmp_path: Path) -> None:
    user = tmp_path / "defaults.yml"
    user.write_text("run: {solver: fortran}\n")
    with pytest.raises(cli.UsageError, match="--solver 'fortran': one of auto, c, python"):
        cli.resolve_settings(parse("--defaults", str(user)))


@pytest.mark.parametrize(
    ("value", "expected"), [("3", 3), (3, 3), ("none", None), ("0", None), (0, None), (None, None)]
)
def test_buffer_nb(value: int | str | None, expected: int | None) -> None:
    assert cli.parse_buffer_nb(value) == expected


@pytest.mark.parametrize("value", ["two", "-1", -1])
def test_bad_buffer_nb(value: int | str) -> None:
    with pytest.raises(cli.UsageError, match="--buffer-nb"):
        cli.parse_buffer_nb(value)


# -- waiting at start-up --------------------------------------------------------------------------


def test_wait_until_returns_once_ready(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    polls = []

    def ready() -> bool:
        polls.append(1)
        if len(polls) == 3:
            marker.touch()
        return marker.exists()

    cli._wait_until(ready, "the marker", cli.ProcessSet(tmp_path, {}), timeout=10, interval=0.01)
    assert len(polls) == 3


def test_wait_until_names_what_it_awaited_on_timeout(tmp_path: Path) -> None:
    procs = cli.ProcessSet(tmp_path, {})
    with pytest.raises(
        cli.PipelineError, match=r"timed out after 0 s \(--timeout\) waiting for the marker"
    ):
        cli._wait_until(lambda: False, "the marker", procs, timeout=0.2, interval=0.01)


def test_wait_until_stops_when_a_process_exits(tmp_path: Path) -> None:
    procs = cli.ProcessSet(tmp_path, cli.child_env())
    try:
        procs.start("scheduler", ["sh", "-c", "echo 'ValueError: no port'; exit 3"])
        with pytest.raises(cli.PipelineError) as failure:
            cli._wait_until(lambda: False, "the marker", procs, timeout=30)
    finally:
        procs.stop()
    message = str(failure.value)
    assert message.startswith("scheduler exited (3) at start-up, while waiting for the marker:")
    assert "ValueError: no port" in message


def test_analytics_options_fall_back_to_the_launch_defaults(tmp_path: Path) -> None:
    parse = cli._analytics_parser().parse_args
    args = cli.resolve_analytics_args(parse(["--scheduler-file", "s.json"]))
    assert (args.array, args.n_components, args.output, args.timeout) == (
        "gtemp",
        4,
        "deisa-output",
        300,
    )
    mine = tmp_path / "mine.yml"
    mine.write_text("run: {array: temp, n_components: 2}\nslurm: {timeout: 30}\n")
    args = parse(["--scheduler-file", "s.json", "--defaults", str(mine), "--n-components", "3"])
    cli.resolve_analytics_args(args)
    assert (args.array, args.n_components, args.timeout) == ("temp", 3, 30)
    bad = tmp_path / "bad.yml"
    bad.write_text("run: {arrays: temp}\n")
    assert cli.analytics_main(["--scheduler-file", "s.json", "--defaults", str(bad)]) == 2
