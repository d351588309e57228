"""The names deisa-core's backend (:mod:`deisa.insitu`) keeps on the scheduler: a simulation's
control stream and its feedback values.

Shared by both halves of :mod:`deisa.insitu` and the scheduler (imports nothing of deisa).
"""

from __future__ import annotations

import json

# -- deisa-core's interface (deisa.insitu): the names it keeps on the scheduler ----------------
# A simulation of deisa.insitu.Bridge opens, last, a one-element-per-rank array whose name lists
# its arrays (the analytics' handshake and end of run); its feedback values are steering values.

INSITU_CONTROL_PREFIX = "deisa.insitu:"
"""The name of a simulation's control stream: this prefix, then its arrays as a JSON list."""

INSITU_GO = "deisa.insitu/go"
"""The steering value the analytics (``deisa.insitu.Deisa``) sets: the Bridges may start."""


def insitu_control_name(arrays: list[str]) -> str:
    """The control stream of a simulation publishing ``arrays``."""
    return INSITU_CONTROL_PREFIX + json.dumps(sorted(arrays), separators=(",", ":"))


def insitu_control_arrays(name: str) -> list[str] | None:
    """The arrays a control stream's ``name`` lists, or ``None`` if it is no control stream."""
    if not name.startswith(INSITU_CONTROL_PREFIX):
        return None
    try:
        arrays = json.loads(name[len(INSITU_CONTROL_PREFIX) :])
    except ValueError:
        return None
    return [str(a) for a in arrays] if isinstance(arrays, list) else None


def insitu_index_name(key: str) -> str:
    """The steering value listing the timesteps for which ``key`` was set (an int64 array)."""
    return f"deisa.insitu/{key}"


def insitu_value_name(key: str, timestep: int) -> str:
    """The steering value holding ``key`` at ``timestep``."""
    return f"deisa.insitu/{key}@{timestep}"
