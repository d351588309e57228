"""The files of a :class:`deisa.Replay` of one file per step: from a pattern with a ``{step}``
field (``"data_{step}.h5"``, decl_hdf5's ``"data_${step}.h5"``, ``"{step:05d}"``), a glob (the
last number of each name is its step) or a list of paths (steps ``0 .. n-1``); or of one file
per rank, from a pattern with a ``{rank}`` field (``"particles_${rank}.h5"``).
"""

from __future__ import annotations

import glob as globbing
import os
import re
from collections.abc import Sequence

from ._replay_array import ReplayError

__all__ = [
    "GLOB_CHARS",
    "RANK_FIELD",
    "STEP_FIELD",
    "files_of_glob",
    "files_of_list",
    "files_of_pattern",
]

#: a step field of a per-step pattern
STEP_FIELD = re.compile(r"\$?\{step(?::[^}]*)?\}")
#: a rank field of a per-rank pattern
RANK_FIELD = re.compile(r"\$?\{rank(?::[^}]*)?\}")
#: what makes a source a glob
GLOB_CHARS = re.compile(r"[*?\[]")


def files_of_list(source: Sequence[str | os.PathLike[str]]) -> tuple[list[str], list[int]]:
    """The files of a list, and their steps ``0 .. n-1``."""
    paths = [os.path.abspath(os.fspath(p)) for p in source]
    if not paths:
        raise FileNotFoundError("Replay was given an empty list of files")
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such file (a per-step file of Replay)")
    return paths, list(range(len(paths)))


def files_of_pattern(
    pattern: str, field: re.Pattern[str] = STEP_FIELD, word: str = "step"
) -> tuple[list[str], list[int]]:
    """The files matching ``pattern``'s ``field`` s (the step's, or the rank's) with one number,
    in the order of the numbers."""
    pattern = os.path.abspath(pattern)
    fields = field.findall(pattern)
    pieces = field.split(pattern)
    regex = re.compile("(\\d+)".join(re.escape(p) for p in pieces))
    found: dict[int, str] = {}
    for path in globbing.glob("*".join(globbing.escape(p) for p in pieces)):
        match = regex.fullmatch(path)
        if match is None or len(set(match.groups())) != 1:
            continue
        found.setdefault(int(match.group(1)), path)
    if not found:
        raise FileNotFoundError(
            f"no file matches the per-{word} pattern {pattern!r} ({len(fields)} {word} "
            f"field(s) read as the {word} number)"
        )
    steps = sorted(found)
    return [found[s] for s in steps], steps


def files_of_glob(pattern: str, explicit: Sequence[int] | None) -> tuple[list[str], list[int]]:
    """The files matching the glob ``pattern``, ordered by the last number of their names
    (needed unless ``explicit`` step numbers are given)."""
    paths = sorted(globbing.glob(os.path.abspath(pattern)))
    if not paths:
        raise FileNotFoundError(f"no file matches {os.path.abspath(pattern)!r}")
    numbers = [re.findall(r"\d+", os.path.splitext(os.path.basename(p))[0]) for p in paths]
    steps = [int(n[-1]) if n else None for n in numbers]
    if explicit is None and (None in steps or len(set(steps)) != len(steps)):
        raise ReplayError(
            f"the files matching {pattern!r} do not each hold a distinct step number in "
            "their names (the last number of the name, extension excluded): give "
            "steps=[...], or a pattern with a {step} field"
        )
    order = sorted(range(len(paths)), key=lambda i: steps[i] or 0)
    return [paths[i] for i in order], [steps[i] or 0 for i in order]
