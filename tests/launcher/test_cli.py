"""``deisa-run`` (deisa.launcher): whole local runs, checks before start, signals, sockets.

Each run is a real ``python -m deisa.launcher`` subprocess; a process is "left behind" if any
process still running mentions the test's temporary directory (the scheduler file, worker
scratch space and simulation config all live there) on its command line.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import dask.config
import psutil
import pytest
import yaml
from conftest import (
    REPO,
    STARTUP,
    deisa_run,
    left_behind,
    modules_loaded,
    test_env,
    write_config,
)
from distributed.utils_test import poll_for

from deisa.launcher import (
    checks,
    cli,
    commands,
    dask_processes,
    defaults,
    options,
    parse,
    processes,
    settings,
    slurm,
    solver,
)
from deisa.launcher.defaults import UsageError
from deisa.launcher.options import RUN
from deisa.launcher.plan import make_plan
from deisa.pca_app import report
from deisa.pca_app.pipeline import StepAnalytics

LONG = ["--workers", "1", "--size", "64", "64", "--steps", "100000", "-o"]
SMALL = ["--size", "64", "64", "--steps", "4", "--output-period", "2", "--n-components", "3"]
LOOPBACK = ("127.0.0.1", "::1")
# Open MPI 4's mpirun binds its out-of-band listener to every interface, and no MCA parameter
# restricts it (orte/mca/oob/tcp: INADDR_ANY); the ranks, which we can restrict, must not.
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun")


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
    # the workers preload deisa.worker: rank 0 finds its node's relay at its connection
    simulation_log = (out / "logs" / "simulation.log").read_text()
    assert "rank 0 calls the scheduler through the relay of worker" in simulation_log
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(300)
def test_run_with_defaults_completes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = deisa_run("-o", str(out))
    assert proc.returncode == 0, proc.stderr
    check_report(out, proc.stdout, steps=20, n_components=4)
    # the warm-up is step 0, and the steps that queued behind its PCA if any did (load)
    assert "warm-up (step" in proc.stdout and "steady state (steps " in proc.stdout
    results = json.loads((out / "results.json").read_text())
    # the phases' diagnosis rests on the hold the Bridge measured, as the closing line does
    flow = results["phases"]["flow_control"]
    assert 0 <= flow["held_s"] <= flow["open_s"]
    assert f"publish held by flow control {flow['held_s']:.2f} s" in proc.stdout
    settings = results["settings"]
    assert settings["ranks"] == 4 and settings["workers"] == 2
    assert settings["simulation"]["global_size"] == [256, 256]
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(300)
def test_run_c_solver_through_pdi(built: Path, tmp_path: Path) -> None:
    problem = solver.c_solver_problem(built, REPO / "configs" / "heat_deisa.yml")
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


# -- checked before anything starts ---------------------------------------------------------------


def _user_files(tmp_path: Path) -> dict[str, Path]:
    return {
        "sise": write_config(tmp_path / "sise.yml", global_sise=[64, 64]),
        "bogus": write_config(tmp_path / "bogus.yml", global_size=[32, 32], bogus=1),
        "steps": write_config(tmp_path / "steps.yml", steps=0),
        "placement": _write(tmp_path / "placement.yml", "run: {placement: nearest}\n"),
    }


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--size", "-1", "5"], "--size -1 5: global_size: expected two positive integers"),
        (["--config", "{sise}"], "--config {sise}: unknown key(s) ['global_sise']"),
        (["--config", "{bogus}"], "--config {bogus}: unknown key(s) ['bogus']"),
        (["--config", "{steps}"], "--config {steps}: steps: expected a positive integer, got 0"),
        (["--steps", "0"], "--steps 0: steps: expected a positive integer, got 0"),
        (["--size", "4", "4", "--ranks", "32"], "--ranks 32: process_grid: 8 ranks along axis 0"),
        (["--buffer-nb", "0"], "--buffer-nb 0: buffer_nb=0 must be a positive integer or None"),
        (["--workers", "0"], "--workers=0 must be a positive integer"),
        (["--timeout", "0"], "--timeout=0.0 must be a positive number of seconds"),
        (["--defaults", "{placement}"], "{placement}: run.placement: placement='nearest' is not"),
        (["--ranks", "4", "--process-grid", "3", "1"], "--process-grid 3 1 has 3 ranks, --ranks"),
    ],
)
def test_mistakes_are_one_line_before_anything_starts(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    files = {name: str(path) for name, path in _user_files(tmp_path).items()}
    out = tmp_path / "out"
    proc = deisa_run(*[a.format(**files) for a in argv], "-o", str(out), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr  # one line
    assert proc.stderr.startswith("deisa-run: error: ")
    assert message.format(**files) in proc.stderr
    assert "simulation.yml" not in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()  # nothing started: no logs, no scheduler file


def test_bad_choice_is_refused_by_the_parser(tmp_path: Path) -> None:
    proc = deisa_run("--placement", "nearest", "-o", str(tmp_path / "out"), timeout=120)
    assert proc.returncode == 2
    assert "argument --placement: invalid choice: 'nearest'" in proc.stderr
    assert not (tmp_path / "out").exists()


# -- signals and sockets --------------------------------------------------------------------------


def _tree(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []


def _wait_for(ready: Callable[[], bool], what: str, proc: subprocess.Popen[str], out: Path) -> None:
    """Wait for ``ready()`` while deisa-run runs, up to STARTUP (only reports a hang)."""

    def running_and_ready() -> bool:
        assert proc.poll() is None, _stderr(out)
        return ready()

    def never() -> None:
        raise AssertionError(f"never saw {what}:\n{_stderr(out)}")

    poll_for(running_and_ready, STARTUP, never, period=0.1)


def _listening(tree: list[psutil.Process]) -> list[tuple[str, str, int]]:
    """``(process name, address, port)`` of every listening TCP socket of ``tree``."""
    names = {}
    for p in tree:
        try:
            names[p.pid] = p.name()
        except psutil.Error:
            continue
    return [
        (names[c.pid], c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections("tcp")
        if c.pid in names and c.status == psutil.CONN_LISTEN
    ]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running, after giving killed ones time to go (returns as soon as
    all are gone: the timeout only bounds how long a leftover takes to be reported)."""
    _, alive = psutil.wait_procs(procs, timeout=STARTUP)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


