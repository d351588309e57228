"""Where deisa-run finds the deisa ADIOS2 engine, and how it hands it over (ADIOS2_PLUGIN_PATH),
with the memory selection guard beside it first in the simulation's LD_PRELOAD, for a local run
and in the Slurm job (deisa.launcher.adios2_engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deisa.launcher import adios2_engine, parse, slurm
from deisa.launcher.adios2_engine import ENGINE_FILE, GUARD_FILE, find_engine, find_guard
from deisa.launcher.options import RUN, SLURM
from deisa.launcher.plan import local_where, make_plan
from deisa.launcher.settings import RunSettings


def built_engine(build: Path) -> Path:
    directory = build / "plugin" / "adios2"
    directory.mkdir(parents=True)
    (directory / ENGINE_FILE).write_bytes(b"")
    return directory


def test_the_built_engine_comes_first(tmp_path: Path) -> None:
    directory = built_engine(tmp_path / "build")
    installed = tmp_path / "installed"
    installed.mkdir()
    (installed / ENGINE_FILE).write_bytes(b"")
    found = find_engine(tmp_path / "build", {"ADIOS2_PLUGIN_PATH": str(installed)})
    assert found.directory == directory and found.origin == f"built in {directory}"


def test_an_engine_installed_in_adios2_plugin_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adios2_engine, "PREFIXES", (str(tmp_path / "none"),))
    installed = tmp_path / "installed"
    installed.mkdir()
    (installed / ENGINE_FILE).write_bytes(b"")
    env = {"ADIOS2_PLUGIN_PATH": f"{tmp_path / 'empty'}:{installed}"}
    found = find_engine(tmp_path / "build", env)
    assert found.directory == installed
    assert found.origin == f"installed in {installed} (ADIOS2_PLUGIN_PATH)"


def test_an_engine_installed_beside_adios2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "prefix" / "lib").mkdir(parents=True)
    (tmp_path / "prefix" / "lib" / ENGINE_FILE).write_bytes(b"")
    monkeypatch.setattr(adios2_engine, "PREFIXES", (str(tmp_path / "prefix"),))
    assert find_engine(tmp_path / "build", {}).directory == tmp_path / "prefix" / "lib"


def test_no_engine_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adios2_engine, "PREFIXES", (str(tmp_path / "none"),))
    found = find_engine(tmp_path / "build", {})
    assert found.directory is None
    assert f"{tmp_path / 'build' / 'plugin' / 'adios2'} has no {ENGINE_FILE}" in found.origin


def test_the_guard_beside_the_engine(tmp_path: Path) -> None:
    directory = built_engine(tmp_path / "build")
    missing = find_guard(directory)
    assert missing.directory is None
    refused = "the engine will refuse to open"
    assert missing.origin == f"not found ({directory} has no {GUARD_FILE}): {refused}"
    (directory / GUARD_FILE).write_bytes(b"")
    found = find_guard(directory)
    assert found.directory == directory
    assert found.origin == f"preloaded from {directory / GUARD_FILE} (LD_PRELOAD)"


def user_command(command: str, build: Path, out: Path) -> RunSettings:
    argv = ["--build-dir", str(build), "-o", str(out), "--analytics", "ana.py", "--", "./sim"]
    return parse.run_settings(command, argv)


def test_the_simulation_alone_preloads_the_guard_before_the_users_preloads(
    tmp_path: Path,
) -> None:
    """Locally: the simulation's LD_PRELOAD is the guard, then what the user preloads; the
    analytics gets the engine's path but no preload."""
    directory = built_engine(tmp_path / "build")
    (directory / GUARD_FILE).write_bytes(b"")
    settings = user_command(RUN, tmp_path / "build", tmp_path / "out")
    plan = make_plan(settings, local_where(settings.output, []))
    env = plan.simulation.environment({"LD_PRELOAD": "/mine/libx.so"})
    assert env["LD_PRELOAD"] == f"{directory / GUARD_FILE}:/mine/libx.so"
    assert env["ADIOS2_PLUGIN_PATH"] == str(directory)
    assert plan.simulation.environment({})["LD_PRELOAD"] == str(directory / GUARD_FILE)
    assert plan.analytics is not None and "LD_PRELOAD" not in plan.analytics.environment({})
    what = {w: p.origin for w, _, p in plan.found}
    assert what["the ADIOS2 memory selection guard"].startswith("preloaded from ")


def test_the_job_preloads_the_guard_in_the_simulations_step_only(tmp_path: Path) -> None:
    """In the job: the guard (quoted) then the user's LD_PRELOAD, in a variable of the job that
    the simulation's srun alone gets as LD_PRELOAD; bash reads the script."""
    build = tmp_path / "build$dir"  # a word to quote
    directory = built_engine(build)
    (directory / GUARD_FILE).write_bytes(b"")
    script = slurm.job_script(make_plan(user_command(SLURM, build, tmp_path / "o")))
    guard = f"'{directory / GUARD_FILE}'"
    assert f'\nDEISA_LD_PRELOAD={guard}"${{LD_PRELOAD:+:$LD_PRELOAD}}"\n' in script
    assert "export LD_PRELOAD" not in script
    steps = [line for line in script.splitlines() if "srun " in line]
    preloaded = [line for line in steps if line.startswith('LD_PRELOAD="$DEISA_LD_PRELOAD" srun ')]
    assert len(preloaded) == 1 and "simulation-%N-%t" in preloaded[0], steps
    assert "# the ADIOS2 memory selection guard, preloaded from" in script


def test_no_guard_no_preload(tmp_path: Path) -> None:
    """An engine without its guard (an older install): nothing is preloaded, and deisa-run
    says the engine will refuse to open."""
    built_engine(tmp_path / "build")
    settings = user_command(RUN, tmp_path / "build", tmp_path / "out")
    plan = make_plan(settings, local_where(settings.output, []))
    assert "LD_PRELOAD" not in plan.simulation.environment({})
    what = {w: p.origin for w, _, p in plan.found}
    assert what["the ADIOS2 memory selection guard"].endswith("the engine will refuse to open")
