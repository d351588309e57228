"""openPMD-api (optional): its CMake package (version, ADIOS2, MPI) and its library.

A code that writes with openPMD-api (WarpX, PIConGPU...) goes in situ through the deisa ADIOS2
engine, its openPMD configuration changed (docs/openpmd.md): that needs openPMD-api >= 0.17
built with MPI and the ADIOS2 backend, against the ADIOS2 the engine is built against. It is
not on PyPI in that form (the ``openpmd-api`` wheel is serial and brings its own ADIOS2): it is
built from its source distribution (README.md, "openPMD-api").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .adios2 import _cmake_value, _on
from .common import MISSING, OK, WARNING, Finding
from .pdi import SYSTEM_PREFIXES

OPENPMD_VERSION = (0, 17)  # the first with the ADIOS2 parameters and encodings documented here
OPENPMD_INSTALL_DOCS = "README.md, 'From an openPMD-api code'"
OPENPMD_CMAKE_OPTIONS = "-DopenPMD_USE_MPI=ON -DopenPMD_USE_ADIOS2=ON"
LIBRARY = "libopenPMD.so"


def openpmd_config_file() -> Path | None:
    """openPMD-api's ``openPMDConfig.cmake`` where CMake's ``find_package(openPMD)`` looks:
    ``openPMD_DIR``, ``CMAKE_PREFIX_PATH``, then :data:`~.pdi.SYSTEM_PREFIXES`."""
    given = os.environ.get("openPMD_DIR")  # noqa: SIM112  (CMake's name, case and all)
    if given and (Path(given) / "openPMDConfig.cmake").is_file():
        return Path(given) / "openPMDConfig.cmake"
    prefixes = [*filter(None, os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep))]
    for prefix in dict.fromkeys([*prefixes, *SYSTEM_PREFIXES]):
        for found in sorted(Path(prefix).glob("lib*/cmake/openPMD/openPMDConfig.cmake")):
            return found
    return None


def openpmd_features(config: Path) -> dict[str, Any]:
    """What the openPMD-api of the CMake package ``config`` (its ``openPMDConfig.cmake``) is
    built with, and where its library is.

    Returns
    -------
    dict
        ``version`` (a string, ``None`` if unknown), ``mpi``, ``adios2`` and ``hdf5``
        (booleans), ``library`` (the path of ``libopenPMD.so`` in the package's library
        directory, ``None`` when it is not there).
    """
    version = _cmake_value(config.with_name("openPMDConfigVersion.cmake"), "PACKAGE_VERSION")
    found = {
        key: _on(_cmake_value(config, f"openPMD_HAVE_{name}"))
        for key, name in (("mpi", "MPI"), ("adios2", "ADIOS2"), ("hdf5", "HDF5"))
    }
    libdir = config.parents[2]  # <prefix>/lib/cmake/openPMD/openPMDConfig.cmake
    libraries = sorted(libdir.glob(f"{LIBRARY}*"))
    library = str(libraries[0]) if libraries else None
    return {"version": version, **found, "library": library}


def check_openpmd() -> Finding:
    """openPMD-api's version, whether it has MPI and ADIOS2, and its library."""
    config = openpmd_config_file()
    if config is None:
        text = "no openPMDConfig.cmake in openPMD_DIR, CMAKE_PREFIX_PATH, /usr/local, /usr"
        fix = (
            f"for openPMD-api codes (WarpX, PIConGPU): build openPMD-api >= 0.17 from its "
            f"sources with {OPENPMD_CMAKE_OPTIONS}, against ADIOS2 >= 2.12 with MPI "
            f"({OPENPMD_INSTALL_DOCS})"
        )
        return Finding("openPMD-api", MISSING, text, fix, required=False)
    features = openpmd_features(config)
    version, mpi, adios2 = features["version"], features["mpi"], features["adios2"]
    details: dict[str, Any] = {"config": str(config), **features}
    text = (
        f"openPMD-api {version or '?'} ({config.parent}), {'with' if adios2 else 'without'} "
        f"ADIOS2, {'with' if mpi else 'without'} MPI; {LIBRARY} "
        f"{'in ' + str(Path(features['library']).parent) if features['library'] else 'not found'}"
    )
    problems, fixes = [], []
    numbers = tuple(int(n) for n in re.findall(r"\d+", version or "0")[:2])
    if numbers < OPENPMD_VERSION:
        problems.append("deisa's openPMD configuration needs openPMD-api >= 0.17")
    if not (adios2 and mpi):
        problems.append("an openPMD code reaches the deisa engine through ADIOS2, with MPI")
    if problems:
        fixes.append(
            f"build openPMD-api >= 0.17 with {OPENPMD_CMAKE_OPTIONS} ({OPENPMD_INSTALL_DOCS})"
        )
    if features["library"] is None:
        problems.append(f"its CMake package is there, {LIBRARY} is not in {config.parents[2]}")
        fixes.append("install it again (cmake --install of its build)")
    if problems:
        text += f"; {'; '.join(problems)}"
        return Finding("openPMD-api", WARNING, text, "; ".join(fixes), False, details)
    return Finding("openPMD-api", OK, text, required=False, details=details)
