"""What deisa hands to a loader, checked so that no other account's library can be loaded in
its place: the libraries themselves, the directories searched for them by name, and the paths
in ``PDI_PLUGIN_PATH``, ``ADIOS2_PLUGIN_PATH`` and ``LD_PRELOAD``.

A loader that searches a directory by name loads whatever it finds there first under that name,
whoever put it there; so a directory it searches must be writable by nobody else at all: the
sticky bit (``/tmp``), which keeps others from renaming what is there, does not keep them from
adding a name (:func:`search_dir_problem`). The names searched:

- PDI, in each ``PDI_PLUGIN_PATH`` directory: ``libpdi_<name>_plugin.so`` for each plugin a
  YAML names (deisa, mpi, decl_hdf5...);
- ADIOS2, in each ``ADIOS2_PLUGIN_PATH`` directory, for ``PluginLibrary`` ``L``: ``L``,
  ``L.so``, ``libL``, ``libL.so``, in that order (:func:`adios2_names`), the first found wins;
- the dynamic loader, in each ``RPATH``/``RUNPATH`` entry of a library or program, for each
  library it needs: an empty entry is the working directory, a relative one is taken from it.

``deisa-run`` checks all of it before it starts anything (locally, and when it writes a Slurm
job), ``deisa doctor`` reports it, and the job checks it again on its node with
``python -m deisa.launcher.libraries`` (:func:`main`). See ``docs/security.md``.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from .elf import BadElfError, NotElfError, search_paths
from .security import path_problem

PDI_PLUGIN_PATH, ADIOS2_PLUGIN_PATH, LD_PRELOAD = (
    "PDI_PLUGIN_PATH",
    "ADIOS2_PLUGIN_PATH",
    "LD_PRELOAD",
)
LOADER_VARIABLES = (PDI_PLUGIN_PATH, ADIOS2_PLUGIN_PATH, LD_PRELOAD)
"""The variables that tell a loader where to find a library (:func:`handed_problem`)."""
ADIOS2_ENGINE_LIBRARY = "deisa_adios2_engine"
"""The ``PluginLibrary`` of the deisa ADIOS2 engine (docs/adios2.md)."""


def adios2_names(library: str) -> list[str]:
    """The file names ADIOS2's plugin loader tries, in order, in each ``ADIOS2_PLUGIN_PATH``
    directory for the ``PluginLibrary`` ``library`` (adios2::helper::DynamicBinder, Linux)."""
    return [f"{prefix}{library}{suffix}" for prefix in ("", "lib") for suffix in ("", ".so")]


def _pdi_names(directory: Path) -> list[Path]:
    return sorted(directory.glob("libpdi_*_plugin.so"))


SEARCHED: dict[str, Callable[[Path], list[Path]]] = {
    PDI_PLUGIN_PATH: _pdi_names,
    ADIOS2_PLUGIN_PATH: lambda d: [d / name for name in adios2_names(ADIOS2_ENGINE_LIBRARY)],
}
"""For each plugin path variable: the files its loader may load from one of its directories,
that deisa checks (the directory itself must be private: nothing else can appear there)."""


def search_dir_problem(directory: Path) -> str | None:
    """Why another account could put a file that a loader finds by name in ``directory``, or
    ``None``.

    ``directory`` must be absolute, safe as a path (:func:`~.security.path_problem`: its
    ancestors may be sticky, as ``/tmp``), and writable by neither group nor others, sticky or
    not; where it does not exist, the same of the nearest existing ancestor, where another
    account could make it.
    """
    if not directory.is_absolute():
        return f"{directory} is relative: each process would search it from its working directory"
    problem = path_problem(directory)
    if problem is not None:
        return problem
    for part in (directory, *directory.parents):
        try:
            info = part.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{part}: {exc.strerror}"
        if info.st_mode & 0o022:
            mode = stat.S_IMODE(info.st_mode)
            made = "" if part == directory else f" (where {directory} would be made)"
            return (
                f"{part} is writable by other accounts (mode {mode:o}){made}: a loader searches "
                "it by name, and they could add a library there (the sticky bit does not stop "
                "that): use a directory only you can write"
            )
        return None
    return None


def library_problem(path: Path) -> str | None:
    """Why a library or program ``path`` handed to a loader could run another account's
    code, or ``None``: another account could change it (:func:`~.security.path_problem`), or
    one of its ``RPATH``/``RUNPATH`` entries is empty (the working directory), relative, or a
    directory another account can write (:func:`search_dir_problem`)."""
    problem = path_problem(path)
    if problem is not None:
        return problem
    try:
        tags = search_paths(path)
    except (FileNotFoundError, NotElfError):
        return None  # nothing a loader loads; the caller says so if it needs it
    except (OSError, BadElfError) as exc:
        return str(exc)
    origin = path.resolve().parent
    for tag, entries in tags.items():
        for entry in entries:
            if not entry:
                return (
                    f"{path}: its {tag} has an empty entry, which the loader reads as the working "
                    "directory: rebuild it (deisa's CMake builds with its install RPATH)"
                )
            expanded = entry.replace("${ORIGIN}", str(origin)).replace("$ORIGIN", str(origin))
            if not expanded.startswith("/"):
                return (
                    f"{path}: its {tag} entry {entry!r} is relative, taken from the working "
                    "directory by the loader: rebuild it with absolute (or $ORIGIN) entries"
                )
            if "$" in expanded:  # $LIB, $PLATFORM: the loader's own expansions
                continue
            problem = search_dir_problem(Path(expanded))
            if problem is not None:
                return f"{path}: its {tag} entry {entry}: {problem}"
    return None


SEPARATORS = {LD_PRELOAD: " :"}
"""What splits each variable's list (``LD_PRELOAD``: spaces and colons); colons otherwise."""