# The progress bar once a step was analysed: "in situ PCA:   0%|   | 1/100000 [...".
ANALYSED = re.compile(r"in situ PCA: .*\| *[1-9][0-9]*/[0-9]+ ")


def _start_long_run(out: Path) -> subprocess.Popen[str]:
    """Start a long deisa-run; its stderr goes to a file beside ``out``, read while it runs."""
    argv = [sys.executable, "-m", "deisa.launcher", "--solver", "python", "-n", "2", *LONG]
    with (out.parent / "deisa-run.stderr").open("w") as stderr:
        return subprocess.Popen(
            [*argv, str(out)],
            env=test_env(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )


def _stderr(out: Path) -> str:
    """What the run of :func:`_start_long_run` into ``out`` wrote on stderr so far."""
    return (out.parent / "deisa-run.stderr").read_text()


def _moment(moment: str, out: Path, proc: subprocess.Popen[str]) -> None:
    """Wait for ``moment`` of the run: ``startup`` (the scheduler is starting) or ``midrun``
    (steps are flowing: the progress bar counts an analysed step)."""
    if moment == "startup":
        _wait_for(
            lambda: any("scheduler" in " ".join(p.cmdline()) for p in _tree(proc)),
            "the scheduler process",
            proc,
            out,
        )
        return
    _wait_for(lambda: ANALYSED.search(_stderr(out)) is not None, "an analysed step", proc, out)


def _finish(proc: subprocess.Popen[str], out: Path, what: str) -> str:
    try:
        proc.communicate(timeout=STARTUP)  # only reports a hang
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"deisa-run did not exit within {STARTUP} s of {what}:\n{_stderr(out)}")
    return _stderr(out)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("moment", "signum"),
    [
        ("startup", signal.SIGINT),
        ("startup", signal.SIGTERM),
        ("midrun", signal.SIGINT),
        ("midrun", signal.SIGTERM),
    ],
)
def test_signal_stops_everything(tmp_path: Path, moment: str, signum: signal.Signals) -> None:
    out = tmp_path / "out"
    proc = _start_long_run(out)
    try:
        _moment(moment, out, proc)
        assert proc.poll() is None
        spawned = _tree(proc)
        if moment == "midrun":
            assert len(spawned) >= 4  # scheduler, worker, mpirun, ranks
            sockets = _listening(spawned)
            assert any(name != "mpirun" for name, _, _ in sockets), sockets  # the Dask ones
            beyond = [s for s in sockets if s[1] not in LOOPBACK and s[0] not in MPI_LAUNCHERS]
            assert beyond == [], f"listening beyond loopback: {beyond}"
        proc.send_signal(signum)
        stderr = _finish(proc, out, signum.name)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, stderr
    assert f"interrupted by {signum.name}; every process stopped" in stderr
    assert "Traceback" not in stderr
    assert _alive(spawned) == []
    assert left_behind(tmp_path) == []


