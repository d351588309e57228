"""What every check of ``deisa doctor`` shares: the :class:`Finding` it returns, the commands it
runs (:func:`run_command`), and the installed Python packages against this package's
requirements (:func:`package_finding`)."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

OK, WARNING, MISSING = "ok", "warning", "missing"
DISTRIBUTION = "deisa-insitu"
COMMAND_TIMEOUT = 120.0  # seconds a `--version` may take on a loaded login node


@dataclass(frozen=True)
class Finding:
    """What was found of one part.

    Attributes
    ----------
    part
        ``"MPI"``, ``"PDI"``...
    status
        ``"ok"``, ``"warning"`` (usable, but check the fix) or ``"missing"`` (absent or
        unusable).
    found
        What was found, or what is not there, in words.
    fix
        How to get it (missing) or what to check (warning); empty when ok.
    required
        Needed for a local run; Slurm, PDI, its Python, the plugin and HDF5 are not.
    details
        The same findings as values, for ``--json``.
    """

    part: str
    status: str
    found: str
    fix: str = ""
    required: bool = True
    details: dict[str, Any] = field(default_factory=dict)


def run_command(argv: list[str]) -> tuple[int, str]:
    """``argv``'s exit status and output (stdout then stderr, stripped); 127 when it cannot
    start, 124 when it runs past :data:`COMMAND_TIMEOUT`."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except OSError as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired:
        return 124, f"no answer in {COMMAND_TIMEOUT:.0f} s"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def last_line(output: str, status: int) -> str:
    """The last line of a command's output, or its exit status when it wrote nothing."""
    lines = output.splitlines()
    return lines[-1] if lines else f"exit status {status}"


def quote(path: str | Path) -> str:
    return shlex.quote(str(path))


def pip(*requirements: str) -> str:
    """The command that installs ``requirements`` into this Python."""
    return shlex.join([sys.executable, "-m", "pip", "install", *requirements])


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (``None``: not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def required_versions() -> dict[str, str]:
    """``{distribution: specifier}`` of this package's requirements, extras but ``test``
    included (``{"dask": ">=2025.1", ...}``); empty when this package is not installed."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # dask requires packaging: without it, the dask line says so
        return {}
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return {}
    found = {}
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": "test"}):
            found[_canonical(requirement.name)] = str(requirement.specifier)
    return found


def check_versions(names: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """For the distributions ``names``: ``"name version"`` of each installed one, what is
    wrong (absent, or older than this package requires), and the pip requirements that fix it."""
    wanted = required_versions()
    found, problems, fixes = [], [], []
    for name in names:
        version = installed_version(name)
        specifier = wanted.get(_canonical(name), "")
        if version is None:
            problems.append(f"{name} is not installed")
            fixes.append(f"{name}{specifier}")
            continue
        found.append(f"{name} {version}")
        if specifier and not _satisfies(version, specifier):
            problems.append(f"{name} {version} is older than {name}{specifier}")
            fixes.append(f"{name}{specifier}")
    return found, problems, fixes


def _satisfies(version: str, specifier: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(specifier).contains(version, prereleases=True)


def try_import(module: str) -> tuple[Any, str]:
    """``(module, "")``, or ``(None, why)`` when it does not import."""
    try:
        return importlib.import_module(module), ""
    except Exception as exc:  # an extension that fails to load raises more than ImportError
        return None, f"{type(exc).__name__}: {exc}"


def package_finding(part: str, modules: dict[str, str], purpose: str) -> Finding:
    """A part made of Python packages, needed for a local run: ``modules`` maps each
    distribution to a module that must import; ``purpose`` says what they are for."""
    found, problems, fixes = check_versions(modules)
    for distribution, module in modules.items():
        if installed_version(distribution) is not None:
            why = try_import(module)[1]
            if why:
                problems.append(f"{module} does not import ({why})")
                fixes.append(f"--force-reinstall {distribution}")
    details = {"packages": found}
    if problems:
        text = f"{'; '.join(problems)} ({purpose})"
        return Finding(part, MISSING, text, pip(*fixes), details=details)
    return Finding(part, OK, f"{', '.join(found)} ({purpose})", details=details)
