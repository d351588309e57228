"""How a run tells its failures: :class:`PipelineError`, and the end of a process's log.

Raised by the launcher when a process exits or a wait times out
(:func:`deisa.launcher.processes.wait_until`), and by the built-in analytics when the simulation
or the analytics fails (:mod:`deisa.pca_app.pipeline`, :mod:`deisa.pca_app.stall`); the message
says which and why, with the tail of the log that tells more (:func:`tail`), a process's end in
words (:func:`exit_in_words`), and the file a disk error was writing (:func:`naming_path`).
Imports nothing of deisa: every module of a run may import it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path


class PipelineError(RuntimeError):
    """The simulation or the analytics of a pipeline failed; the message says which and why."""


def tail(path: Path, lines: int = 15) -> str:
    """The end of a log, indented, led by its last line that says why the process stopped, if
    it has one: a Python exception's, a C++ exception's ``what()`` (``std::terminate``'s line,
    which a backtrace may push out of the tail), or a deisa engine's or plugin's error line."""
    try:
        text = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    errors = [line for line in text if any(reason.match(line) for reason in _REASON_LINES)]
    head = [f"  {errors[-1].strip()}"] if errors else []
    return "\n".join(head + ["    " + line for line in text[-lines:]])


_REASON_LINES = (
    re.compile(r"^\s*[\w.]*(Error|Exception|Interrupt)\b[^ ]*: "),  # Python
    re.compile(r"^\s*what\(\): "),  # an uncaught C++ exception, as std::terminate prints it
    re.compile(r"^\s*deisa [\w ]*(engine|plugin|guard|configuration)[\w ]*: "),  # printed by a code
)


def exit_in_words(status: int) -> str:
    """A process's exit status as a person reads it: ``"exit status 3"``, or, for the negative
    status of ``Popen.returncode`` when a signal ended it, ``"killed by SIGKILL"``."""
    if status >= 0:
        return f"exit status {status}"
    try:
        return f"killed by {signal.Signals(-status).name}"
    except ValueError:  # not a signal this system names
        return f"killed by signal {-status}"


@contextlib.contextmanager
def naming_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """Raise an :class:`OSError` of the block that names no file again, naming ``path``.

    A write or a flush that fails (a full disk: ``[Errno 28] No space left on device``) says
    nothing of the file it was writing; the same error, with ``path``, does.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc
