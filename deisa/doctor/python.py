"""The Python side: this Python and package, dask and distributed, TLS, the launcher's packages
(needed for a local run), UCX and HDF5 (optional)."""

from __future__ import annotations

import platform
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from . import common
from .common import MISSING, OK, WARNING, Finding


def check_python() -> Finding:
    """This Python, this package, its other requirements and ``deisa-run`` on ``PATH``."""
    import deisa

    where = Path(deisa.__file__).resolve().parent.parent
    version = common.installed_version(common.DISTRIBUTION)
    details: dict[str, Any] = {"python": sys.executable, "version": platform.python_version()}
    details.update(deisa=str(where), distribution=version)
    head = f"{platform.python_version()} ({sys.executable})"
    if version is None:
        text = (
            f"{head}; deisa imported from {where}, but {common.DISTRIBUTION} is not installed "
            "(no deisa-run, no dependency check)"
        )
        return Finding("Python", WARNING, text, common.pip("-e", str(where)), details=details)
    found, problems, fixes = common.check_versions(["numpy", "PyYAML", "scikit-learn", "scipy"])
    if problems:
        text = f"{head}; {'; '.join(problems)}"
        return Finding("Python", MISSING, text, common.pip(*fixes), details=details)
    text = f"{head}; {common.DISTRIBUTION} {version} ({where}); {', '.join(found)}"
    details["deisa-run"] = shutil.which("deisa-run")
    if details["deisa-run"] is None:
        fix = f"export PATH={common.quote(Path(sys.executable).parent)}:$PATH"
        return Finding("Python", WARNING, f"{text}; deisa-run is not on PATH", fix, details=details)
    return Finding("Python", OK, text, details=details)


def check_dask() -> Finding:
    modules = {"dask": "dask.array", "distributed": "distributed"}
    return common.package_finding("dask", modules, "the workers and the analytics")


def check_tls() -> Finding:
    purpose = "each deisa-run makes its own TLS credentials"
    finding = common.package_finding("TLS", {"cryptography": "cryptography.x509"}, purpose)
    if finding.status == OK:
        return finding
    fix = f"{finding.fix} (or run without TLS: deisa-run --insecure)"
    return Finding("TLS", finding.status, finding.found, fix, details=finding.details)


def check_launcher() -> Finding:
    modules = {"matplotlib": "matplotlib", "tqdm": "tqdm", "bokeh": "bokeh", "psutil": "psutil"}
    purpose = "deisa-run's plot, progress bar, dashboard and teardown"
    return common.package_finding("launcher", modules, purpose)


UCX_DISTRIBUTIONS = ("distributed-ucxx-cu12", "distributed-ucxx-cu13", "distributed-ucxx")
"""distributed-ucxx under the names it is installed as: the package index's -cu12 and -cu13
wheels, conda-forge's plain name."""


def check_ucx() -> Finding:
    """distributed-ucxx (``deisa-run --protocol ucx``, optional): which distribution, whether
    it imports, and UCX's version."""
    found = {d: v for d in UCX_DISTRIBUTIONS if (v := common.installed_version(d)) is not None}
    details: dict[str, Any] = {"distributions": found}
    module, why = common.try_import("distributed_ucxx")
    if module is None:
        have = ", ".join(f"{d} {v}" for d, v in found.items())
        text = f"distributed_ucxx does not import ({why}{'; installed: ' + have if have else ''})"
        fix = f"{common.pip('deisa-insitu[ucx]')} (distributed-ucxx-cu12), for --protocol ucx"
        return Finding("UCX", MISSING, text, fix, required=False, details=details)
    libucx = common.installed_version("libucx-cu12") or common.installed_version("libucx-cu13")
    details["libucx"] = libucx
    names = ", ".join(f"{d} {v}" for d, v in found.items()) or "distributed_ucxx"
    text = f"{names}{f', UCX {libucx}' if libucx else ''} (deisa-run --protocol ucx --insecure)"
    return Finding("UCX", OK, text, required=False, details=details)


def check_hdf5() -> Finding:
    """h5py (deisa.Replay of HDF5 files), serial or parallel, and the HDF5 C library's
    configuration (``h5pcc -showconfig``, else ``h5cc``)."""
    details: dict[str, Any] = {}
    parts = []
    h5py, why = common.try_import("h5py")
    if h5py is not None:
        details.update(h5py=h5py.__version__, h5py_mpi=bool(h5py.get_config().mpi))
        kind = "parallel" if details["h5py_mpi"] else "serial"
        parts.append(f"h5py {h5py.__version__} {kind} (h5py.get_config().mpi)")
    tool = shutil.which("h5pcc") or shutil.which("h5cc")
    if tool is not None:
        status, output = common.run_command([tool, "-showconfig"])
        version = re.search(r"HDF5 Version:\s*(\S+)", output)
        parallel = re.search(r"Parallel HDF5:\s*(\w+)", output)
        if status == 0 and version:
            is_parallel = bool(parallel and parallel.group(1).lower() in ("yes", "on", "true"))
            details.update(library=version.group(1), library_parallel=is_parallel)
            kind = "parallel" if is_parallel else "serial"
            parts.append(f"HDF5 {version.group(1)} {kind} ({Path(tool).name} -showconfig)")
    if h5py is None:
        h5py_required = "h5py" + common.required_versions().get("h5py", "")
        fix = f"{common.pip(h5py_required)} (the posthoc extra: deisa.Replay of HDF5 files)"
        text = "; ".join([f"h5py does not import ({why})", *parts])
        return Finding("HDF5", MISSING, text, fix, required=False, details=details)
    return Finding("HDF5", OK, "; ".join(parts), required=False, details=details)
