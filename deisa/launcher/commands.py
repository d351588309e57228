"""The command line of each process a run starts, as the plan (:mod:`.plan`) asks for it.

:func:`simulation_command` is the heat demo's (the Python solver, or the C solver through PDI
and the deisa plugin, with its PDI YAML), :func:`analytics_argv` and :func:`python_script` a
user's (split as a shell would, no shell; a ``.py`` runs with ``python -P``). The paths are
spelled as the plan says (real paths for a local run, the job's shell words in a Slurm job).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..bridge.options import BridgeOptions
from .checks import command_words
from .processes import python_argv
from .solver import deisa_pdi_config


class SolverSettings(Protocol):
    """What :func:`simulation_command` reads (a :class:`RunSettings` has it all)."""

    @property
    def solver(self) -> str: ...
    @property
    def build_dir(self) -> Path: ...
    @property
    def pdi_config(self) -> Path: ...
    @property
    def array(self) -> str: ...
    @property
    def bridge(self) -> BridgeOptions: ...


@dataclass(frozen=True)
class SimulationCommand:
    """What runs under the MPI launcher, and what it needs.

    Attributes
    ----------
    argv
        The solver's command line, without the MPI launcher.
    pdi
        C solver: the PDI configuration to write to the ``pdi_file`` that ``argv`` names.
    plugin_dir
        C solver: the directory of the deisa plugin, to put first in ``PDI_PLUGIN_PATH``.
    timings
        Whether the solver writes the per-step timings file (the Python solver does).
    """

    argv: list[str]
    pdi: dict[str, Any] | None = None
    plugin_dir: Path | None = None
    timings: bool = False

    @property
    def description(self) -> str:
        if self.pdi is None:
            return "the Python solver (deisa_simulation.heat)"
        return f"the C solver ({self.argv[0]}) through PDI and the deisa plugin"


def simulation_command(
    settings: SolverSettings,
    *,
    python: str,
    sim_config: str,
    scheduler_file: str,
    timings: str,
    pdi_file: str,
) -> SimulationCommand:
    """The command of ``settings.solver`` (``"c"`` or ``"python"``) for one run.

    Parameters
    ----------
    settings
        From :func:`deisa.launcher.parse.run_settings`: ``solver`` (``"c"`` or ``"python"``,
        as :func:`~deisa.launcher.parse.resolve_solver` chose), ``build_dir``, ``pdi_config``,
        ``array``, ``bridge``.
    python, sim_config, scheduler_file, timings, pdi_file
        The interpreter, the simulation YAML, the scheduler file, the Python solver's timings
        file and the C solver's PDI YAML, as the command line must spell them (paths, or
        shell words such as ``$OUT/simulation.yml`` in a batch script).
    """
    if settings.solver == "c":
        heat = settings.build_dir / "simulation" / "heat"
        return SimulationCommand(
            argv=[str(heat), sim_config, pdi_file],
            pdi=deisa_pdi_config(
                settings.pdi_config, scheduler_file, settings.bridge, settings.array
            ),
            plugin_dir=settings.build_dir / "plugin",
        )
    argv = [*python_argv(python), "-m", "deisa_simulation.heat", sim_config]
    argv += ["--scheduler-file", scheduler_file, "--array", settings.array]
    argv += [*settings.bridge.to_argv(), "--timings", timings]
    return SimulationCommand(argv=argv, timings=True)


def analytics_argv(command: str, python: str) -> list[str]:
    """``command`` split as a shell would (no shell runs it,
    :func:`~deisa.launcher.checks.command_words`); a first word ending in ``.py`` runs with
    ``python``, its path made absolute.

    Raises
    ------
    UsageError
        An empty command, or one that shlex cannot split (an open quote).
    """
    return python_script(command_words(command), python)


def python_script(words: list[str], python: str) -> list[str]:
    """``words``, with ``python -P`` before a first word ending in ``.py`` (made absolute):
    neither the current directory nor the script's is on its ``sys.path``
    (:func:`~deisa.launcher.processes.python_argv`)."""
    if words[0].endswith(".py"):
        return [*python_argv(python), str(Path(words[0]).absolute()), *words[1:]]
    return list(words)
