"""The run's guardian: nothing of a local run outlives ``deisa-run``, even SIGKILLed.

``deisa-run`` stops what it started on success, failure and signals (:mod:`.processes`), but a
SIGKILL (the OOM killer, a job manager, ``kill -9``), a SIGHUP of a closed terminal, or a crash
gives it no chance: its children each lead a session of their own (a Ctrl-C reaches only
``deisa-run``), so nothing stops the scheduler, the workers, ``mpirun`` and the ranks, and the
run's private temporary directory, its TLS key and Open MPI's shared-memory segments stay.

So :func:`start_guardian` first starts a small process of its own, the guardian
(``python -m deisa.launcher.guardian``, in a session of its own), that reads a pipe whose only
writer is ``deisa-run``: the run's token, then the directories to remove
(:meth:`Guardian.remove_on_exit`). Every process of the run carries the token in its environment
(:data:`GUARD_ENV`, :meth:`Guardian.env`; ``mpirun`` hands it to the ranks, as everything else of
its environment), so the guardian finds each of them, the ranks that left ``mpirun``'s process
group included, without being told their PIDs (a PID would leave a window between a fork and
its report). When the pipe closes (``deisa-run`` has exited, however: the kernel closes its end),
the guardian (:func:`clean_up`):

1. finds the processes of this account whose environment holds the token, and the files under
   ``/dev/shm`` they map (Open MPI's ``vader_segment.*``; the workers' shared memory are
   ``memfd``\\ s, which go with their processes);
2. sends them SIGTERM (``mpirun`` stops its ranks and removes its segments), waits up to the
   run's ``--stop-timeout``, then SIGKILLs those left;
3. removes the segments left, then the directories (the private temporary directory, the
   credentials), and says on stderr, in one line, what it had to stop.

After a run that ended normally it finds nothing to stop (``deisa-run`` stopped everything and
removed its directories) and exits at once, silently. It imports nothing of deisa but this
module, and psutil.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GUARD_ENV = "DEISA_RUN_GUARD"
"""The environment variable that carries the run's token to every process of the run."""

SHM = "/dev/shm"
"""Where Open MPI (``btl_vader_backing_directory``) puts the segments that a rank killed by
SIGKILL leaves behind."""


@dataclass
class Guardian:
    """``deisa-run``'s end of its guardian (see the module docstring).

    Attributes
    ----------
    token
        The run's token (:data:`GUARD_ENV` in every child's environment).
    popen
        The guardian process.
    """

    token: str
    popen: subprocess.Popen[bytes]
    _pipe: Any  # the write end, a binary file

    def env(self) -> dict[str, str]:
        """For every process of the run: the token the guardian looks for."""
        return {GUARD_ENV: self.token}

    def remove_on_exit(self, path: Path) -> None:
        """Have the guardian remove ``path`` (a directory) once ``deisa-run`` has exited and
        every process of the run is gone."""
        self._say({"remove": str(path)})

    def _say(self, message: dict[str, Any]) -> None:
        self._pipe.write(json.dumps(message).encode() + b"\n")
        self._pipe.flush()

    def close(self, timeout: float = 10.0) -> None:
        """``deisa-run`` is done: the guardian checks that nothing is left (normally nothing)
        and exits; returns once it has (or after ``timeout`` s)."""
        with contextlib.suppress(OSError):
            self._pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)


def start_guardian(stop_timeout: float, python: str = sys.executable) -> Guardian:
    """Start the run's guardian; it stops the run's processes (:meth:`Guardian.env`) waiting
    ``stop_timeout`` s for SIGTERM, once this process exits."""
    from .processes import python_argv  # not in the guardian's process: it imports little

    token = secrets.token_hex(16)
    read_end, write_end = os.pipe()  # neither inherited by the run's children (PEP 446)
    env = {k: v for k, v in os.environ.items() if k != GUARD_ENV}
    try:
        popen = subprocess.Popen(
            [*python_argv(python), "-m", __name__],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    finally:
        os.close(read_end)
    pipe = os.fdopen(write_end, "wb")
    guardian = Guardian(token, popen, pipe)
    guardian._say({"token": token, "stop_timeout": stop_timeout, "parent": os.getpid()})
    return guardian


# -- the guardian's process --------------------------------------------------------------------


def run_processes(token: str) -> list[Any]:
    """The live processes of this account that carry ``token`` (:data:`GUARD_ENV`)."""
    import psutil

    found = []
    me, uid = os.getpid(), os.getuid()
    for proc in psutil.process_iter(["uids", "status"]):
        try:
            if proc.pid == me or proc.info["uids"].real != uid:
                continue
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(GUARD_ENV) == token:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def shared_segments(procs: Iterable[Any]) -> set[str]:
    """The files under :data:`SHM` that ``procs`` map."""
    import psutil

    paths: set[str] = set()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            paths.update(
                m.path for m in proc.memory_maps(grouped=True) if m.path.startswith(SHM + "/")
            )
    return paths


def clean_up(token: str, remove: Sequence[str], stop_timeout: float) -> list[str]:
    """Stop the run's processes (SIGTERM, then SIGKILL after ``stop_timeout`` s), remove the
    segments they mapped and the directories ``remove``; the processes found, described."""
    import psutil

    procs = run_processes(token)
    segments = shared_segments(procs)
    stopped = [f"{_name(p)} ({p.pid})" for p in procs]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=stop_timeout)
    deadline = time.monotonic() + stop_timeout
    while True:  # what was missed (started meanwhile) or did not stop on SIGTERM
        alive = [p for p in {*alive, *run_processes(token)} if p.is_running()]
        if not alive or time.monotonic() > deadline:
            break
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=5)
    uid = os.getuid()
    for path in segments:
        with contextlib.suppress(OSError):
            if os.lstat(path).st_uid == uid:
                os.unlink(path)
    for directory in remove:
        shutil.rmtree(directory, ignore_errors=True)
    return stopped


def _name(proc: Any) -> str:
    """What ``proc`` is, in short: ``dask worker``, ``my_simulation.py``, ``mpirun``."""
    try:
        cmd = proc.cmdline()
        name = str(proc.name())
    except Exception:  # gone meanwhile
        return "?"
    if "-m" in cmd[1:]:
        i = cmd.index("-m")
        return " ".join(cmd[i + 1 : i + 3])
    if name.startswith("python"):
        scripts = [arg for arg in cmd[1:] if not arg.startswith("-")]
        return Path(scripts[0]).name if scripts else name
    return name


def main() -> int:
    """The guardian: read what ``deisa-run`` says until it exits, then :func:`clean_up`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the pipe's end stops it
    first = sys.stdin.buffer.readline()
    if not first:
        return 0  # deisa-run died before saying anything: it started nothing
    hello = json.loads(first)
    remove: list[str] = []
    for line in sys.stdin.buffer:
        with contextlib.suppress(ValueError, KeyError):
            remove.append(str(json.loads(line)["remove"]))
    stopped = clean_up(hello["token"], remove, float(hello["stop_timeout"]))
    if stopped:
        print(
            f"deisa-run (pid {hello['parent']}) exited without stopping its processes: its "
            f"guardian stopped {len(stopped)} ({', '.join(stopped)}) and removed "
            f"{', '.join(remove) or 'nothing'}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