@pytest.mark.timeout(300)
def test_second_signal_kills_at_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _start_long_run(out)
    try:
        _moment("midrun", out, proc)
        spawned = _tree(proc)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
        stderr = _finish(proc, out, "two signals")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # the second signal either arrived during teardown (killed at once) or after it ended
    if "SIGINT again: every process killed" in stderr:
        assert proc.returncode == 128 + signal.SIGINT, stderr
    else:
        assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert _alive(spawned) == []
    assert left_behind(tmp_path) == []


def test_local_commands_listen_on_loopback(tmp_path: Path) -> None:
    for dashboard in (False, True):
        cmd = dask_processes.scheduler_command(tmp_path / "s.json", dashboard)
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        if dashboard:
            assert cmd[cmd.index("--dashboard-address") + 1] == "127.0.0.1:0"
    cmd = dask_processes.worker_command(tmp_path / "s.json", 0, 1, tmp_path)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--dashboard-address") + 1] == "127.0.0.1:0"  # its HTTP server


def test_mpi_environment_keeps_open_mpi_local_unless_the_user_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = resolved("--solver", "python")
    assert settings.mpi_env["OMPI_MCA_btl"] == "self,vader"
    assert settings.mpi_env["OMPI_MCA_oob_tcp_if_include"] == "lo"
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    assert processes.child_env(keep=settings.mpi_env)["OMPI_MCA_btl"] == "self,vader"
    monkeypatch.setenv("OMPI_MCA_btl", "self,tcp")
    env = processes.child_env(keep=settings.mpi_env)
    assert env["OMPI_MCA_btl"] == "self,tcp"  # the user's own choice wins
    assert all(env[k] == "1" for k in processes.THREAD_PINS)


# -- the package's boundaries ---------------------------------------------------------------------


def test_library_imports_no_launcher() -> None:
    loaded = modules_loaded(
        "import deisa\n"
        "from deisa import Adapter, Bridge, BridgeOptions, IncrementalPCA, split\n"
        "import deisa.analysis.adapter, deisa.bridge, deisa.scheduler.extension\n"
        "import deisa.bridge.options, deisa.analysis.pca\n"
        "import deisa.analysis.splitter\n"
    )
    bad = ("deisa.launcher", "deisa.cli", "deisa.slurm", "matplotlib", "tqdm")
    assert [m for m in loaded if m.startswith(bad)] == []


def test_every_option_has_its_help_from_the_defaults_file() -> None:
    loaded = defaults.load_defaults()
    comments = defaults.default_comments()
    for command in (RUN, "slurm", "analytics"):
        text = " ".join(options.build_parser(command, loaded).format_help().split())
        for opt in options.OPTIONS:
            if command not in opt.sections:
                continue
            section = opt.sections[command]
            expected = opt.help if section is None else comments[section][opt.key]
            assert expected, f"{opt.key} has no comment in section {section}"
            # argparse wraps lines at hyphens too: compare without any whitespace
            assert "".join(expected.split()) in "".join(text.split()), (command, opt.key)
    run_help = " ".join(options.build_parser(RUN, loaded).format_help().split())
    assert "MPI ranks of the simulation (default: 4)" in run_help
    assert "--nodes" not in run_help


def test_step_table_takes_extra_step_fields(tmp_path: Path) -> None:
    extended = dataclasses.make_dataclass(
        "Extended", [("simulation_wait_s", float, 0.0)], bases=(StepAnalytics,), frozen=True
    )
    steps = [
        extended(
            step=s,
            wait_s=0.1,
            analytics_s=0.2,
            nbytes=800,
            explained_variance=[2.0, 1.0],
            explained_variance_ratio=[0.6, 0.3],
            simulation_wait_s=0.5,
        )
        for s in range(3)
    ]
    rows = report.step_table(steps)
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[0]["analytics_s"] == 0.2
    assert "total" in report.format_table(rows)
    results = json.loads(report.write_results(tmp_path / "r.json", steps, rows, {}).read_text())
    assert results["steps"][0]["simulation_wait_s"] == 0.5


