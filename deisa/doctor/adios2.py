"""ADIOS2 (optional): its CMake package (version, MPI, Fortran) and the deisa ADIOS2 engine that
``deisa-run`` finds.

An ADIOS2 code goes in situ through the deisa engine (docs/adios2.md), which needs ADIOS2 >=
2.12 built with MPI (not the PyPI ``adios2`` wheel, which is serial): CMake builds the engine
when it finds ADIOS2's package (``ADIOS2_DIR`` or ``CMAKE_PREFIX_PATH``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from . import common
from .common import MISSING, OK, WARNING, Finding
from .pdi import SYSTEM_PREFIXES, loader_problems, project_build_dir

ADIOS2_VERSION = (2, 12)  # the plugin engine interface v2 the engine is written against
ADIOS2_INSTALL_DOCS = "README.md, 'ADIOS2 (for ADIOS2 codes)'"


def adios2_config_file() -> Path | None:
    """ADIOS2's ``adios2-config.cmake`` where CMake's ``find_package(ADIOS2)`` looks:
    ``ADIOS2_DIR``, ``CMAKE_PREFIX_PATH``, then :data:`~.pdi.SYSTEM_PREFIXES`."""
    adios2_dir = os.environ.get("ADIOS2_DIR")
    if adios2_dir and (Path(adios2_dir) / "adios2-config.cmake").is_file():
        return Path(adios2_dir) / "adios2-config.cmake"
    prefixes = [*filter(None, os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep))]
    for prefix in dict.fromkeys([*prefixes, *SYSTEM_PREFIXES]):
        for found in sorted(Path(prefix).glob("lib*/cmake/adios2/adios2-config.cmake")):
            return found
    return None


def _cmake_value(path: Path, variable: str) -> str | None:
    """The value that ``set(variable value)`` gives in the CMake file ``path``."""
    if not path.is_file():
        return None
    match = re.search(rf'set\(\s*{variable}\s+"?([^")\s]*)"?\s*\)', path.read_text())
    return match.group(1) if match else None


def _on(value: str | None) -> bool:
    return (value or "").upper() in ("ON", "TRUE", "1", "YES")


def adios2_features(config: Path) -> dict[str, Any]:
    """What the ADIOS2 of the CMake package ``config`` (its ``adios2-config.cmake``) is built
    with.

    Returns
    -------
    dict
        ``version`` (a string, ``None`` if unknown), ``mpi`` and ``fortran`` (booleans).
    """
    version = _cmake_value(config.with_name("adios2-config-version.cmake"), "PACKAGE_VERSION")
    common_file = config.with_name("adios2-config-common.cmake")
    mpi = _on(_cmake_value(common_file, "ADIOS2_HAVE_MPI"))
    fortran = _on(_cmake_value(common_file, "ADIOS2_HAVE_Fortran"))
    return {"version": version, "mpi": mpi, "fortran": fortran}


def check_adios2() -> Finding:
    """ADIOS2's version, whether it has MPI (and Fortran), and the deisa engine found."""
    from ..launcher.adios2_engine import ENGINE_FILE, GUARD_FILE, find_engine, find_guard
    from ..launcher.libraries import library_problem

    config = adios2_config_file()
    if config is None:
        text = "no adios2-config.cmake in ADIOS2_DIR, CMAKE_PREFIX_PATH, /usr/local, /usr"
        fix = f"for ADIOS2 codes: install ADIOS2 >= 2.12 with MPI ({ADIOS2_INSTALL_DOCS})"
        return Finding("ADIOS2", MISSING, text, fix, required=False)
    features = adios2_features(config)
    version, mpi, fortran = features["version"], features["mpi"], features["fortran"]
    build = project_build_dir()
    engine = find_engine(build)
    details: dict[str, Any] = {"config": str(config), "version": version, "mpi": mpi}
    details.update(fortran=fortran, engine=str(engine.directory) if engine.directory else None)
    text = f"ADIOS2 {version or '?'} ({config.parent}), {'with' if mpi else 'without'} MPI"
    text += f", {'with' if fortran else 'without'} Fortran; {ENGINE_FILE} {engine.origin}"
    guard = find_guard(engine.directory)  # the memory selection guard, preloaded by deisa-run
    details["guard"] = str(guard.directory / GUARD_FILE) if guard.directory else None
    if engine.directory is not None:
        text += f"; {GUARD_FILE} {'beside it' if guard.directory else 'not found beside it'}"
    problems, fixes = [], []
    numbers = tuple(int(n) for n in re.findall(r"\d+", version or "0")[:2])
    if numbers < ADIOS2_VERSION or not mpi:
        problems.append("the deisa engine needs ADIOS2 >= 2.12 built with MPI")
        fixes.append(f"install it ({ADIOS2_INSTALL_DOCS})")
    elif engine.directory is None:
        quoted = common.quote(build)
        fixes.append(
            f"build it: cmake -S {common.quote(build.parent)} -B {quoted} "
            f"-DADIOS2_DIR={common.quote(config.parent)} && cmake --build {quoted}"
        )
    elif guard.directory is None:
        problems.append("the engine refuses to open without its memory selection guard")
        fixes.append("build the engine again (cmake --build): the guard comes with it")
    else:
        unsafe = loader_problems(engine.directory / ENGINE_FILE, "ADIOS2_PLUGIN_PATH")
        unsafe += filter(None, [library_problem(guard.directory / GUARD_FILE)])
        if unsafe:
            problems += unsafe
            fixes.append(
                "deisa-run refuses it: rebuild it, or keep it in a directory only you can write"
            )
    if problems or engine.directory is None:
        text += f"; {'; '.join(problems)}" if problems else ""
        return Finding("ADIOS2", WARNING, text, "; ".join(fixes), required=False, details=details)
    return Finding("ADIOS2", OK, text, required=False, details=details)
