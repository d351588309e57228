"""Deprecated: ``deisa.slurm`` is now :mod:`deisa.launcher.slurm`.

``python -m deisa.slurm ...`` is ``deisa-run slurm ...``. This module only re-exports
:func:`~deisa.launcher.slurm.job_script` and :func:`~deisa.launcher.slurm.layout`, warns, and
will be removed after 0.1.0.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from .launcher.cli import slurm_main
from .launcher.slurm import JOB_ID, job_script, layout

__all__ = ["JOB_ID", "job_script", "layout", "main"]

warnings.warn(
    "deisa.slurm is deprecated: use deisa.launcher.slurm (deisa-run slurm)",
    FutureWarning,
    stacklevel=2,
)


def main(argv: Sequence[str] | None = None) -> int:
    """``deisa-run slurm``, under its old name."""
    return slurm_main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
