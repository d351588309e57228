"""Where deisa-run finds the deisa ADIOS2 engine, and how it hands it over (ADIOS2_PLUGIN_PATH),
for a local run and in the Slurm job (deisa.launcher.adios2_engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deisa.launcher import adios2_engine
from deisa.launcher.adios2_engine import ENGINE_FILE, find_engine


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
