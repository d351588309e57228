"""The launcher's child processes and its signals.

:class:`ProcessSet` starts each child in its own session, logs it to a file and stops them
all by PID (their process groups, then any descendant that left them). :class:`Signals` turns
SIGINT and SIGTERM into a flag that the launcher's wait loops check (:meth:`Signals.check`
raises :class:`Interrupted` there, in the main thread, never inside distributed's
synchronisation); a second signal kills every child at once and exits. :data:`THREAD_PINS` is
the one place where the launcher pins BLAS and OpenMP to one thread per process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..pca_app.failures import PipelineError, exit_in_words, naming_path, tail
from .security import open_log

logger = logging.getLogger(__name__)

# One thread per process for BLAS and OpenMP: the processes of a run already share the cores
# (an SVD on a 2-core machine is 10x slower with each process running threads on every core).
THREAD_PINS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# No directory that another account may write to on a Python's sys.path: `python -m` puts the
# current directory first, `python script.py` the script's, where a planted `dask/` would be
# imported as you. `-P` for every Python the run starts (Python >= 3.11), PYTHONSAFEPATH=1 in
# the environment of every process it starts, for the Pythons those start in turn.
SAFE_PATH: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()
SAFE_PATH_ENV = {"PYTHONSAFEPATH": "1"}

# The scheduler never moves a task the Bridge placed: every process of a run, local or in a job.
NO_WORK_STEALING = {"DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False"}


def python_argv(python: str = sys.executable) -> list[str]:
    """The start of a command line running ``python`` without the current directory (nor a
    script's) on its ``sys.path`` (:data:`SAFE_PATH`)."""
    return [python, *SAFE_PATH]


def child_env(
    extra: Mapping[str, str] | None = None, *, keep: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This environment for a child: BLAS pinned, mpirun allowed as root, no work stealing,
    no unsafe directory on a Python's ``sys.path`` (:data:`SAFE_PATH_ENV`).

    Parameters
    ----------
    extra
        Set over everything.
    keep
        Set only where this environment does not set them (the user's values win).
    """
    env = dict(os.environ)
    env.update(THREAD_PINS)
    env.update(SAFE_PATH_ENV)
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.update(NO_WORK_STEALING)
    for key, value in (keep or {}).items():
        env.setdefault(key, value)
    env.update(extra or {})
    return env


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the command; teardown follows.

    A :class:`BaseException`, so that no ``except Exception`` on the way swallows it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Child:
    """A started process: its name (the part it plays), its ``Popen`` and its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    echo: threading.Thread | None = None
    label: str | None = None  # how its failure names it, if not by name (the scheduler's address)

    def join_echo(self) -> None:
        """Wait until the copy of its output to the terminal is complete (after its exit)."""
        if self.echo is not None:
            self.echo.join(timeout=5)


def _tee(source: IO[bytes], log: Path, echo: IO[str]) -> None:
    """Copy ``source``'s lines to ``log`` and to ``echo`` until it closes."""
    with open_log(log) as out, naming_path(log):
        for line in iter(source.readline, b""):
            out.write(line)
            out.flush()
            with contextlib.suppress(Exception):
                echo.write(line.decode(errors="replace"))
                echo.flush()
    source.close()


@dataclass
class ProcessSet:
    """Processes started in their own process groups, logged to files, stopped together.

    Each child leads a new session, so a Ctrl-C in the terminal reaches only this command,
    which then stops them (:meth:`stop`): SIGTERM to the group, then SIGKILL to the group and
    to any descendant that left it, after ``stop_timeout`` seconds.
    """

    log_dir: Path
    env: dict[str, str]
    stop_timeout: float = 10.0
    children: list[Child] = field(default_factory=list)
    # descendants seen by stop(): MPI ranks may outlive mpirun (and leave its group), and a
    # second signal must still reach them
    _seen: list[Any] = field(default_factory=list)

    def start(
        self,
        name: str,
        cmd: Sequence[str],
        env: dict[str, str] | None = None,
        echo: IO[str] | None = None,
    ) -> Child:
        """Start ``cmd`` as ``name``, its output (stderr included) in ``<log_dir>/<name>.log``
        and, with ``echo``, also copied there (the user's analytics, to the terminal)."""
        log = self.log_dir / f"{name}.log"
        if echo is None:
            with open_log(log) as out:
                popen = subprocess.Popen(
                    list(cmd),
                    env=env or self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            child = Child(name, popen, log)
        else:
            popen = subprocess.Popen(
                list(cmd),
                env=env or self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            assert popen.stdout is not None
            copy = threading.Thread(target=_tee, args=(popen.stdout, log, echo), daemon=True)
            copy.start()
            child = Child(name, popen, log, copy)
        self.children.append(child)
        logger.info("started %s (pid %d): %s", name, popen.pid, " ".join(cmd))
        return child

    def failed(self, names: Sequence[str] | None = None) -> Child | None:
        """The first of ``names`` (all by default) that exited, if any."""
        for child in self.children:
            if (names is None or child.name in names) and child.popen.poll() is not None:
                return child
        return None

    def stop(self) -> None:
        """Stop every child and its descendants; returns once they are gone.

        Two waves: every child but the first (simulation, workers), then the first (the
        scheduler), so that workers can still reach the scheduler while they close.
        """
        if self.children:
            self._stop(self.children[:0:-1])
            self._stop(self.children[:1])

    def kill(self) -> None:
        """SIGKILL every child's group and descendants now, without waiting (second signal)."""
        for proc in [*self._seen, *self._descendants(self.children)]:
            with contextlib.suppress(Exception):
                proc.kill()
        for child in self.children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.popen.pid, signal.SIGKILL)

    @staticmethod
    def _descendants(children: Sequence[Child]) -> list[Any]:
        import psutil

        tree: list[psutil.Process] = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                tree += psutil.Process(child.popen.pid).children(recursive=True)
        return tree

    def _stop(self, children: Sequence[Child]) -> None:
        import psutil

        tree = self._descendants(children)
        self._seen += tree
        deadline = time.monotonic() + self.stop_timeout
        popens, names = [c.popen for c in children], [c.name for c in children]
        terminate(popens, self.stop_timeout, names, groups=True)
        for child in children:
            child.join_echo()
        _, alive = psutil.wait_procs(tree, timeout=max(0.5, deadline - time.monotonic()))
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=5)


def _leads_group(popen: subprocess.Popen[bytes]) -> bool:
    """Whether ``popen`` leads its process group (started in a session of its own)."""
    try:
        return os.getpgid(popen.pid) == popen.pid
    except (ProcessLookupError, PermissionError):
        return False


def terminate(
    popens: Sequence[subprocess.Popen[bytes]],
    timeout: float,
    names: Sequence[str] | None = None,
    *,
    groups: bool | None = None,
) -> None:
    """Stop ``popens`` together; return once every one is reaped.

    SIGTERM to each, then, after ``timeout`` s for all of them, SIGKILL to those left. A
    process that leads its group (``groups``: all do; ``None``: asked of each) is signalled
    with its group, so that its descendants that stayed in it (MPI ranks) go too.
    ``names``: theirs, for the warning about one that had to be killed.
    """
    leaders = [_leads_group(p) if groups is None else groups for p in popens]
    for popen, leader in zip(popens, leaders, strict=True):
        if leader:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGTERM)
        elif popen.poll() is None:
            popen.terminate()
    deadline = time.monotonic() + timeout
    for i, (popen, leader) in enumerate(zip(popens, leaders, strict=True)):
        try:
            popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            name = names[i] if names is not None else f"process {popen.pid}"
            logger.warning("%s did not stop on SIGTERM; killing it", name)
        if leader:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
        if popen.poll() is None:
            popen.kill()
        popen.wait()


class Signals:
    """SIGINT and SIGTERM, while in a ``with`` block of the main thread, set a flag.

    The first signal only records its number (:attr:`received`); the code that waits calls
    :meth:`check`, which raises :class:`Interrupted` there. A second signal calls ``on_second``
    (e.g. :meth:`ProcessSet.kill`), says so on stderr and exits with ``128 + signum`` at once.
    Outside the main thread the handlers are left as they are.
    """

    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.received: int | None = None
        self.on_second: Callable[[], None] | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum
            return
        if self.on_second is not None:
            self.on_second()
        name = signal.Signals(signum).name
        with contextlib.suppress(Exception):
            sys.stderr.write(f"{self.prog}: {name} again: every process killed\n")
            sys.stderr.flush()
        os._exit(128 + signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` if a signal came."""
        if self.received is not None:
            raise Interrupted(self.received)

    def __enter__(self) -> Signals:
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, old in self._previous.items():
            signal.signal(signum, old)
        self._previous.clear()


class PartFailed(BaseException):
    """A part of the run failed, found by :func:`watched` while the main thread was in a call:
    a :class:`BaseException`, so that no ``except Exception`` on its way (a call whose failure
    its caller takes as "no answer") swallows it. :func:`watched` raises its ``failure``."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(str(failure))
        self.failure = failure


RESIGNAL_S = 2.0
"""While the block of :func:`watched` has not ended after a failure was raised in it, it is
raised again this often (a call that catches every exception and goes on waiting)."""


@contextlib.contextmanager
def watched(
    find_failure: Callable[[], BaseException | None], interval: float = 0.5
) -> Iterator[None]:
    """Check the run's processes from a thread while the block runs, where the main thread may
    sit in a call it cannot leave (a client in distributed's reconnect to a scheduler that is
    gone, for its whole timeout); the first failure that ``find_failure`` returns is raised in
    the main thread, interrupting that call (SIGUSR1, whose handler raises
    :class:`PartFailed`, which leaves the block as the failure itself), and again every
    :data:`RESIGNAL_S` until the block ends.

    Outside the main thread (no signal handler there) the block runs unwatched. Once a
    failure was signalled, the handler stays (disarmed): the signal may reach this process only
    after the block, where SIGUSR1's default action would kill it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    found: list[BaseException] = []
    armed = threading.Event()
    armed.set()
    stop = threading.Event()

    def interrupt(signum: int, frame: Any) -> None:
        if found and armed.is_set():
            raise PartFailed(found[0])

    def watch(main: int) -> None:
        while not stop.wait(interval):
            failure = find_failure()
            if failure is not None:
                found.append(failure)
                break
        while found and armed.is_set():
            signal.pthread_kill(main, signal.SIGUSR1)
            stop.wait(RESIGNAL_S)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    thread = threading.Thread(target=watch, args=(threading.get_ident(),), daemon=True)
    thread.start()
    try:
        yield
    except PartFailed as failed:
        raise failed.failure from None
    finally:
        armed.clear()
        stop.set()
        thread.join()
        if not found:  # else the signal may still be on its way: the default would kill us
            signal.signal(signal.SIGUSR1, previous)


def wait_until(
    ready: Callable[[], bool],
    what: str,
    timeout: float,
    *,
    procs: ProcessSet | None = None,
    interval: float = 0.1,
    check: Callable[[], None] | None = None,
) -> None:
    """Poll ``ready`` every ``interval`` s until it is true: the launcher's one timeout loop.

    Parameters
    ----------
    ready
        The condition; a slow one (e.g. ``wait_for_workers(n, timeout=1)``) can be its own
        polling interval, with ``interval=0``.
    what
        What is awaited, for the messages.
    timeout
        Seconds before giving up.
    procs
        Processes that must not exit meanwhile.
    check
        Runs between polls (e.g. :meth:`Signals.check`, which raises on a signal).

    Raises
    ------
    PipelineError
        A process of ``procs`` exited first (with its log's tail), or ``timeout`` s passed;
        the message names what was awaited.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        if check is not None:
            check()
        dead = procs.failed() if procs is not None else None
        if dead is not None:
            raise PipelineError(
                f"{dead.label or dead.name} exited ({exit_in_words(dead.popen.returncode)}) "
                f"while waiting for {what}:\n{tail(dead.log)}"
            )
        if time.monotonic() > deadline:
            raise PipelineError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