def found_problem(variable: str, library: Path) -> str | None:
    """Why ``library``, found by deisa to hand over through ``variable``, cannot be, or
    ``None``: for a plugin path, its directory is searched by name (:func:`search_dir_problem`);
    the library itself (:func:`library_problem`); a character in its path that splits
    ``variable``'s list (there is no escape)."""
    problem = None if variable == LD_PRELOAD else search_dir_problem(library.parent)
    problem = problem or library_problem(library)
    split = SEPARATORS.get(variable, ":")
    if problem is None and any(c in str(library) for c in split):
        where = " or ".join(map(repr, split))
        problem = (
            f"{variable} would split its path at the {where} in it (there is no escape): build "
            "or install it in a path without one"
        )
    return problem


def handed_problem(variable: str, value: str) -> str | None:
    """Why the value of ``variable`` (:data:`PDI_PLUGIN_PATH`, :data:`ADIOS2_PLUGIN_PATH`,
    :data:`LD_PRELOAD`) could make a loader load another account's library, or ``None``.

    A plugin path: each non-empty entry must be an absolute, private directory
    (:func:`search_dir_problem`) and each file its loader may load there
    (:data:`SEARCHED`) a safe library (:func:`library_problem`); PDI reads an empty entry as
    ``/``, ADIOS2 as the loader's own search. ``LD_PRELOAD``: each entry that is a path must be
    absolute and a safe library (a bare name is the loader's own search).
    """
    if variable == LD_PRELOAD:
        for entry in value.replace(" ", ":").split(":"):
            if "/" not in entry:
                continue
            if not entry.startswith("/"):
                return (
                    f"{LD_PRELOAD} entry {entry!r} is relative: each process would preload it "
                    "from its working directory"
                )
            problem = library_problem(Path(entry))
            if problem is not None:
                return f"{LD_PRELOAD} entry {entry}: {problem}"
        return None
    for entry in filter(None, value.split(os.pathsep)):
        directory = Path(entry)
        problem = search_dir_problem(directory)
        if problem is None:
            for library in SEARCHED[variable](directory):
                problem = library_problem(library) if library.exists() else None
                if problem is not None:
                    break
        if problem is not None:
            return f"{variable} entry {entry}: {problem}"
    return None


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m deisa.launcher.libraries [VARIABLE=VALUE | FILE]...``: check each
    ``VARIABLE`` (:func:`handed_problem`) and each library or program ``FILE``
    (:func:`library_problem`); exit 1 naming the first at fault, 0 (silent) if none is."""
    for arg in sys.argv[1:] if argv is None else argv:
        variable, equal, value = arg.partition("=")
        if equal and variable in (*SEARCHED, LD_PRELOAD):
            problem = handed_problem(variable, value)
        elif Path(arg).exists():
            problem = library_problem(Path(arg).absolute())
        else:
            problem = f"{arg}: no such file"
        if problem is not None:
            print(f"deisa: {problem}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
