"""The run's private temporary directory (deisa.launcher.private_tmp), and what keeps another
account's files off a Python's ``sys.path`` (``-P``, ``PYTHONSAFEPATH``) and the dashboard's
pages off the loopback (in process; the attacks themselves: test_job_security.py)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from deisa.launcher.commands import python_script
from deisa.launcher.dask_processes import http_env, scheduler_command, worker_command
from deisa.launcher.defaults import UsageError
from deisa.launcher.private_tmp import make_private_tmp
from deisa.launcher.processes import child_env


def test_private_tmp_is_made_0700_beside_a_planted_scratch_space(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    (shared / "dask-scratch-space").mkdir(mode=0o777)  # another account's, made first
    tmp = make_private_tmp(shared)
    info = tmp.path.lstat()
    assert tmp.path.parent == shared and stat.S_ISDIR(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    assert tmp.env() == {"TMPDIR": str(tmp.path), "DASK_TEMPORARY_DIRECTORY": str(tmp.path)}
    (tmp.path / "dask-scratch-space").mkdir()
    tmp.remove()
    assert not tmp.path.exists()
    assert [p.name for p in shared.iterdir()] == ["dask-scratch-space"]


def test_private_tmp_refuses_a_tmpdir_others_may_change(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: another account could rename the run's directory
    with pytest.raises(UsageError, match=f"TMPDIR.*{shared} is writable by other accounts"):
        make_private_tmp(shared)
    assert list(shared.iterdir()) == []


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is Python 3.11's")
def test_every_python_the_run_starts_keeps_the_current_directory_off_sys_path(
    tmp_path: Path,
) -> None:
    for cmd in (
        scheduler_command(tmp_path / "s.json"),
        worker_command(tmp_path / "s.json", 0),
        python_script(["sim.py", "a"], "python3"),
    ):
        assert cmd[1] == "-P", cmd
    assert python_script(["./sim", "a"], "python3") == ["./sim", "a"]  # not ours: the env's
    assert child_env()["PYTHONSAFEPATH"] == "1"


def test_without_the_dashboard_only_the_health_check_answers() -> None:
    env = http_env(False)
    assert env["DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES"] == '["distributed.http.health"]'
    assert env["DASK_DISTRIBUTED__WORKER__HTTP__ROUTES"] == '["distributed.http.health"]'
    assert http_env(True) == {}


def test_dashboard_is_asked_for_in_a_job_too(tmp_path: Path) -> None:
    from deisa.launcher import parse, slurm
    from deisa.launcher.plan import make_plan

    def script(*extra: str) -> str:
        argv = ["--solver", "python", "-o", str(tmp_path / "o"), *extra]
        return slurm.job_script(make_plan(parse.run_settings("slurm", argv)))

    off, on = script(), script("--dashboard")
    assert "--no-dashboard" in off and "HTTP__ROUTES" in off
    assert "analytics" in off and " --dashboard " not in off
    assert "HTTP__ROUTES" not in on and on.count(" --dashboard ") >= 1  # the analytics says where
