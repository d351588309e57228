"""Where the blocks of streamed arrays live, as the stream reported it.

The Bridge tells the scheduler which worker holds each block it publishes; the scheduler
extension hands that record to the :class:`~deisa.Adapter` with the step's keys. The
Adapter files it here, and :func:`deisa.split` reads it instead of asking the scheduler
again (``who_has``, ``nthreads``). An entry lives exactly as long as the future of its block in
this process: when the step's array is dropped, its entries go with it. Arrays that did not come
from a stream have no entry, and the splitter asks the scheduler as before.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_lock = threading.Lock()
_workers: dict[Hashable, str] = {}
_nthreads: dict[str, int] = {}


@dataclass(frozen=True)
class Locations:
    """Holder of every block asked for, and the threads of those holders."""

    workers: dict[Hashable, str]
    nthreads: dict[str, int]


def record(
    futures: Mapping[Hashable, Any], workers: Iterable[str], nthreads: Mapping[str, int]
) -> None:
    """File the holder of each future's key; the entry is dropped with the future."""
    with _lock:
        _nthreads.update(nthreads)
        for (key, future), worker in zip(futures.items(), workers, strict=True):
            _workers[key] = worker
            weakref.finalize(future, _forget, key)


def _forget(key: Hashable) -> None:
    with _lock:
        _workers.pop(key, None)


def lookup(keys: Iterable[Hashable]) -> Locations | None:
    """Holders of all ``keys``, or ``None`` if any of them was not filed by a stream."""
    with _lock:
        try:
            workers = {key: _workers[key] for key in keys}
        except KeyError:
            return None
        threads = {w: _nthreads.get(w, 1) for w in set(workers.values())}
    return Locations(workers, threads)
