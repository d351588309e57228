"""An array's dimension names, as its metadata carries them between the Bridge, the scheduler
and the Adapter.

Shared by every process (imports nothing of deisa).
"""

from __future__ import annotations

from typing import Any

# -- an array's dimension names ------------------------------------------------------------
#
# An array's metadata (what ``deisa_open`` registers and ``deisa_meta``/``deisa_get`` return)
# holds "dims", the names of its spatial axes, only when the simulation gave them: an older
# Bridge sends none, an older Adapter ignores it. Likewise "time_length", the number of steps
# its time axis holds, only when the simulation declared one (ArraySpec's time_length).

TIME_DIM = "step"
"""The name of the time axis of a labelled (xarray) array; the step numbers are its coordinate."""


def check_dims(dims: Any, ndim: int, argument: str = "dims") -> tuple[str, ...] | None:
    """``dims`` as a tuple of names, one per spatial axis of an array of ``ndim`` of them.

    Parameters
    ----------
    dims
        ``None`` (no names), or a sequence of ``ndim`` distinct non-empty strings, none of them
        :data:`TIME_DIM`.
    ndim
        How many spatial axes the array has (the time axis excluded).
    argument
        How errors name ``dims`` (``"dims"``, ``"dims['gtemp']"``).

    Raises
    ------
    TypeError
        ``dims`` is not a sequence (a single string is not), or holds something else than
        strings.
    ValueError
        Not ``ndim`` names, an empty or repeated name, or :data:`TIME_DIM`.
    """
    if dims is None:
        return None
    if isinstance(dims, (str, bytes)) or not isinstance(dims, (list, tuple)):
        raise TypeError(
            f"{argument}={dims!r} must be a list or tuple of names, one per spatial axis "
            "(e.g. ['x', 'y'])"
        )
    names = tuple(dims)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{argument}={dims!r}: {name!r} is not a string")
        if not name:
            raise ValueError(f"{argument}={dims!r}: a dimension name cannot be empty")
    if len(names) != ndim:
        raise ValueError(
            f"{argument}={dims!r} gives {len(names)} name(s) for {ndim} spatial axes (the "
            "time axis is implicit: do not name it)"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{argument}={dims!r} names two axes {repeated[0]!r}")
    if TIME_DIM in names:
        raise ValueError(
            f"{argument}={dims!r}: {TIME_DIM!r} is the name of the time axis (the step "
            "numbers); give the spatial axes other names"
        )
    return names
