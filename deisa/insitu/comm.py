"""deisa-core's communicators, as the :class:`~deisa.Bridge` speaks to them.

deisa-core's ``ICommunicator`` has ``Get_rank``, ``Get_size``, ``gather``, ``bcast`` and
``barrier`` (deisa-dask adds ``Split`` and ``Free``): an mpi4py communicator is one, and so is
a test double over threads (deisa-dask's ``FakeComm``). Our Bridge also calls ``allgather``
(construction, checks) and, in ``mode="async"``, ``Iallgather``. An mpi4py communicator is
used as it is; any other gets the ``allgather`` that ``gather`` then ``bcast`` make, and
``mode="sync"`` (nothing here emulates a non-blocking collective).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CoreComm", "is_mpi_like", "speaking_comm", "undefined_color"]


def is_mpi_like(comm: Any) -> bool:
    """Whether ``comm`` has the collectives the Bridge calls in either mode (mpi4py's)."""
    return all(hasattr(comm, name) for name in ("allgather", "Iallgather", "bcast", "gather"))


def undefined_color() -> int:
    """The ``color`` of ``Split`` for a rank outside every group: ``MPI.UNDEFINED`` where
    mpi4py is installed, else deisa-dask's stand-in for it."""
    try:
        from mpi4py import MPI
    except ImportError:  # pragma: no cover - mpi4py is a dependency
        return 2147483647
    return int(MPI.UNDEFINED)


class CoreComm:
    """A deisa-core ``ICommunicator`` with the ``allgather`` the Bridge calls.

    Parameters
    ----------
    comm
        Anything with ``Get_rank``, ``Get_size``, ``gather(data, root)``,
        ``bcast(obj, root)`` and ``barrier()``; ``Split``/``Free`` where it has them.
    """

    def __init__(self, comm: Any) -> None:
        self.inner = comm

    def Get_rank(self) -> int:  # noqa: N802 (mpi4py's names)
        return int(self.inner.Get_rank())

    def Get_size(self) -> int:  # noqa: N802
        return int(self.inner.Get_size())

    def gather(self, data: Any, root: int = 0) -> list[Any] | None:
        result: list[Any] | None = self.inner.gather(data, root=root)
        return result

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self.inner.bcast(obj, root=root)

    def allgather(self, data: Any) -> list[Any]:
        everyone: list[Any] = self.inner.bcast(self.inner.gather(data, root=0), root=0)
        return everyone

    def barrier(self) -> None:
        self.inner.barrier()

    def Barrier(self) -> None:  # noqa: N802
        self.inner.barrier()

    def Split(self, color: Any, key: int = 0) -> Any:  # noqa: N802
        return self.inner.Split(color, key)

    def Free(self) -> None:  # noqa: N802
        free = getattr(self.inner, "Free", None)
        if free is not None:
            free()

    def __eq__(self, other: object) -> bool:
        inner = other.inner if isinstance(other, CoreComm) else other
        return inner is self.inner

    def __hash__(self) -> int:
        return id(self.inner)


def speaking_comm(comm: Any) -> Any:
    """``comm`` as the Bridge calls it: itself if mpi4py-like, else a :class:`CoreComm`."""
    return comm if is_mpi_like(comm) else CoreComm(comm)
