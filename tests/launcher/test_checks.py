"""What deisa-run runs or hands over, checked against other accounts (deisa.launcher.checks):
``--python``, ``--build-dir`` and the libraries found for a user's code (the deisa PDI plugin,
the ADIOS2 engine, its memory selection guard, which the simulation preloads), each refused
(exit 2, naming it) where another account could change it or one of its parents, by the one
rule of ``--output`` (:func:`deisa.launcher.security.path_problem`).

Files and directories of another account are made with ``chown`` to uid 65534 (``nobody``), as
the attack tests' attacker (tests/launcher/test_planted_code.py); those tests need root, the
others run as anyone.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from deisa.launcher import cli, parse
from deisa.launcher.adios2_engine import ENGINE_FILE, GUARD_FILE
from deisa.launcher.checks import interpreter
from deisa.launcher.defaults import UsageError
from deisa.launcher.options import RUN, SLURM
from deisa.launcher.plan import make_plan
from deisa.launcher.security import path_problem
from deisa.launcher.solver import PLUGIN_FILE

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another account needs root")


def library(path: Path, mode: int = 0o755) -> Path:
    """An (empty) library file ``path``, its directories made 0755."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    path.write_bytes(b"")
    path.chmod(mode)
    return path


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What ``deisa-run ARGV`` says on stderr, once it exited 2."""
    capsys.readouterr()
    assert cli.main(list(argv)) == 2
    return capsys.readouterr().err


# -- the rule ----------------------------------------------------------------------------------


def test_a_file_writable_by_others_is_refused_whatever_its_sticky_bit(tmp_path: Path) -> None:
    """The sticky bit keeps a directory's entries (``/tmp``); on a file it keeps nothing."""
    lib = library(tmp_path / "lib" / "libx.so")
    assert path_problem(lib) is None
    for mode in (0o775, 0o757, 0o1777):
        lib.chmod(mode)
        problem = path_problem(lib) or ""
        assert f"{lib} is writable by other accounts (mode {mode:o}): they could change it" in (
            problem
        )
    lib.chmod(0o755)
    (tmp_path / "lib").chmod(0o1777)  # a sticky directory: its entries are safe
    assert path_problem(lib) is None
    (tmp_path / "lib").chmod(0o777)
    assert f"{tmp_path / 'lib'} is writable" in (path_problem(lib) or "")


def test_both_ways_to_a_path_are_checked(tmp_path: Path) -> None:
    """A link in a directory of others (a virtual environment's ``bin/python``, swappable),
    and a link of yours leading into a directory of others (its target, changeable)."""
    safe = library(tmp_path / "safe" / "python")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    (open_dir / "python").symlink_to(safe)  # the target is safe, the link is not
    assert f"{open_dir} is writable" in (path_problem(open_dir / "python") or "")
    target = library(open_dir / "real")
    (tmp_path / "safe" / "to-open").symlink_to(target)  # the link is safe, the target is not
    assert f"{open_dir} is writable" in (path_problem(tmp_path / "safe" / "to-open") or "")
    (tmp_path / "safe" / "to-safe").symlink_to(safe)
    assert path_problem(tmp_path / "safe" / "to-safe") is None


@as_root
def test_a_file_or_a_parent_of_another_account_is_refused(tmp_path: Path) -> None:
    lib = library(tmp_path / "lib" / "libx.so")
    os.chown(lib, NOBODY, NOBODY)
    assert f"{lib} belongs to another account (uid {NOBODY})" in (path_problem(lib) or "")
    os.chown(lib, 0, 0)
    os.chown(lib.parent, NOBODY, NOBODY)
    assert f"{lib.parent} belongs to another account" in (path_problem(lib) or "")


# -- --python ----------------------------------------------------------------------------------


def venv_python(root: Path) -> Path:
    """A virtual environment's ``bin/python``: a link to this interpreter."""
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True, mode=0o755)
    python.symlink_to(sys.executable)
    return python


