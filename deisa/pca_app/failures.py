"""How a run tells its failures: :class:`PipelineError`, and the end of a process's log.

Raised by the launcher when a process exits or a wait times out
(:func:`deisa.launcher.processes.wait_until`), and by the built-in analytics when the simulation
or the analytics fails (:mod:`deisa.pca_app.pipeline`, :mod:`deisa.pca_app.stall`); the message
says which and why, with the tail of the log that tells more (:func:`tail`). Imports nothing of
deisa: every module of a run may import it.
"""

from __future__ import annotations

import re
from pathlib import Path


class PipelineError(RuntimeError):
    """The simulation or the analytics of a pipeline failed; the message says which and why."""


def tail(path: Path, lines: int = 15) -> str:
    """The end of a log, indented, led by its last Python exception line if it has one."""
    try:
        text = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    errors = [line for line in text if _EXCEPTION_LINE.match(line)]
    head = [f"  {errors[-1].strip()}"] if errors else []
    return "\n".join(head + ["    " + line for line in text[-lines:]])


_EXCEPTION_LINE = re.compile(r"^\s*[\w.]*(Error|Exception|Interrupt)\b[^ ]*: ")