# -- settings -------------------------------------------------------------------------------------


def resolved(*argv: str) -> settings.RunSettings:
    return parse.run_settings(RUN, argv)


def test_squarest_grid() -> None:
    assert [settings.squarest_grid(n) for n in (1, 2, 4, 6, 7, 12)] == [
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 2),
        (7, 1),
        (4, 3),
    ]


def test_defaults_come_from_the_yaml_file() -> None:
    settings = resolved("--solver", "python")
    run = yaml.safe_load(defaults.DEFAULTS_FILE.read_text())["deisa"]["run"]
    assert settings.ranks == run["ranks"] and settings.workers == run["workers"]
    assert settings.simulation["global_size"] == run["global_size"]
    assert settings.simulation["steps"] == run["steps"]
    assert settings.process_grid == (2, 2)
    assert settings.bridge.buffer_nb == run["buffer_nb"]


def test_options_override_the_config_file(tmp_path: Path) -> None:
    sim = write_config(tmp_path / "sim.yml", global_size=[48, 40], process_grid=[3, 1])
    settings = resolved("--solver", "python", "--config", str(sim))
    assert settings.ranks == 3 and settings.simulation["global_size"] == [48, 40]
    settings = resolved("--solver", "python", "--config", str(sim), "--ranks", "2", "--steps", "7")
    assert settings.ranks == 2 and settings.simulation["process_grid"] == [2, 1]
    assert settings.simulation["steps"] == 7


def test_user_defaults_file_is_checked(tmp_path: Path) -> None:
    user = tmp_path / "defaults.yml"
    user.write_text("run: {workers: 3}\n")
    settings = resolved("--solver", "python", "--defaults", str(user))
    assert settings.workers == 3
    assert "`dask worker` processes (default: 3)" in options.build_parser(
        RUN, defaults.load_defaults(user)
    ).format_help().replace("\n", " ")
    user.write_text("run: {wokers: 3}\n")
    with pytest.raises(UsageError, match="unknown key"):
        defaults.load_defaults(user)


def test_c_solver_falls_back_to_python_when_not_built(tmp_path: Path) -> None:
    settings = resolved("--build-dir", str(tmp_path))
    assert settings.solver == "python"
    assert "not built" in settings.solver_reason
    with pytest.raises(UsageError, match="--solver c: C solver not built"):
        resolved("--solver", "c", "--build-dir", str(tmp_path))


def test_c_solver_must_publish_the_analysed_array(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solver, "c_solver_problem", lambda build_dir, pdi_config: None)
    assert resolved("--solver", "c").solver == "c"
    with pytest.raises(UsageError, match="--array temp: the C solver publishes gtemp"):
        resolved("--solver", "c", "--array", "temp")


def test_unknown_solver_in_a_defaults_file(tmp_path: Path) -> None:
    user = tmp_path / "defaults.yml"
    user.write_text("run: {solver: fortran}\n")
    with pytest.raises(UsageError, match="--solver 'fortran': one of auto, c, python"):
        resolved("--defaults", str(user))


@pytest.mark.parametrize(
    ("value", "expected"), [("3", 3), (3, 3), ("none", None), ("null", None), (None, None)]
)
def test_buffer_nb(value: int | str | None, expected: int | None) -> None:
    assert checks.parse_buffer_nb(value) == expected


@pytest.mark.parametrize("value", ["two", "-1", -1, "0", 0])
def test_bad_buffer_nb(value: int | str) -> None:
    with pytest.raises(UsageError, match="--buffer-nb"):
        checks.parse_buffer_nb(value)


def test_buffer_nb_zero_is_refused_with_the_way_out() -> None:
    with pytest.raises(UsageError, match=r"0 is refused.*write 'none' for unbounded"):
        checks.parse_buffer_nb("0")


def test_python_solver_gets_the_bridge_options_as_flags(tmp_path: Path) -> None:
    settings = resolved("--solver", "python", "--placement", "locality", "--buffer-nb", "none")
    sim = commands.simulation_command(
        settings,
        python="python",
        sim_config="sim.yml",
        scheduler_file="s.json",
        timings="t.json",
        pdi_file="pdi.yml",
    )
    assert sim.argv[:5] == ["python", "-P", "-m", "deisa_simulation.heat", "sim.yml"]
    assert " ".join(settings.bridge.to_argv()) in " ".join(sim.argv)
    assert "--placement locality --buffer-nb none" in " ".join(sim.argv)
    assert sim.timings and sim.pdi is None


