"""What every generation of the released DEISA client shares here: its one warning, its Dask
client, and its waits on the simulation's arrays (:mod:`deisa.analysis.compat`)."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

from distributed import Client

from ._live_time_axis import materialize_graphs
from ._released import GUIDE
from .adapter import Adapter

_warned = False
_OWN_MODULES = ("deisa.analysis.compat", "deisa.analysis._compat")


def announce(call: str) -> None:
    """One :class:`FutureWarning` per process, at the first object of the released API,
    attributed to the line of the user's script that made it."""
    global _warned
    if _warned:
        return
    _warned = True
    frame: FrameType | None = sys._getframe(1)
    level = 2  # the caller of announce
    while frame is not None and str(frame.f_globals.get("__name__")).startswith(_OWN_MODULES):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"{call}: a released DEISA client API (0.3.x, dask_interface, pdidev/deisa main), "
        "kept so that existing analytics run; "
        f"{GUIDE} gives each call's form with deisa.Adapter",
        FutureWarning,
        stacklevel=level,
    )


class CompatClient(Client):
    """A :class:`distributed.Client` for the released scripts.

    Its ``compute`` and ``persist`` accept ``release=``, an argument of the DEISA fork of
    distributed that released scripts pass: ignored, since a step's data is released here when
    nothing references it any more (``del gt``). Before a computation is sent (``compute``,
    ``persist``, and ``get``, which ``dask.compute`` and ``.compute()`` call), the whole time
    axes it holds (:mod:`deisa.analysis._live_time_axis`) read their steps.
    """

    def compute(self, collections: Any, *args: Any, release: Any = None, **kwargs: Any) -> Any:
        materialize_graphs(collections)
        return super().compute(collections, *args, **kwargs)

    def persist(self, collections: Any, *args: Any, release: Any = None, **kwargs: Any) -> Any:
        materialize_graphs(collections)
        return super().persist(collections, *args, **kwargs)

    def get(self, dsk: Any, keys: Any, *args: Any, **kwargs: Any) -> Any:
        materialize_graphs(dsk)
        return super().get(dsk, keys, *args, **kwargs)


def open_names(adapter: Adapter, timeout: float | None) -> list[str]:
    """The arrays the simulation has opened, once it has opened one (``timeout`` seconds at
    most; ``None``: forever)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        streams = adapter.stats()["streams"]
        names = sorted(n for n, s in streams.items() if s["run"] is not None)
        if names:
            return names
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"no simulation opened an array within {timeout} s")
        time.sleep(0.1)


def wait_until_closed(adapter: Adapter, delay: float, seen: Callable[[], bool]) -> None:
    """Return once the simulation has opened arrays and closed every one, checking every
    ``delay`` seconds; ``seen()`` says whether this analytics already received something
    (a run that ended before the first check)."""
    started = False
    while True:
        streams = adapter.stats()["streams"]
        running = [n for n, s in streams.items() if s["run"] is not None and not s["closed"]]
        started = started or any(s["run"] is not None for s in streams.values()) or seen()
        if started and not running:
            return
        time.sleep(delay)
