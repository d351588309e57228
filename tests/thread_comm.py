"""An in-process communicator for tests: ranks are threads, with deisa-core's
``ICommunicator`` calls (``Get_rank``, ``Get_size``, ``gather``, ``bcast``, ``barrier``) and
``Split``, ``Free``. Every rank makes the same calls in the same order, as with MPI."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class _Shared:
    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size)
        self.slots: list[Any] = [None] * size
        self.lock = threading.Lock()
        self.splits: dict[Any, _Shared] = {}


class ThreadComm:
    """Rank ``rank`` of a communicator of ``shared.size`` threads."""

    def __init__(self, shared: _Shared, rank: int) -> None:
        self._shared = shared
        self._rank = rank
        self.freed = False

    @classmethod
    def world(cls, size: int) -> list[ThreadComm]:
        shared = _Shared(size)
        return [cls(shared, rank) for rank in range(size)]

    def Get_rank(self) -> int:  # noqa: N802
        return self._rank

    def Get_size(self) -> int:  # noqa: N802
        return self._shared.size

    def _all(self, value: Any) -> list[Any]:
        s = self._shared
        s.slots[self._rank] = value
        s.barrier.wait()
        values = list(s.slots)
        s.barrier.wait()
        return values

    def gather(self, data: Any, root: int = 0) -> list[Any] | None:
        values = self._all(data)
        return values if self._rank == root else None

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self._all(obj)[root]

    def barrier(self) -> None:
        self._shared.barrier.wait()

    def Split(self, color: Any, key: int = 0) -> ThreadComm | None:  # noqa: N802
        everyone = self._all((color, key))
        members = sorted((k, r) for r, (c, k) in enumerate(everyone) if c == color)
        with self._shared.lock:
            group = self._shared.splits.setdefault((color, tuple(members)), _Shared(len(members)))
        self.barrier()
        if self._rank == 0:
            self._shared.splits.clear()
        self.barrier()
        return ThreadComm(group, [r for _, r in members].index(self._rank))

    def Free(self) -> None:  # noqa: N802
        self.freed = True


def on_ranks(comms: list[ThreadComm], fn: Callable[[ThreadComm], T]) -> list[T]:
    """``fn(comm)`` on every rank at once (one thread each); the results in rank order."""
    with ThreadPoolExecutor(len(comms)) as pool:
        return list(pool.map(fn, comms))