def test_analytics_options_fall_back_to_the_launch_defaults(tmp_path: Path) -> None:
    def parse_analytics(argv: list[str]) -> settings.AnalyticsSettings:
        return parse.analytics_settings(argv)

    args = parse_analytics(["--scheduler-file", "s.json"])
    assert (args.array, args.n_components, args.output, args.timeout, args.workers) == (
        "gtemp",
        4,
        Path("deisa-output").resolve(),
        300,
        1,
    )
    mine = tmp_path / "mine.yml"
    mine.write_text("run: {array: temp, n_components: 2}\nslurm: {timeout: 30}\n")
    args = parse_analytics(
        ["--scheduler-file", "s.json", "--defaults", str(mine), "--n-components", "3"]
    )
    assert (args.array, args.n_components, args.timeout) == ("temp", 3, 30)
    bad = tmp_path / "bad.yml"
    bad.write_text("run: {arrays: temp}\n")
    assert cli.analytics_main(["--scheduler-file", "s.json", "--defaults", str(bad)]) == 2


def test_step_timeout_is_none_unless_set_and_reaches_the_slurm_client(tmp_path: Path) -> None:
    """``--step-timeout``: no bound on the wait for a step unless the user sets one (a slow
    simulation is not a stuck one), checked like every option, the same for the three
    commands."""

    def run(*argv: str) -> float | None:
        step_timeout: float | None = parse.run_settings(RUN, argv).step_timeout
        return step_timeout

    assert run() is None
    assert run("--step-timeout", "600") == 600.0
    mine = tmp_path / "mine.yml"
    mine.write_text("run: {step_timeout: 900}\n")
    assert run("--defaults", str(mine)) == 900.0
    assert run("--defaults", str(mine), "--step-timeout", "none") is None
    for bad in ("0", "-5", "inf", "soon"):
        with pytest.raises(UsageError, match=r"^--step-timeout=\S+ must be a (finite )?positive"):
            run("--step-timeout", bad)
    mine.write_text("run: {step_timeout: later}\n")
    with pytest.raises(UsageError, match=f"{mine}: run.step_timeout='later' must be"):
        run("--defaults", str(mine))
    analytics = parse.analytics_settings(["--scheduler-file", "s"])
    assert analytics.step_timeout is None
    given = ["--scheduler-file", "s", "--step-timeout", "30"]
    assert parse.analytics_settings(given).step_timeout == 30.0

    def client_step(*argv: str) -> str:
        script = slurm.job_script(make_plan(parse.run_settings("slurm", argv)))
        return script.split("-m deisa.launcher analytics", 1)[1].split("&\n", 1)[0]

    assert "--step-timeout" not in client_step()
    assert " --step-timeout 900.0 " in client_step("--step-timeout", "900")


def test_user_command_and_analytics_are_parsed_apart() -> None:
    settings = parse.run_settings(
        RUN, ["-n", "2", "--analytics", "a.py --x 1", "--", "./sim", "-n", "2"]
    )
    assert settings.command == ["./sim", "-n", "2"] and settings.ranks == 2
    assert settings.analytics == "a.py --x 1" and settings.solver == "user"
    assert commands.analytics_argv(settings.analytics, "py") == [
        "py",
        "-P",  # neither the current directory nor the script's on its sys.path
        str(Path("a.py").absolute()),
        "--x",
        "1",
    ]
    assert commands.analytics_argv("my-tool 'a b'", "py") == ["my-tool", "a b"]  # no shell
    assert resolved("-n", "2").command == []  # the heat demo


@pytest.mark.parametrize(
    ("analytics", "message"), [("'open", "No closing quotation"), ("", "empty")]
)
def test_bad_analytics_command_is_a_usage_error(analytics: str, message: str) -> None:
    with pytest.raises(UsageError, match=f"--analytics.*{message}"):
        parse.run_settings(RUN, ["--analytics", analytics, "--", "./sim"])


@pytest.mark.parametrize("flags", [["--size", "64", "64"], ["--steps", "3", "--solver", "python"]])
def test_demo_options_beside_a_user_command_are_a_usage_error(flags: list[str]) -> None:
    with pytest.raises(UsageError, match=f"{flags[0]}.* set the heat demo's simulation"):
        resolved(*flags, "--", "./sim")
    parse.run_settings(RUN, flags)  # the demo itself takes them


