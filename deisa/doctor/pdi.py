"""PDI (optional): its CMake package, version and plugin directory, ``PDI_PLUGIN_PATH``, the
Python it would embed, and the deisa PDI plugin that ``deisa-run`` finds.

PDI 1.12 loads ``libpdi_<name>_plugin.so`` from each directory of ``PDI_PLUGIN_PATH``, then
of the YAML's ``plugin_path``, then from its own plugin directory beside ``libpdi``
(``<prefix>/lib/pdi/plugins_<version>``, where ``cmake --install build --component
deisa_plugin`` puts the plugin), then from the dynamic loader's path.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from . import common
from .common import MISSING, OK, WARNING, Finding

PDI_PLUGIN_PATH = "PDI_PLUGIN_PATH"

# where CMake looks for PDI after PDI_DIR, CMAKE_PREFIX_PATH and PATH's <prefix>/bin
SYSTEM_PREFIXES: tuple[str, ...] = (sys.prefix, "/usr/local", "/usr")
PDI_VERSION = (1, 12)  # what the plugin is built and tested against
PART = "PDI's Python"


def pdi_config_file() -> Path | None:
    """PDI's ``PDIConfig.cmake`` where CMake's ``find_package(PDI)`` looks: ``PDI_DIR``,
    ``CMAKE_PREFIX_PATH``, the prefixes of ``PATH``'s ``bin`` directories, then
    :data:`SYSTEM_PREFIXES`."""
    pdi_dir = os.environ.get("PDI_DIR")
    if pdi_dir and (Path(pdi_dir) / "PDIConfig.cmake").is_file():
        return Path(pdi_dir) / "PDIConfig.cmake"
    prefixes = [*filter(None, os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep))]
    for entry in filter(None, os.environ.get("PATH", "").split(os.pathsep)):
        if Path(entry).name in ("bin", "sbin"):
            prefixes.append(str(Path(entry).parent))
    for prefix in dict.fromkeys([*prefixes, *SYSTEM_PREFIXES]):
        for pattern in ("share/pdi/cmake", "lib*/cmake/pdi", "lib*/cmake/PDI"):
            for found in sorted(Path(prefix).glob(f"{pattern}/PDIConfig.cmake")):
                return found
    return None


def _cmake_set(path: Path, variable: str) -> str | None:
    """The value that ``set(variable "value")`` gives in the CMake file ``path``."""
    if not path.is_file():
        return None
    match = re.search(rf'set\(\s*{variable}\s+"([^"]*)"', path.read_text())
    return match.group(1) if match else None


def pdi_plugin_dir(config: Path) -> Path | None:
    """PDI's own plugin directory (``<prefix>/lib/pdi/plugins_<version>``), as its CMake
    package ``config`` (``<prefix>/share/pdi/cmake/PDIConfig.cmake``) declares it."""
    plugindir = _cmake_set(config, "PDI_DEFAULT_PLUGINDIR")
    if plugindir is None:
        return None
    return Path(plugindir) if Path(plugindir).is_absolute() else config.parents[3] / plugindir


def load_libpdi() -> str:
    """Why ``libpdi.so.1`` does not load from the dynamic loader's path (``""``: it loads, as
    ``deisa-run --solver auto`` requires to pick the C solver)."""
    try:
        ctypes.CDLL("libpdi.so.1")
    except OSError as exc:
        return str(exc)
    return ""


def pdi_plugin_path() -> list[str]:
    return [*filter(None, os.environ.get("PDI_PLUGIN_PATH", "").split(os.pathsep))]


def check_pdi() -> Finding:
    """PDI's CMake package, its version, plugin directory and plugins, ``PDI_PLUGIN_PATH``, and
    whether ``libpdi.so.1`` loads."""
    config = pdi_config_file()
    if config is None:
        places = ", ".join(dict.fromkeys(SYSTEM_PREFIXES))
        text = (
            f"no PDIConfig.cmake in PDI_DIR, CMAKE_PREFIX_PATH, PATH's prefixes, {places} (the "
            "C solver and the plugin need PDI; the Python solver does not)"
        )
        fix = (
            "install PDI 1.12 with Python support (https://pdi.dev, -DBUILD_PYTHON=ON; Spack: "
            "spack install pdi@1.12 +python) and put its prefix in CMAKE_PREFIX_PATH"
        )
        return Finding("PDI", MISSING, text, fix, required=False)
    version = _cmake_set(config.with_name("PDIConfigVersion.cmake"), "PACKAGE_VERSION") or "?"
    plugins = pdi_plugin_dir(config)
    names = (
        sorted(
            p.name[len("libpdi_") : -len("_plugin.so")] for p in plugins.glob("libpdi_*_plugin.so")
        )
        if plugins
        else []
    )
    env_path = pdi_plugin_path()
    details: dict[str, Any] = {"config": str(config), "version": version, "plugins": names}
    details.update(plugin_dir=str(plugins) if plugins else None, pdi_plugin_path=env_path)
    text = f"PDI {version} ({config.parent}); plugin directory {plugins} ({', '.join(names)}); "
    text += f"PDI_PLUGIN_PATH={os.pathsep.join(env_path)}" if env_path else "PDI_PLUGIN_PATH unset"
    problems, fixes = [], []
    if tuple(int(n) for n in re.findall(r"\d+", version)[:2]) < PDI_VERSION:
        problems.append("the plugin is built and tested against PDI 1.12")
        fixes.append("install PDI 1.12 (https://pdi.dev)")
    if "mpi" not in names:
        problems.append("PDI's mpi plugin is missing (configs/heat_deisa.yml loads it)")
        fixes.append("install PDI's mpi plugin (Spack: pdiplugin-mpi)")
    why = load_libpdi()
    details["libpdi_loads"] = not why
    if why:
        problems.append(f"libpdi.so.1 does not load ({why}): deisa-run runs the Python solver")
        fixes.append(
            f"export LD_LIBRARY_PATH={common.quote(config.parents[3] / 'lib')}:$LD_LIBRARY_PATH"
        )
    if problems:
        text += f"; {'; '.join(problems)}"
        return Finding("PDI", WARNING, text, "; ".join(fixes), required=False, details=details)
    return Finding("PDI", OK, text, required=False, details=details)


def _same_path(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def check_pdi_python() -> Finding:
    """Whether the Python that PDI embeds (the deisa plugin's, pycall's) would be this one: it
    follows ``PYTHONHOME`` if set, else the first ``python3`` on ``PATH``."""
    first_on_path = f"export PATH={common.quote(Path(sys.executable).parent)}:$PATH"
    details: dict[str, Any] = {"this_prefix": sys.prefix}
    home = os.environ.get("PYTHONHOME")
    if home:
        details["embedded_prefix"] = home
        if _same_path(home, sys.prefix):
            text = f"PYTHONHOME={home}: this Python's prefix"
            return Finding(PART, OK, text, required=False, details=details)
        text = (
            f"PYTHONHOME={home}: PDI would embed that Python, not this one ({sys.prefix}), "
            "which may not import deisa"
        )
        return Finding(PART, WARNING, text, "unset PYTHONHOME", required=False, details=details)
    first = shutil.which("python3")
    details["python3"] = first
    if first is None:
        text = "no python3 on PATH: PDI would embed the Python its libpython was built for"
        return Finding(PART, WARNING, text, first_on_path, required=False, details=details)
    if Path(first).absolute() == Path(sys.executable).absolute():
        details["embedded_prefix"] = sys.prefix
        text = f"this Python (the first python3 on PATH: {first})"
        return Finding(PART, OK, text, required=False, details=details)
    status, output = common.run_command([first, "-c", "import sys; print(sys.prefix)"])
    prefix = output.splitlines()[-1] if status == 0 and output else ""
    details["embedded_prefix"] = prefix or None
    if prefix and _same_path(prefix, sys.prefix):
        text = f"this Python (the first python3 on PATH, {first}, runs it: {prefix})"
        return Finding(PART, OK, text, required=False, details=details)
    text = (
        f"the first python3 on PATH is {first} ({prefix or 'it does not run'}), not this Python "
        f"({sys.prefix}): PDI would embed it, which may not import deisa"
    )
    fix = f"put this Python first on PATH: {first_on_path} (or activate its virtual environment)"
    return Finding(PART, WARNING, text, fix, required=False, details=details)


def project_build_dir() -> Path:
    """The build directory ``deisa-run`` uses by default (this project's ``build/``)."""
    from ..launcher.defaults import load_defaults
    from ..launcher.settings import REPO

    return REPO / load_defaults()["run"]["build_dir"]


def loader_problems(library: Path, variable: str) -> list[str]:
    """What ``deisa-run`` would refuse of a library it hands over and of the search path
    ``variable`` of this environment (:mod:`deisa.launcher.libraries`): another account's
    library could be loaded instead, or beside it."""
    from ..launcher.libraries import handed_problem, library_problem, search_dir_problem

    found = [library_problem(library), search_dir_problem(library.parent)]
    found.append(handed_problem(variable, os.environ.get(variable, "")))
    return [problem for problem in found if problem is not None]


def check_plugin() -> Finding:
    """The deisa PDI plugin that ``deisa-run`` finds, whether PDI finds it alone, whether it
    loads, and the Python it embeds."""
    from ..launcher.solver import PLUGIN_FILE, find_plugin

    build = project_build_dir()
    plugin = find_plugin(build)
    configure = f"cmake -S {common.quote(build.parent)} -B {common.quote(build)}"
    if plugin.directory is None:
        fix = (
            f"with PDI: {configure} && cmake --build {common.quote(build)}; then, for PDI to "
            f"find it without PDI_PLUGIN_PATH: cmake --install {common.quote(build)} "
            "--component deisa_plugin"
        )
        return Finding("deisa plugin", MISSING, plugin.origin, fix, required=False)
    details: dict[str, Any] = {"directory": str(plugin.directory), "origin": plugin.origin}
    text = f"{PLUGIN_FILE} {plugin.origin}"
    config = pdi_config_file()
    own = pdi_plugin_dir(config) if config is not None else None
    searched = [Path(p) for p in pdi_plugin_path()] + ([own] if own else [])
    details["found_by_pdi"] = any(p.exists() and _same_path(p, plugin.directory) for p in searched)
    if details["found_by_pdi"]:
        text += "; PDI finds it"
    else:
        text += f"; deisa-run hands it to PDI (by hand: PDI_PLUGIN_PATH={plugin.directory})"
    problems, fixes = [], []
    unsafe = loader_problems(plugin.directory / PLUGIN_FILE, PDI_PLUGIN_PATH)
    if unsafe:
        problems += unsafe
        fixes.append(
            "deisa-run refuses it: rebuild it, or keep it in a directory only you can write"
        )
    if shutil.which("ldd"):
        _, output = common.run_command(["ldd", str(plugin.directory / PLUGIN_FILE)])
        missing = [line.split()[0] for line in output.splitlines() if "not found" in line]
        if missing:
            problems.append(f"it misses libraries: {', '.join(missing)}")
            fixes.append("add their directories to LD_LIBRARY_PATH, or rebuild the plugin")
        embedded = re.search(r"libpython(\d+\.\d+)", output)
        details["libpython"] = embedded.group(1) if embedded else None
        ours = f"{sys.version_info.major}.{sys.version_info.minor}"
        if embedded and embedded.group(1) != ours:
            problems.append(f"it embeds Python {embedded.group(1)}, this Python is {ours}")
            fixes.append(
                f"rebuild it for this Python: {configure} -DPython3_EXECUTABLE={sys.executable}"
            )
    if problems:
        text += f"; {'; '.join(problems)}"
        fix = "; ".join(fixes)
        return Finding("deisa plugin", WARNING, text, fix, required=False, details=details)
    return Finding("deisa plugin", OK, text, required=False, details=details)
