"""Deprecated: ``deisa.cli`` is now the package :mod:`deisa.launcher`.

``deisa-run`` is ``deisa.launcher.cli:main``, ``python -m deisa.cli`` is
``python -m deisa.launcher``. This module only re-exports a few names, warns, and will be
removed after 0.1.0.
"""

from __future__ import annotations

import warnings

from .launcher.cli import main
from .launcher.config import DEFAULTS_FILE, UsageError, find_path, load_defaults, squarest_grid
from .launcher.local import scheduler_command, worker_command
from .launcher.processes import THREAD_PINS, Interrupted
from .launcher.solver import c_solver_problem, resolve_solver

__all__ = [
    "DEFAULTS_FILE",
    "THREAD_PINS",
    "Interrupted",
    "UsageError",
    "c_solver_problem",
    "find_path",
    "load_defaults",
    "main",
    "resolve_solver",
    "scheduler_command",
    "squarest_grid",
    "worker_command",
]

warnings.warn(
    "deisa.cli is deprecated: use deisa.launcher (deisa-run, python -m deisa.launcher)",
    FutureWarning,
    stacklevel=2,
)

if __name__ == "__main__":
    raise SystemExit(main())