def test_workers_preload_the_pca_warm_up_for_the_builtin_pca_only(tmp_path: Path) -> None:
    demo = resolved()
    assert demo.worker_preload == checks.PCA_WARM_UP == "deisa.analysis.warm"
    assert demo.summary()["worker_preload"] == checks.PCA_WARM_UP
    user = parse.run_settings(RUN, ["--analytics", "a.py", "--", "./sim"])
    assert user.worker_preload is None  # deisa does not know what a user's analytics imports
    asked = resolved("--worker-preload", "pca", "--analytics", "a.py", "--", "./s")
    assert asked.worker_preload == checks.PCA_WARM_UP
    assert resolved("--worker-preload", "none").worker_preload is None
    assert resolved("--worker-preload", "my.mod").worker_preload == "my.mod"
    with pytest.raises(UsageError, match="--worker-preload"):
        resolved("--worker-preload", " ")
    cmd = dask_processes.worker_command(tmp_path / "s.json", 0, 1, tmp_path, checks.PCA_WARM_UP)
    assert preloads(cmd) == [BRIDGE, "deisa.analysis.warm"]
    assert preloads(dask_processes.worker_command(tmp_path / "s.json", 0, 1, tmp_path)) == [BRIDGE]


BRIDGE = "deisa.worker"


def preloads(cmd: list[str]) -> list[str]:
    """The modules of ``cmd``'s ``--preload`` options, in order."""
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--preload"]


def slurm_worker_line(*argv: str) -> str:
    """The ``dask worker`` line of the Slurm job script of ``deisa-run slurm argv``."""
    script = slurm.job_script(make_plan(parse.run_settings("slurm", [*argv])))
    return next(line for line in script.splitlines() if "--no-nanny" in line)


def test_slurm_workers_preload_the_pca_warm_up_for_the_builtin_pca_only() -> None:
    assert " --preload deisa.analysis.warm " in slurm_worker_line("--solver", "python")
    assert "_warm" not in slurm_worker_line("--analytics", "a.py", "--", "./sim")
    assert "--preload my.mod" in slurm_worker_line("--worker-preload", "my.mod", "--", "./sim")


@pytest.mark.parametrize(
    ("argv", "user"),
    [
        (["--worker-preload", "none"], []),
        (["--solver", "python"], [checks.PCA_WARM_UP]),
        (["--worker-preload", "my.mod", "--analytics", "a.py", "--", "./sim"], ["my.mod"]),
        (["--worker-preload", "/my dir/it's.py", "--", "./sim"], ["/my dir/it's.py"]),
    ],
)
def test_every_worker_preloads_the_bridge_beside_the_users_module(
    tmp_path: Path, argv: list[str], user: list[str]
) -> None:
    """``deisa.worker`` first, then the settings' module, locally and in the job script,
    whatever ``--worker-preload`` says; a module path with a space or a quote stays one
    word of the script."""
    assert dask_processes.BRIDGE_WORKER == BRIDGE
    run = parse.run_settings(RUN, argv)
    cmd = dask_processes.worker_command(tmp_path / "s.json", 0, 1, tmp_path, run.worker_preload)
    assert preloads(cmd) == [BRIDGE, *user]
    line = slurm_worker_line(*argv)
    assert preloads(shlex.split(line.rstrip(" \\"))) == [BRIDGE, *user]
    assert preloads(dask_processes.worker_command(
        tmp_path / "s.json", 0, 1, tmp_path, run.worker_preload, bridge_preload=False
    )) == user  # fmt: skip


def test_worker_preload_keeps_the_preloads_of_the_dask_configuration(tmp_path: Path) -> None:
    # a --preload option replaces distributed.worker.preload: the launcher passes both
    with dask.config.set({"distributed.worker.preload": ["mine.monitor"]}):
        cmd = dask_processes.worker_command(tmp_path / "s.json", 0, 1, tmp_path, checks.PCA_WARM_UP)
        assert preloads(cmd) == ["mine.monitor", BRIDGE, checks.PCA_WARM_UP]
        script = slurm.job_script(make_plan(parse.run_settings("slurm", [])))
        assert f" --preload mine.monitor --preload {BRIDGE} --preload deisa.analysis.warm" in script
        cmd = dask_processes.worker_command(tmp_path / "s.json", 0, 1, tmp_path)
        assert preloads(cmd) == ["mine.monitor", BRIDGE]
        # nothing of deisa's to add: the configuration applies as it is
        assert "--preload" not in dask_processes.worker_command(
            tmp_path / "s.json", 0, 1, tmp_path, bridge_preload=False
        )
    with dask.config.set({"distributed.worker.preload": ["one.py", BRIDGE]}):
        args = ["--preload", "one.py", "--preload", BRIDGE, "--preload", "a.b"]
        assert dask_processes.preload_args("a.b") == args  # each once


