"""The deisa ADIOS2 engine for a user's ADIOS2 code: where it is, and the variable that hands it
over (``ADIOS2_PLUGIN_PATH``).

ADIOS2 loads the library of a ``plugin`` engine (``PluginLibrary`` ``deisa_adios2_engine``:
the first of ``deisa_adios2_engine``, ``deisa_adios2_engine.so``, ``libdeisa_adios2_engine``,
``libdeisa_adios2_engine.so`` it finds) from each directory of ``ADIOS2_PLUGIN_PATH``, else
from the dynamic loader's path; deisa builds and installs the last, and checks every one
(:mod:`.libraries`). ``deisa-run`` puts the engine it finds first in that variable, in its
plan (:mod:`.plan`), for a local run and in the Slurm job alike, as it does with
``PDI_PLUGIN_PATH`` for the PDI plugin: the engine CMake built in ``<build>/plugin/adios2``,
else one installed in a directory of ``ADIOS2_PLUGIN_PATH``, else one installed beside ADIOS2's
libraries (``cmake --install build --component deisa_adios2_engine``).

Beside the engine lies its memory selection guard (``libdeisa_adios2_guard.so``), which the
simulation must preload: ADIOS2's plugin interface hides from an engine the memory selection a
code sets (``SetMemorySelection``), the guard records it (docs/adios2.md). ``deisa-run`` puts it
first in ``LD_PRELOAD`` (:func:`find_guard`) wherever it hands the engine over.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from .solver import Plugin

ENGINE_FILE = "libdeisa_adios2_engine.so"
GUARD_FILE = "libdeisa_adios2_guard.so"
PLUGIN_PATH = "ADIOS2_PLUGIN_PATH"
PRELOAD = "LD_PRELOAD"
PREFIXES = (sys.prefix, "/usr/local", "/usr")
"""Where an installed ADIOS2 (and the engine beside its libraries) is looked for."""


def find_engine(build_dir: Path, environ: Mapping[str, str] | None = None) -> Plugin:
    """The deisa ADIOS2 engine: built in ``build_dir/plugin/adios2``, else installed (in an
    ``ADIOS2_PLUGIN_PATH`` directory, or in ``lib*`` of this Python's prefix, ``/usr/local``
    or ``/usr``).

    Returns
    -------
    Plugin
        Its directory, absolute and resolved (``None``: not found), and where it was found,
        in words.
    """
    environ = os.environ if environ is None else environ
    built = build_dir / "plugin" / "adios2"
    if (built / ENGINE_FILE).exists():
        return Plugin(built.resolve(), f"built in {built}")
    for entry in filter(None, environ.get(PLUGIN_PATH, "").split(os.pathsep)):
        # a relative entry is refused with the variable (deisa.launcher.libraries), never handed
        # over (nor the guard beside it, to LD_PRELOAD) as a path from each process's directory
        if Path(entry).is_absolute() and (Path(entry) / ENGINE_FILE).exists():
            return Plugin(Path(entry).resolve(), f"installed in {entry} ({PLUGIN_PATH})")
    for prefix in dict.fromkeys(PREFIXES):
        for found in sorted(Path(prefix).glob(f"lib*/{ENGINE_FILE}")):
            return Plugin(found.parent.resolve(), f"installed in {found.parent}")
    missing = f"not found ({built} has no {ENGINE_FILE}; ADIOS2 searches the loader's path)"
    return Plugin(None, missing)


def find_guard(engine: Path | None) -> Plugin:
    """The memory selection guard beside the engine found in the directory ``engine``.

    Returns
    -------
    Plugin
        Its directory (``None``: not found) and, in words, what preloading it does.
    """
    if engine is not None and (engine / GUARD_FILE).exists():
        return Plugin(engine, f"preloaded from {engine / GUARD_FILE} ({PRELOAD})")
    where = f"{engine} has no {GUARD_FILE}" if engine is not None else "no engine"
    return Plugin(None, f"not found ({where}): the engine will refuse to open")
