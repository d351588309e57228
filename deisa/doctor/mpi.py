"""MPI and its launchers: the ``mpirun`` on ``PATH``, the MPI library mpi4py loads (it must be
the ``mpirun``'s, or each rank runs alone), and Slurm (optional)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

from . import common
from .common import MISSING, OK, WARNING, Finding

# MPI implementations as `mpirun --version` and MPI_Get_library_version name them: (name,
# family, version pattern). A family shares its launcher's protocol and its ABI.
FLAVOURS = (
    ("Open MPI", "Open MPI", r"Open MPI\)?\s+v?(\d+(?:\.\d+)+)"),
    ("Intel MPI", "MPICH", r"Intel\(R\) MPI Library\D*(\d+(?:\.\d+)*)"),
    ("MVAPICH", "MPICH", r"MVAPICH\d*\D*(\d+(?:\.\d+)+)"),
    ("MPICH", "MPICH", r"(?:MPICH|HYDRA)\b.*?Version:\s*(\d+(?:\.\d+)+)"),
)


def mpi_flavour(text: str) -> tuple[str, str, str] | None:
    """``(name, family, version)`` of the MPI that ``text`` (``mpirun --version``, or
    ``MPI.Get_library_version()``) describes; ``None`` when it names none known."""
    for name, family, pattern in FLAVOURS:
        match = re.search(pattern, text, re.DOTALL)
        if match:
            return name, family, match.group(1)
    return None


def mpirun_info() -> dict[str, Any]:
    """The MPI launcher on ``PATH`` (``mpirun``, else ``mpiexec``): its path, exit status and
    output of ``--version``, and the MPI it names (``{}``: none on ``PATH``)."""
    launcher = shutil.which("mpirun") or shutil.which("mpiexec")
    if launcher is None:
        return {}
    status, output = common.run_command([launcher, "--version"])
    info: dict[str, Any] = {"mpirun": launcher, "status": status, "output": output}
    flavour = mpi_flavour(output) if status == 0 else None
    if flavour is not None:
        info.update(vendor=flavour[0], family=flavour[1], version=flavour[2])
    return info


def check_mpi() -> Finding:
    """``mpirun`` (or ``mpiexec``) on ``PATH``, and its version."""
    info = mpirun_info()
    if not info:
        fix = (
            "install an MPI (Debian: apt-get install openmpi-bin libopenmpi-dev; on a cluster: "
            "module load openmpi, or the site's MPI)"
        )
        return Finding("MPI", MISSING, "neither mpirun nor mpiexec is on PATH", fix)
    details = {key: info.get(key) for key in ("mpirun", "vendor", "version")}
    if info["status"] != 0:
        text = f"{info['mpirun']} --version fails: {common.last_line(info['output'], 1)}"
        fix = f"check the MPI installation (module list; ldd {common.quote(info['mpirun'])})"
        return Finding("MPI", MISSING, text, fix, details=details)
    if "vendor" not in info:
        first = info["output"].splitlines()[0] if info["output"] else "no version"
        return Finding("MPI", OK, f"{info['mpirun']}: {first}", details=details)
    text = f"{info['vendor']} {info['version']} ({info['mpirun']})"
    return Finding("MPI", OK, text, details=details)


def mpi4py_library() -> dict[str, Any]:
    """mpi4py's version, its build configuration (``mpi4py.get_config()``), the MPI library it
    loaded (``MPI.Get_library_version()``) and that library's file, without initializing MPI.

    Raises
    ------
    Exception
        mpi4py or its MPI library does not import.
    """
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:  # the library's name needs no MPI_Init
        mpi4py.rc.initialize = mpi4py.rc.finalize = False
    from mpi4py import MPI

    maps = Path("/proc/self/maps")
    loaded = maps.read_text().splitlines() if maps.exists() else []
    libmpi = [line.split()[-1] for line in loaded if "/libmpi" in line]
    return {
        "version": mpi4py.__version__,
        "config": dict(mpi4py.get_config()),
        "library": MPI.Get_library_version().strip("\x00").strip(),
        "libmpi": libmpi[0] if libmpi else None,
    }


def check_mpi4py() -> Finding:
    """mpi4py, the MPI it was built against and loads, against the ``mpirun`` on ``PATH``."""
    mpicc = shutil.which("mpicc") or "mpicc"
    build = common.pip("--no-binary", "mpi4py", "mpi4py")
    rebuild = f"MPICC={common.quote(mpicc)} {build} --force-reinstall"
    try:
        probe = mpi4py_library()
    except Exception as exc:
        text = f"mpi4py does not import ({type(exc).__name__}: {exc})"
        return Finding("mpi4py", MISSING, text, f"MPICC={common.quote(mpicc)} {build}")
    config = probe["config"]
    built = config.get("mpicc") or ", ".join(f"{k}={v}" for k, v in config.items())
    details = dict(probe)
    flavour = mpi_flavour(probe["library"])
    if flavour is not None:
        details.update(vendor=flavour[0], family=flavour[1], library_version=flavour[2])
        name = f"{flavour[0]} {flavour[2]}"
    else:  # the first words of an MPI this module does not know
        name = probe["library"].split(",")[0].strip() or "an unnamed MPI"
    text = f"{probe['version']} ({f'built with {built}' if built else 'a binary wheel'})"
    text += f" loads {name}" + (f" ({probe['libmpi']})" if probe["libmpi"] else "")
    mpirun = mpirun_info()
    if flavour is None or "vendor" not in mpirun:
        return Finding("mpi4py", OK, f"{text}; not compared with mpirun", details=details)
    theirs = f"{mpirun['vendor']} {mpirun['version']}"
    if flavour[1] != mpirun["family"]:
        text += f", but the mpirun on PATH is {theirs}: each rank would run alone"
        return Finding("mpi4py", MISSING, text, rebuild, details=details)
    if (flavour[0], flavour[2]) != (mpirun["vendor"], mpirun["version"]):
        text += f"; the mpirun on PATH is {theirs}"
        fix = f"if the ranks fail to start, rebuild mpi4py for the mpirun's MPI: {rebuild}"
        return Finding("mpi4py", WARNING, text, fix, details=details)
    return Finding("mpi4py", OK, f"{text}: the mpirun's MPI", details=details)


def check_slurm() -> Finding:
    """``sbatch`` and ``srun`` on ``PATH``, and whether they reach a Slurm configuration."""
    found = {name: shutil.which(name) for name in ("sbatch", "srun")}
    details: dict[str, Any] = dict(found)
    absent = [name for name, path in found.items() if path is None]
    if absent:
        text = f"{' and '.join(absent)} not on PATH (only deisa-run slurm needs Slurm)"
        fix = "on a Slurm cluster's login node: module load slurm, or Slurm's bin/ in PATH"
        return Finding("Slurm", MISSING, text, fix, required=False, details=details)
    where = ", ".join(str(path) for path in found.values())
    status, output = common.run_command([str(found["sbatch"]), "--version"])
    if status != 0:
        text = f"{where}, but sbatch --version fails: {common.last_line(output, status)}"
        fix = (
            "no Slurm configuration is reachable here (slurm.conf, SLURM_CONF or its DNS "
            "record): submit deisa-run slurm's job from a login node of the cluster"
        )
        return Finding("Slurm", WARNING, text, fix, required=False, details=details)
    details["version"] = output.splitlines()[0]
    text = f"{details['version']} ({where})"
    return Finding("Slurm", OK, text, required=False, details=details)