def test_build_dir_default_is_the_projects_wherever_the_user_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's own code has its own build/: the plugin deisa-run looks for by default is this
    project's; a --build-dir the user types is relative to where they are."""
    (tmp_path / "build" / "plugin").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    user = ["--analytics", "a.py", "--", "./sim"]
    default = parse.run_settings(RUN, user)
    assert default.build_dir == REPO / "build"
    typed = parse.run_settings(RUN, ["--build-dir", "build", *user])
    assert typed.build_dir == tmp_path / "build"


# -- the defaults are dask configuration ---------------------------------------------------------


def test_dask_configuration_changes_a_default_and_the_command_line_wins(tmp_path: Path) -> None:
    """``deisa.run.*`` of the dask configuration (``dask.config.set`` here, as a user file or a
    ``DASK_DEISA__...`` variable does) overrides the packaged file, ``--defaults`` overrides
    it, the command line wins over all; an unknown key or a bad value names its source."""
    with dask.config.set({"deisa.run.workers": 5, "deisa.slurm.job-name": "mine"}):
        assert resolved("--solver", "python").workers == 5
        assert "(default: 5)" in " ".join(
            options.build_parser(RUN, defaults.load_defaults()).format_help().split()
        )
        assert resolved("--solver", "python", "--workers", "2").workers == 2
        script = slurm.job_script(make_plan(parse.run_settings("slurm", [])))
        assert "#SBATCH --job-name=mine" in script
        mine = _write(tmp_path / "mine.yml", "deisa: {run: {workers: 3}}\n")
        assert resolved("--defaults", str(mine)).workers == 3
    with dask.config.set({"deisa.run.wokers": 3}), pytest.raises(UsageError, match="wokers"):
        defaults.load_defaults()
    with (
        dask.config.set({"deisa.run.workers": 0}),
        pytest.raises(
            UsageError,
            match=r"^the dask configuration \(deisa.run.workers\): run.workers=0 must be a pos",
        ),
    ):
        resolved()


def test_env_variable_and_user_file_change_defaults_and_the_command_line_wins(
    tmp_path: Path,
) -> None:
    """The usual ways of a dask setting, in a fresh ``deisa-run``: a YAML file of the user's in
    ``~/.config/dask/`` and a ``DASK_DEISA__...`` variable (which wins over the file)."""
    user_dir = tmp_path / ".config" / "dask"
    user_dir.mkdir(parents=True)
    (user_dir / "deisa.yaml").write_text("deisa:\n  run:\n    workers: 7\n    threads: 2\n")
    probe = (
        "import json, sys\n"
        "from deisa.launcher import parse\n"
        "s = parse.run_settings('slurm', sys.argv[1:])\n"
        "print(json.dumps([s.workers, s.threads, s.tls, s.simulation['global_size']]))\n"
    )
    env = {**test_env(), "HOME": str(tmp_path), "DASK_DEISA__RUN__WORKERS": "3",
           "DASK_DEISA__RUN__TLS": "False", "DASK_DEISA__RUN__GLOBAL_SIZE": "[64, 32]"}  # fmt: skip

    def settings(*argv: str) -> list[object]:
        proc = subprocess.run(
            [sys.executable, "-c", probe, "--solver", "python", *argv],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=STARTUP,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        values: list[object] = json.loads(proc.stdout)
        return values

    assert settings() == [3, 2, False, [64, 32]]
    assert settings("--workers", "4", "--threads", "1", "--size", "8", "8") == [4, 1, False, [8, 8]]
    env["DASK_DEISA__RUN__WORKERS"] = "-1"
    proc = subprocess.run(
        [sys.executable, "-m", "deisa.launcher", "slurm", "--solver", "python"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=STARTUP,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "deisa-run slurm: error: DASK_DEISA__RUN__WORKERS: run.workers=-1 must be a positive "
        "integer\n"
    )
