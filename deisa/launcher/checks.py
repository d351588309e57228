"""The checks of the launcher's option values, one value at a time.

Each check takes the name of the value for its message (the option's flag, or where its key
came from: :meth:`deisa.launcher.defaults.Defaults.origin`) and the value, and returns the
value as the settings hold it or raises a one-line :class:`~deisa.launcher.defaults.UsageError`.
:data:`deisa.launcher.options.OPTIONS` names the check of each option; counts and durations use
the constraints of the Bridge's options (:mod:`deisa.bridge.options`), so that ``deisa-run``
refuses what :class:`deisa.Bridge` would.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bridge.options import BridgeOptionError, BridgeOptions, Constraint, Count, Positive
from .defaults import UsageError
from .libraries import library_problem, search_dir_problem
from .security import output_problem, path_problem

# finite: the Slurm job writes it out and waits for the scheduler a whole number of seconds
SECONDS = Positive("seconds", finite=True)
STEP_SECONDS = Positive("seconds", none="as long as the simulation runs", finite=True)


@dataclass(frozen=True)
class Grammar:
    """A string option that the job script carries as it is (an ``#SBATCH`` value, a name in
    a command): the whole of it must match :attr:`pattern`, which admits no newline and no
    shell metacharacter.

    Attributes
    ----------
    pattern
        Regular expression (ASCII) that the whole value matches (:func:`re.fullmatch`: a
        trailing newline fails too).
    what
        The grammar in words, for the error message.
    none
        Whether ``None`` (the option unset: Slurm's default) is allowed.
    """

    pattern: str
    what: str
    none: bool = False

    def check(self, name: str, value: Any) -> str | None:
        """``value``, if it matches; ``name`` (the option, or its key in the defaults file)
        and the value in the :class:`UsageError` otherwise."""
        if value is None and self.none:
            return None
        if not isinstance(value, str) or re.fullmatch(self.pattern, value, re.ASCII) is None:
            raise UsageError(f"{name}={value!r} must be {self.what}")
        return value


_NAME = r"[A-Za-z0-9_.+-]+"
_PLAIN = "letters, digits, _ . - +"

SLURM_GRAMMARS: dict[str, Grammar] = {
    "job_name": Grammar(_NAME, f"a plain name ({_PLAIN})"),
    "partition": Grammar(
        rf"{_NAME}(,{_NAME})*", f"partition names ({_PLAIN}), several separated by commas", True
    ),
    "account": Grammar(_NAME, f"a plain name ({_PLAIN})", True),
    # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit
    "time": Grammar(
        r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}|(?i:unlimited|infinite)",
        "a Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED or "
        "INFINITE (a string in YAML: quote it)",
    ),
    "mpi": Grammar(r"[A-Za-z0-9_]+", "an srun --mpi plugin name (letters, digits, _: pmix, pmi2)"),
    # Linux: at most 15 characters; Dask and Open MPI take it as they are given it
    "interface": Grammar(
        r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}",
        "a network interface name (ib0, eth0: at most 15 letters, digits, _ . -)",
        True,
    ),
}
"""The grammars of the ``slurm`` options written into the job script as they are."""

ARRAY = Grammar(
    r"[A-Za-z_][A-Za-z0-9_]*",
    "an identifier: letters, digits and _, not starting with a digit",
)
"""The grammar of ``--array``: no ``$`` (a PDI expression), no regular expression (the deisa
plugin's dataset names may be ones), no ``-`` (Dask keys join names with it), no shell word."""


def checked(constraint: Constraint, name: str, value: Any) -> Any:
    """``value`` checked by ``constraint`` (one of the Bridge options' constraints), named
    ``name`` in the :class:`UsageError`."""
    try:
        return constraint.check(name, value)
    except BridgeOptionError as exc:
        raise UsageError(str(exc)) from None


def positive(name: str, value: Any) -> int:
    """``value`` if it is a positive integer; ``name`` in the error."""
    count: int = checked(Count(), name, value)
    return count


def seconds(name: str, value: Any) -> float:
    """``value`` if it is a finite positive number of seconds; ``name`` in the error."""
    duration: float = checked(SECONDS, name, value)
    return duration


def pair(name: str, value: Any) -> tuple[int, int] | None:
    """Two positive integers (``[rows, columns]``), or ``None``; ``name`` in the error."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise UsageError(f"{name}={value!r} must be two positive integers")
    return (positive(name, value[0]), positive(name, value[1]))


def parse_buffer_nb(value: int | str | None, name: str = "--buffer-nb") -> int | None:
    """``--buffer-nb``: a positive integer, or ``None`` (unbounded) for ``none`` or ``null``.

    ``0`` is refused, as by :class:`deisa.Bridge` (it meant "unbounded" for ``deisa-run``
    before 0.1.0; write ``none``).

    Raises
    ------
    UsageError
        Neither.
    """
    if isinstance(value, str):
        try:
            value = BridgeOptions.constraint("buffer_nb").parse(value)  # int or None
        except ValueError:
            raise UsageError(f"{name} {value!r}: a positive integer or 'none'") from None
    try:
        return BridgeOptions(buffer_nb=value).buffer_nb  # type: ignore[arg-type]
    except BridgeOptionError as exc:
        raise UsageError(f"{name} {value!r}: {exc}; write 'none' for unbounded") from None


def parse_eps(value: Any, name: str = "--stop-when-converged") -> float | None:
    """``--stop-when-converged``: a positive number, or ``None`` (never stop the simulation).

    Raises
    ------
    UsageError
        Anything else, naming ``name``.
    """
    eps: float | None = checked(Positive(none="never"), name, value)
    return eps


def parse_memory_limit(value: Any, name: str = "--memory-limit") -> int | str | None:
    """``--memory-limit``: each worker's memory limit in bytes (``4GiB``, ``500MB``, an
    integer), ``auto`` (sized by :func:`deisa.launcher.dask_processes.memory_limit`), or
    ``None`` for ``none``/``null`` (no limit: the workers never pause nor spill for memory).

    Raises
    ------
    UsageError
        Anything else, or a size that is not positive.
    """
    from dask.utils import parse_bytes

    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        return None
    if isinstance(value, str) and value.lower() == "auto":
        return "auto"
    try:
        if isinstance(value, bool):
            raise ValueError
        size = parse_bytes(value) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"{name}={value!r} must be a size (4GiB, 500MB, bytes), auto or none"
        ) from None
    if size <= 0:
        raise UsageError(f"{name}={value!r} must be a positive size")
    return size


def parse_step_timeout(value: Any, name: str = "--step-timeout") -> float | None:
    """``--step-timeout``: a positive number of seconds, or ``None`` (``none``, ``null``: wait
    for a step as long as the simulation runs).

    Raises
    ------
    UsageError
        Anything else, naming ``name``.
    """
    if isinstance(value, str):
        try:
            value = STEP_SECONDS.parse(value)
        except ValueError:
            raise UsageError(
                f"{name}={value!r} must be a positive number of seconds or none"
            ) from None
    duration: float | None = checked(STEP_SECONDS, name, value)
    return duration


#: what ``--worker-preload pca`` names: the PCA's warm-up, a module of no public API
PCA_WARM_UP = "deisa.analysis.warm"


def parse_preload(value: Any, name: str = "--worker-preload", *, builtin: bool) -> str | None:
    """``--worker-preload``: the module the workers preload, or ``None``.

    ``"pca"`` is :data:`PCA_WARM_UP`; ``"auto"`` is ``"pca"`` when the analytics is the
    built-in PCA (``builtin``) and nothing for a user's ``--analytics``, whose stack deisa
    does not know; ``None`` or ``"none"``: nothing; any other value is a module name (or a
    ``.py`` path) handed to ``dask worker --preload``.

    Raises
    ------
    UsageError
        Not a non-empty string, naming ``name``.
    """
    value = preload(name, value)
    if value == "auto":
        return PCA_WARM_UP if builtin else None
    return PCA_WARM_UP if value == "pca" else value


def preload(name: str, value: Any) -> str | None:
    """``--worker-preload`` as given: ``auto``, ``pca``, a module name, or ``None`` (``none``);
    :func:`parse_preload` resolves ``auto`` and ``pca``."""
    if value is None or value == "none":
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{name}={value!r} must be auto, pca, none or a module name")
    return value


def output(label: str, value: Any) -> Path:
    """``--output``, absolute, refused where another account could tamper with the run's
    files, at any of its existing parents (:func:`~deisa.launcher.security.output_problem`)."""
    if not isinstance(value, (str, Path)) or not str(value):
        raise UsageError(f"{label}={value!r} must be a directory")
    problem = output_problem(Path(value).absolute())
    if problem is not None:
        raise UsageError(f"{label}: {problem}")
    return Path(value).resolve()


def workdir(label: str, value: Any) -> str:
    """``--workdir``: a path on one line (:func:`one_line`), refused where another account
    could change it or any of its existing parents (:func:`~deisa.launcher.security.path_problem`):
    the job runs there."""
    path = one_line(label, value)
    safe_path(label, Path(path))
    return path


def flag(label: str, value: Any) -> bool:
    """``value`` if it is a boolean (``true``/``false`` in YAML, ``True``/``False`` in a
    ``DASK_DEISA__...`` variable)."""
    if not isinstance(value, bool):
        raise UsageError(f"{label}={value!r} must be true or false")
    return value


def array(label: str, name: Any) -> str:
    """``--array``, by :data:`ARRAY`."""
    checked_name = ARRAY.check(label, name)
    assert checked_name is not None  # ARRAY takes no None
    return checked_name


def one_line(label: str, path: Any) -> str:
    """``path`` if it is a string without a newline: it goes on an ``#SBATCH`` line, which
    sbatch ends at a newline, quoted or not."""
    if not isinstance(path, str) or not path or "\n" in path:
        raise UsageError(f"{label}={path!r} must be a path on one line (#SBATCH lines end there)")
    return path


def words(label: str, values: Any) -> tuple[str, ...]:
    """``values`` (``None``: none), if they are strings: the job script quotes them, whatever
    they hold."""
    if values is None:
        return ()
    if not isinstance(values, (list, tuple)) or not all(isinstance(w, str) and w for w in values):
        raise UsageError(f"{label}={values!r} must be non-empty strings")
    return tuple(values)


def interpreter(label: str, python: Any) -> str | None:
    """``--python``: ``None`` (the interpreter generating the script), or an interpreter's
    path, made absolute (a bare name: the one ``PATH`` finds here), refused where another
    account could change the file or any of its existing parents (:func:`safe_path`): the job
    runs it, and the job checks it again."""
    if python is None:
        return None
    if not isinstance(python, str) or not python:
        raise UsageError(f"{label}={python!r} must be a path")
    found = python if "/" in python else shutil.which(python)
    if found is None:
        raise UsageError(f"{label}={python!r} is not found on PATH: give its path")
    return str(safe_path(label, Path(found).absolute()))


def safe_path(label: str, path: Path) -> Path:
    """``path``, unless another account could change it or one of its existing parents
    (:func:`~deisa.launcher.security.path_problem`): then a :class:`UsageError` naming
    ``label`` and the part at fault."""
    problem = path_problem(path)
    if problem is not None:
        raise UsageError(f"{label}: {problem}")
    return path


def safe_library(label: str, path: Path) -> Path:
    """``path``, a library or program a loader is handed, unless another account could change
    it or make it load a library of theirs (its ``RPATH``/``RUNPATH``:
    :func:`~deisa.launcher.libraries.library_problem`): then a :class:`UsageError` naming
    ``label`` and what is at fault."""
    problem = library_problem(path)
    if problem is not None:
        raise UsageError(f"{label}: {problem}")
    return path


def private_dir(label: str, directory: Path) -> Path:
    """``directory``, where a loader searches libraries by name, unless another account can
    write it, sticky bit or not (:func:`~deisa.launcher.libraries.search_dir_problem`): then a
    :class:`UsageError` naming ``label``."""
    problem = search_dir_problem(directory)
    if problem is not None:
        raise UsageError(f"{label}: {problem}")
    return directory


def command_words(command: Any, label: str = "--analytics") -> list[str]:
    """``command`` split as a shell would (no shell runs it).

    Raises
    ------
    UsageError
        An empty command, or one that shlex cannot split (an open quote).
    """
    try:
        split = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"{label} {command!r}: {exc}") from None
    if not split:
        raise UsageError(f"{label}: an empty command")
    return split


def command(label: str, value: Any) -> str | None:
    """``--analytics``: ``None``, or a command that :func:`command_words` can split."""
    if value is not None:
        command_words(value, label)
    return value
