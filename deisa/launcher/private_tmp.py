"""The run's private temporary directory: where every process it starts keeps its scratch.

Dask puts a server's scratch in ``<temporary-directory>/dask-scratch-space/<role>-XXXX`` and
that directory first on its ``sys.path``; it takes ``dask-scratch-space`` as it finds it, whoever
owns it. In a shared ``/tmp``, another account that made ``dask-scratch-space`` first (mode
777) can swap a ``scheduler-XXXX`` directory for its own and have its module imported by the
scheduler, as you (docs/security.md). So ``deisa-run`` makes one directory of its own for the
run (:func:`make_private_tmp`: ``mkdtemp``, 0700, checked as this account's, under a temporary
directory that no other account can change), names it to every process it starts as ``TMPDIR``
and as Dask's ``temporary-directory`` (:meth:`PrivateTmp.env`), and removes it at the end. The
Slurm job does the same on each node, per task, in bash (``deisa/templates/slurm_job.sh``).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .defaults import UsageError
from .security import path_problem

PREFIX = "deisa-"
"""How the run's directory is named in the temporary directory (``deisa-XXXXXXXX``)."""


@dataclass(frozen=True)
class PrivateTmp:
    """A run's private temporary directory (0700, this account's).

    Attributes
    ----------
    path
        The directory.
    """

    path: Path

    def env(self) -> dict[str, str]:
        """``TMPDIR`` and Dask's ``temporary-directory`` (``DASK_TEMPORARY_DIRECTORY``): the
        directory, for every process the run starts."""
        return {"TMPDIR": str(self.path), "DASK_TEMPORARY_DIRECTORY": str(self.path)}

    def remove(self) -> None:
        """Delete it and what the run left in it."""
        shutil.rmtree(self.path, ignore_errors=True)


def make_private_tmp(parent: Path | None = None) -> PrivateTmp:
    """A fresh private directory in ``parent`` (default: the system's temporary directory,
    ``$TMPDIR`` or ``/tmp``).

    Raises
    ------
    UsageError
        Another account could change ``parent`` or one of its own parents
        (:func:`~deisa.launcher.security.path_problem`), or the directory made is not a
        0700 directory of this account.
    """
    base = Path(parent if parent is not None else tempfile.gettempdir()).resolve()
    problem = path_problem(base)
    if problem is not None:
        raise UsageError(f"the temporary directory (TMPDIR): {problem}")
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
    info = path.lstat()
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.geteuid()
        or stat.S_IMODE(info.st_mode) != 0o700
    ):
        raise UsageError(f"{path}: not a private directory of this account once made")
    return PrivateTmp(path)
