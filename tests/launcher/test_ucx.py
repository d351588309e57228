"""``deisa-run --protocol ucx`` (issue 35, item 2): declared once, refused without ``--insecure``
(distributed has no TLS over UCX) and without distributed-ucxx, before anything starts; passed
to ``dask scheduler`` and ``dask worker`` of the local run and of the Slurm job.

The last test runs a small ``deisa-run --protocol ucx`` for real where distributed-ucxx imports:
in this Python, or in the one ``DEISA_TEST_UCX_PYTHON`` names (a venv with
``pip install 'deisa-insitu[ucx]'``); it skips with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import STARTUP, test_env

from deisa.launcher import cli, options, parse, slurm, ucx
from deisa.launcher.defaults import UsageError, load_defaults
from deisa.launcher.options import RUN, SLURM, option
from deisa.launcher.plan import make_plan
from deisa.launcher.settings import RunSettings

INSECURE_UCX = ["--protocol", "ucx", "--insecure", "--solver", "python"]


@pytest.fixture
def ucx_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """distributed-ucxx taken as installed in this Python (nothing is imported)."""
    monkeypatch.setattr(ucx, "ucx_available", lambda: True)


@pytest.fixture
def ucx_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ucx, "ucx_available", lambda: False)


def settings_of(command: str, *argv: str) -> RunSettings:
    return parse.run_settings(command, list(argv))


# -- the option ---------------------------------------------------------------------------------


def test_protocol_is_declared_once_for_run_and_slurm_and_defaults_to_tcp(tmp_path: Path) -> None:
    declared = option("protocol")
    assert declared.flags == ("--protocol",)
    assert dict(declared.sections) == {RUN: "run", SLURM: "run"}
    assert declared.kwargs["choices"] == ["tcp", "ucx"]
    assert load_defaults(None)["run"]["protocol"] == "tcp"
    for command in (RUN, SLURM):
        made = settings_of(command, "--solver", "python", "-o", str(tmp_path / "o"))
        assert made.protocol == "tcp" and made.tls
        assert made.summary()["protocol"] == "tcp"
    assert "--protocol {tcp,ucx}" in options.build_parser(RUN, load_defaults(None)).format_help()


def test_an_unknown_protocol_in_a_defaults_file_is_named(tmp_path: Path) -> None:
    defaults = tmp_path / "d.yml"
    defaults.write_text("run:\n  protocol: udp\n")
    with pytest.raises(UsageError, match=r"d\.yml: run\.protocol='udp' must be tcp or ucx"):
        settings_of(RUN, "--defaults", str(defaults), "--solver", "python", "-o", str(tmp_path))


def test_ucx_is_refused_without_insecure_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ucx_installed: None
) -> None:
    out = tmp_path / "out"
    for command in ([], ["slurm"]):
        assert cli.main([*command, "--protocol", "ucx", "--solver", "python", "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "--protocol ucx: distributed has no TLS over UCX" in err
        assert "every interface" in err and "Give --insecure as well" in err
        assert "docs/security.md" in err
    assert not out.exists()  # nothing started, nothing written


def test_ucx_without_distributed_ucxx_names_the_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ucx_missing: None
) -> None:
    out = tmp_path / "out"
    for command in ([], ["slurm"]):
        assert cli.main([*command, *INSECURE_UCX, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "distributed-ucxx is not installed (no module 'distributed_ucxx'" in err
        assert "pip install 'deisa-insitu[ucx]' (it installs distributed-ucxx-cu12)" in err
    assert not out.exists()


def test_ucx_check_looks_without_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: seen.append(name))
    assert not ucx.ucx_available()
    assert seen == ["distributed_ucxx"]


def test_ucx_environment_keeps_the_data_interfaces_on_loopback_unless_set() -> None:
    assert ucx.UCX().cli_args() == ["--protocol", "ucx"]
    assert ucx.UCX().env({}) == {"UCX_NET_DEVICES": "lo"}
    assert ucx.UCX().env({"UCX_NET_DEVICES": "mlx5_0:1"}) == {}


def test_local_dask_commands_speak_ucx(tmp_path: Path) -> None:
    from deisa.launcher.dask_processes import scheduler_command, worker_command

    comm = ucx.UCX()
    for cmd in (
        scheduler_command(tmp_path / "s.json", False, comm),
        worker_command(tmp_path / "s.json", 0, credentials=comm),
    ):
        assert cmd[cmd.index("--protocol") + 1] == "ucx"
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        assert not any(arg.startswith("--tls") for arg in cmd)


# -- the Slurm job ------------------------------------------------------------------------------


def test_job_script_speaks_ucx_without_credentials(tmp_path: Path, ucx_installed: None) -> None:
    script = slurm.job_script(
        make_plan(settings_of(SLURM, *INSECURE_UCX, "-o", str(tmp_path / "o")))
    )
    lines = script.splitlines()
    scheduler = next(line for line in lines if "-m dask scheduler" in line)
    worker = next(i for i, line in enumerate(lines) if "-m dask worker" in line)
    assert scheduler.rstrip(" &").endswith("--protocol ucx")
    assert lines[worker + 1].rstrip(" &").endswith("--protocol ucx")
    assert "--protocol tls" not in script
    assert "deisa.launcher.security" not in script and "DASK_DISTRIBUTED__COMM__TLS" not in script
    assert "DEISA_TLS_" not in script
    assert '"$PYTHON" -c "import distributed_ucxx"' in script
    assert "speak UCX without authentication and listen on every interface" in script
    tcp = slurm.job_script(
        make_plan(settings_of(SLURM, "--solver", "python", "-o", str(tmp_path / "o")))
    )
    assert "--protocol ucx" not in tcp and "distributed_ucxx" not in tcp
    assert "--protocol tls" in tcp


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.skipif(ucx.ucx_available(), reason="distributed-ucxx is installed in this Python")
def test_job_on_a_python_without_distributed_ucxx_stops_before_any_step(
    tmp_path: Path, ucx_missing: None
) -> None:
    """``--python`` names an interpreter of the compute nodes: the job itself checks that it
    imports distributed-ucxx (this Python does not), and exits 1 before any ``srun``."""
    made = settings_of(SLURM, *INSECURE_UCX, "--python", sys.executable, "-o", str(tmp_path / "o"))
    (tmp_path / "job.sh").write_text(slurm.job_script(make_plan(made)))
    calls = tmp_path / "calls"
    calls.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SLURM_JOB_ID": "7",
        "PYTHONPATH": test_env()["PYTHONPATH"],  # the job's Python runs this deisa's checks
        "BASH_FUNC_srun%%": f'() {{ touch "{calls}/$RANDOM"; }}',
    }
    done = subprocess.run(
        ["bash", str(tmp_path / "job.sh")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"--protocol ucx: {sys.executable} cannot import distributed_ucxx" in done.stderr
    assert "pip install 'deisa-insitu[ucx]'" in done.stderr
    assert not list(calls.iterdir())


# -- a real run over UCX ------------------------------------------------------------------------


def ucx_python() -> str | None:
    """An interpreter in which distributed-ucxx imports: this one, or ``DEISA_TEST_UCX_PYTHON``;
    ``None`` if neither."""
    candidates = [sys.executable, os.environ.get("DEISA_TEST_UCX_PYTHON")]
    for python in filter(None, candidates):
        probe = subprocess.run(
            [python, "-c", "import distributed_ucxx"], env=test_env(), capture_output=True,
            timeout=STARTUP,
        )  # fmt: skip
        if probe.returncode == 0:
            return python
    return None


@pytest.mark.timeout(3 * STARTUP + 300)
def test_local_run_over_ucx(tmp_path: Path) -> None:
    """Two ranks, one worker, two steps over UCX, end to end: the run ends 0, says once that
    it is open, and its scheduler and worker spoke ``ucx://``."""
    python = ucx_python()
    if python is None:
        pytest.skip(
            "distributed-ucxx does not import in this Python (pip install 'deisa-insitu[ucx]', "
            "which installs distributed-ucxx-cu12) and DEISA_TEST_UCX_PYTHON names no "
            "interpreter where it does"
        )
    out = tmp_path / "out"
    proc = subprocess.run(
        [python, "-m", "deisa.launcher", *INSECURE_UCX, "--ranks", "2", "--workers", "1",
         "--steps", "2", "--output-period", "5", "--timeout", str(STARTUP), "--output", str(out)],
        env=test_env(), cwd=tmp_path, capture_output=True, text=True, timeout=3 * STARTUP + 240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    warnings = [line for line in proc.stderr.splitlines() if "--insecure" in line]
    assert len(warnings) == 1 and "speak UCX without authentication" in warnings[0], proc.stderr
    assert "ucx://127.0.0.1:" in (out / "logs" / "scheduler.log").read_text()
    assert "ucx://" in (out / "logs" / "worker-0.log").read_text()
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["protocol"] == "ucx"
    assert len(results["steps"]) == 2
    assert not (out / "tls").exists()


# -- the benchmark ------------------------------------------------------------------------------


@pytest.mark.skipif(ucx.ucx_available(), reason="distributed-ucxx is installed in this Python")
def test_bandwidth_benchmark_without_distributed_ucxx_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import bandwidth

    assert bandwidth.main(["--protocol", "ucx", "--out", str(tmp_path)]) == 2
    assert "--protocol ucx: no module 'distributed_ucxx'; pip install" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.timeout(3 * STARTUP + 300)
def test_bandwidth_benchmark_over_ucx_tcp_and_shared_memory(tmp_path: Path) -> None:
    """``python -m bench.bandwidth --protocol ucx``, small: every lane measured, each Bridge
    sending the way its lane says."""
    python = ucx_python()
    if python is None:
        pytest.skip("distributed-ucxx does not import here (see test_local_run_over_ucx)")
    from conftest import REPO

    proc = subprocess.run(
        [python, "-m", "bench.bandwidth", "--protocol", "ucx", "--sizes", "1", "--repeat", "2",
         "--out", str(tmp_path)],
        env=test_env(), cwd=REPO, capture_output=True, text=True, timeout=3 * STARTUP + 240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "bandwidth_ucx.json").read_text())
    measured = {(r["path"], r["lane"]) for r in result["records"] if r.get("gib_per_s")}
    for path in ("deisa send", "deisa publish"):
        assert {(path, "tcp"), (path, "ucx"), (path, "shared memory")} <= measured
    assert {("dask scatter", "tcp"), ("dask scatter", "ucx")} <= measured
    assert result["info"]["transport 1048576"] == {
        "tcp": "tcp", "ucx": "tcp", "shared memory": "shared memory"
    }  # fmt: skip
    assert result["info"]["addresses"]["ucx"].startswith("ucx://")
