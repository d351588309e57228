"""The simulation's services: whether the C solver can run, its PDI YAML, the deisa PDI plugin.

:func:`c_solver_problem` says why the C solver (through PDI and the deisa plugin) cannot run
here, which the one pass of the settings asks to pick the solver
(:func:`deisa.launcher.parse.resolve_solver`: ``--solver auto | c | python``);
:func:`deisa_pdi_config` writes the deisa block of a run into the C solver's PDI YAML (the
settings check that it publishes ``--array``, the plan writes it); :func:`find_plugin` says
where the deisa PDI plugin is for a user's code. The command lines are the plan's
(:func:`deisa.launcher.commands.simulation_command`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bridge.options import BridgeOptions
from .defaults import UsageError, read_yaml
from .settings import LAUNCHER_BRIDGE_OPTIONS

PLUGIN_FILE = "libpdi_deisa_plugin.so"
SCHEDULER_FILE_OVERRIDE = "DEISA_SCHEDULER_FILE_OVERRIDE"
"""The variable naming ``deisa-run``'s scheduler file to the deisa PDI plugin, which then uses it
whatever its YAML's ``scheduler_file`` or ``scheduler_info`` says (the older grammars name a file
of their own launch scripts), with one info line."""


def c_solver_problem(build_dir: Path, pdi_config: Path) -> str | None:
    """Why the C solver cannot run (``None`` if it can): binary, plugin, PDI YAML, libpdi."""
    heat = build_dir / "simulation" / "heat"
    plugin = build_dir / "plugin" / PLUGIN_FILE
    for path, what in ((heat, "C solver"), (plugin, "deisa PDI plugin")):
        if not path.exists():
            return (
                f"{what} not built ({path} missing; in the repository: cmake -S . -B build && "
                "cmake --build build, or point --build-dir at your build)"
            )
    if not pdi_config.exists():
        return f"PDI configuration {pdi_config} missing (--pdi-config)"
    try:
        ctypes.CDLL("libpdi.so.1")
    except OSError as exc:
        return f"PDI does not load: {exc}"
    ldd = shutil.which("ldd")
    if ldd is not None:
        for binary in (heat, plugin):
            out = subprocess.run([ldd, str(binary)], capture_output=True, text=True, timeout=30)
            missing = [line.split()[0] for line in out.stdout.splitlines() if "not found" in line]
            if missing:
                return f"{binary.name} misses libraries: {', '.join(missing)}"
    return None


def deisa_pdi_config(
    pdi_config: Path, scheduler_file: str, options: BridgeOptions, array: str
) -> dict[str, Any]:
    """The C solver's PDI configuration ``pdi_config`` with its deisa block set for one run.

    Parameters
    ----------
    pdi_config
        PDI YAML with a ``plugins.deisa`` block (``configs/heat_deisa.yml``).
    scheduler_file
        Written into the block.
    options
        The launcher's Bridge options (``placement``, ``buffer_nb``) are written into the
        block, a ``None`` one by removing its key; the block keeps its other Bridge keys.
    array
        The array the analytics read; it must be one of the block's ``datasets``. The block's
        ``write`` entries to other datasets are removed: nobody reads them in this run, and
        with ``buffer_nb`` their steps would wait for a reader and block the simulation.

    Returns
    -------
    dict
        The configuration, to dump to a YAML file for ``heat``.

    Raises
    ------
    UsageError
        The file is unreadable, has no ``plugins.deisa`` block, or does not publish ``array``.
    """
    pdi = read_yaml(pdi_config, f"--pdi-config {pdi_config}")
    plugin = (pdi.get("plugins") or {}).get("deisa") if isinstance(pdi, dict) else None
    if not isinstance(plugin, dict):
        raise UsageError(f"--pdi-config {pdi_config}: no plugins.deisa block")
    datasets = plugin.get("datasets")
    if isinstance(datasets, dict) and array not in datasets:
        raise UsageError(
            f"--array {array}: the C solver publishes {', '.join(map(str, datasets))} "
            f"(plugins.deisa.datasets of {pdi_config})"
        )
    writes = plugin.get("write")
    if isinstance(datasets, dict) and isinstance(writes, dict):
        plugin["write"] = {
            data: entry
            for data, entry in writes.items()
            if not isinstance(entry, dict) or entry.get("dataset", data) == array
        }
    plugin["scheduler_file"] = scheduler_file
    for key, value in options.to_mapping().items():
        if key not in LAUNCHER_BRIDGE_OPTIONS:
            continue
        if value is None:
            plugin.pop(key, None)
        else:
            plugin[key] = value
    return pdi


@dataclass(frozen=True)
class Plugin:
    """Where the deisa PDI plugin is: :attr:`directory`, absolute and resolved (``None``: not
    found, PDI's own search applies), and :attr:`origin`, in words, for the user."""

    directory: Path | None
    origin: str


def find_plugin(build_dir: Path) -> Plugin:
    """The deisa PDI plugin for a user's simulation: built in ``build_dir/plugin``, else
    installed (in a ``PDI_PLUGIN_PATH`` directory, or in PDI's plugin directory under this
    Python's prefix, ``/usr/local`` or ``/usr``)."""
    built = build_dir / "plugin"
    if (built / PLUGIN_FILE).exists():
        return Plugin(built.resolve(), f"built in {built}")
    for entry in filter(None, os.environ.get("PDI_PLUGIN_PATH", "").split(os.pathsep)):
        # a relative entry is refused with the variable (deisa.launcher.libraries)
        if Path(entry).is_absolute() and (Path(entry) / PLUGIN_FILE).exists():
            return Plugin(Path(entry).resolve(), f"installed in {entry} (PDI_PLUGIN_PATH)")
    for prefix in dict.fromkeys((sys.prefix, "/usr/local", "/usr")):
        for found in sorted(Path(prefix).glob(f"lib*/pdi/plugins_*/{PLUGIN_FILE}")):
            return Plugin(found.parent.resolve(), f"installed in {found.parent}")
    return Plugin(None, f"not found ({built} has no {PLUGIN_FILE}; PDI searches its own paths)")
