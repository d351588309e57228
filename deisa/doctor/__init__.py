"""``python -m deisa doctor``: what a run of deisa needs, as found here, and how to fix the rest.

One line per part, with a ``fix:`` line under each part that is missing or suspicious:

- needed for a local run (``deisa-run``): Python and this package; MPI (the ``mpirun`` on
  ``PATH``); mpi4py and the MPI library it loads, which must be the ``mpirun``'s; dask and
  distributed; TLS (``cryptography``: each run's credentials); the launcher's packages
  (:mod:`.python`, :mod:`.mpi`);
- optional: PDI (its CMake package, version and plugin directory, ``PDI_PLUGIN_PATH``), the
  Python that PDI would embed, the deisa PDI plugin that ``deisa-run`` finds (:mod:`.pdi`);
  ADIOS2 (version, MPI, the deisa ADIOS2 engine that ``deisa-run`` finds: :mod:`.adios2`);
  openPMD-api (version, ADIOS2, MPI, its library: :mod:`.openpmd`);
  Slurm (``deisa-run slurm``); UCX (distributed-ucxx, ``deisa-run --protocol ucx``); HDF5
  (h5py for :class:`deisa.Replay`, serial or parallel, and the C library's
  ``h5pcc -showconfig``).

Each check returns the :class:`~.common.Finding` of :mod:`.common`. The exit status is 0 when
everything a local run needs is there, else 1; ``--json`` prints the
findings for machines. Nothing in the library imports this package: ``python -m deisa doctor``
does (:mod:`deisa.__main__`). Runs in that process; imports :mod:`deisa.launcher`'s lookups only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict

from .adios2 import check_adios2
from .common import MISSING, OK, Finding
from .mpi import check_mpi, check_mpi4py, check_slurm
from .openpmd import check_openpmd
from .pdi import check_pdi, check_pdi_python, check_plugin
from .python import check_dask, check_hdf5, check_launcher, check_python, check_tls, check_ucx

__all__ = ["CHECKS", "Finding", "diagnose", "local_run_ready", "main", "report"]

CHECKS: tuple[Callable[[], Finding], ...] = (
    check_python,
    check_mpi,
    check_mpi4py,
    check_dask,
    check_tls,
    check_launcher,
    check_pdi,
    check_pdi_python,
    check_plugin,
    check_adios2,
    check_openpmd,
    check_slurm,
    check_ucx,
    check_hdf5,
)


def diagnose() -> list[Finding]:
    """Every finding, in the order of :data:`CHECKS`. A check that fails unexpectedly gives a
    finding too (missing, with its error), so that one broken part does not hide the others."""
    findings = []
    for check in CHECKS:
        try:
            findings.append(check())
        except Exception as exc:
            part = check.__name__.removeprefix("check_")
            text = f"the check failed: {type(exc).__name__}: {exc}"
            findings.append(Finding(part, MISSING, text, "report it as a bug of deisa doctor"))
    return findings


def local_run_ready(findings: Iterable[Finding]) -> bool:
    """Whether nothing that a local run needs is missing."""
    return not any(f.required and f.status == MISSING for f in findings)


def findings_text(findings: list[Finding]) -> str:
    """The findings for a terminal: one line each, a ``fix:`` line under each that has one,
    then the verdict."""
    lines = ["python -m deisa doctor: what deisa needs, as found here"]
    for f in findings:
        optional = "(optional) " if not f.required and f.status != OK else ""
        lines.append(f"{f.status:<8} {f.part:<13} {optional}{f.found}")
        if f.fix:
            lines.append(f"{'':<22} fix: {f.fix}")
    needed = [f.part for f in findings if f.required and f.status == MISSING]
    others = [f.part for f in findings if f.status != OK and f.part not in needed]
    if needed:
        lines.append(f"Missing for a local run: {', '.join(needed)} (exit status 1).")
    else:
        lines.append("Everything a local run (deisa-run) needs is here.")
    if others:
        lines.append(f"To look at (optional, or usable as they are): {', '.join(others)}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m deisa doctor [--json]``: 0 when a local run has all it needs, else 1."""
    parser = argparse.ArgumentParser(
        prog="python -m deisa doctor",
        description="Print what deisa needs (MPI, mpi4py, dask, TLS; optional: PDI, the "
        "plugin, Slurm, HDF5), as found here, each with a fix when missing. Exit status 0 "
        "when everything a local run needs is there, else 1.",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    findings = diagnose()
    ready = local_run_ready(findings)
    if args.json:
        document = {"local_run_ready": ready, "findings": [asdict(f) for f in findings]}
        print(json.dumps(document, indent=2, default=str))
    else:
        print(findings_text(findings))
    return 0 if ready else 1