def test_python_and_every_parent_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--python`` in a ``bin/`` open to others (the link swappable), or a file writable by
    others: exit 2 naming ``--python`` and the path, nothing made."""
    python = venv_python(tmp_path / "venv")
    out = tmp_path / "out"
    base = ["slurm", "--solver", "python", "-o", str(out), "--python"]
    assert cli.main([*base, str(python)]) == 0
    assert f"PYTHON={python}\n" in capsys.readouterr().out
    shutil.rmtree(out)
    python.parent.chmod(0o777)
    err = refused(capsys, *base, str(python))
    assert "--python" in err and f"{python.parent} is writable by other accounts" in err, err
    python.parent.chmod(0o755)
    copy = tmp_path / "copy" / "python"
    copy.parent.mkdir(mode=0o755)
    shutil.copy(sys.executable, copy)
    copy.chmod(0o775)
    err = refused(capsys, *base, str(copy))
    assert f"{copy} is writable by other accounts (mode 775)" in err, err
    assert not out.exists()


@as_root
def test_a_python_of_another_account_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = venv_python(tmp_path / "venv")
    os.chown(python.parent, NOBODY, NOBODY)
    err = refused(capsys, "slurm", "--solver", "python", "-o", str(tmp_path / "o"),
                  "--python", str(python))  # fmt: skip
    assert f"{python.parent} belongs to another account (uid {NOBODY})" in err, err


def test_a_bare_python_is_the_one_path_finds_here(tmp_path: Path) -> None:
    """The job runs what was checked: the path ``PATH`` gives the name here."""
    found = shutil.which("python3")
    assert found is not None
    assert interpreter("--python", "python3") == str(Path(found).absolute())
    with pytest.raises(UsageError, match="--python='no-such-python-3' is not found on PATH"):
        interpreter("--python", "no-such-python-3")
    relative = venv_python(tmp_path / "venv")
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        assert interpreter("--python", "venv/bin/python") == str(relative)
    finally:
        os.chdir(cwd)


# -- --build-dir and the libraries handed over ---------------------------------------------------


def built(build: Path) -> dict[str, Path]:
    """A build with the deisa PDI plugin, the ADIOS2 engine and its guard (empty files)."""
    return {
        "plugin": library(build / "plugin" / PLUGIN_FILE),
        "engine": library(build / "plugin" / "adios2" / ENGINE_FILE),
        "guard": library(build / "plugin" / "adios2" / GUARD_FILE),
    }


USER_CODE = ("--analytics", "ana.py", "--", "./sim")


@pytest.mark.parametrize("command", [[], ["slurm"]])
def test_a_build_dir_open_to_others_is_refused_before_anything_runs(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = tmp_path / "build"
    built(build)
    out = tmp_path / "out"
    argv = [*command, "--build-dir", str(build), "-o", str(out), *USER_CODE]
    build.chmod(0o777)
    err = refused(capsys, *argv)
    assert "--build-dir" in err and f"{build} is writable by other accounts" in err, err
    assert not out.exists()
    build.chmod(0o755)
    (build / "plugin" / "adios2").chmod(0o770)  # a directory below it, open to the group
    err = refused(capsys, *argv)
    assert f"{build / 'plugin' / 'adios2'} is writable" in err, err
    (build / "plugin" / "adios2").chmod(0o755)
    link = tmp_path / "open" / "build"  # a link to it, where another account may swap it
    link.parent.mkdir(mode=0o777)
    link.parent.chmod(0o777)
    link.symlink_to(build)
    err = refused(capsys, *[str(link) if w == str(build) else w for w in argv])
    assert f"{link.parent} is writable" in err, err
    heat = library(build / "simulation" / "heat", 0o777)  # the C solver (auto: ldd reads it)
    err = refused(capsys, *[w for w in argv if w not in USER_CODE], "--solver", "auto")
    assert f"{heat} is writable" in err, err


@pytest.mark.parametrize("name", ["plugin", "engine", "guard"])
def test_each_library_of_the_build_is_checked(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = built(tmp_path / "build")
    files[name].chmod(0o666)
    err = refused(capsys, "--build-dir", str(tmp_path / "build"), "-o", str(tmp_path / "o"),
                  *USER_CODE)  # fmt: skip
    assert f"--build-dir: {files[name]} is writable by other accounts (mode 666)" in err, err


def test_an_installed_engine_is_checked_where_it_was_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An engine and its guard found through ADIOS2_PLUGIN_PATH (no build), in a directory
    open to others: refused, naming what was found and where; in a directory of root's or
    yours, handed over."""
    installed = tmp_path / "installed"
    library(installed / ENGINE_FILE)
    library(installed / GUARD_FILE)
    monkeypatch.setenv("ADIOS2_PLUGIN_PATH", str(installed))
    argv = ["--build-dir", str(tmp_path / "no-build"), "-o", str(tmp_path / "o"), *USER_CODE]
    plan = make_plan(parse.run_settings(RUN, argv))
    assert plan.simulation.first_in["LD_PRELOAD"] == installed / GUARD_FILE
    installed.chmod(0o777)
    err = refused(capsys, *argv)
    assert f"the deisa ADIOS2 engine installed in {installed} (ADIOS2_PLUGIN_PATH)" in err, err
    assert f"{installed} is writable by other accounts" in err
    installed.chmod(0o755)
    (installed / GUARD_FILE).chmod(0o664)
    err = refused(capsys, "slurm", *argv)
    assert "the ADIOS2 memory selection guard preloaded from" in err, err
    assert f"{installed / GUARD_FILE} is writable by other accounts (mode 664)" in err
    assert parse.run_settings(SLURM, argv) is not None  # the settings alone find no fault


def test_memory_limit_is_a_size_auto_or_none_and_the_error_names_the_option() -> None:
    from deisa.launcher.checks import parse_memory_limit

    assert parse_memory_limit("4GiB") == 4 * 2**30
    assert parse_memory_limit(1000) == 1000
    assert parse_memory_limit("AUTO") == "auto"
    assert parse_memory_limit("none") is parse_memory_limit(None) is None
    for bad in ("lots", "0", -5, True):
        with pytest.raises(UsageError, match="--memory-limit="):
            parse_memory_limit(bad)
