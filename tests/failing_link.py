"""A scheduler link that fails as a dead scheduler's connection does, for the registration
tests of both modes (tests/bridge/registration/test_registrar.py, tests/bridge/test_sync.py): no
MPI, no Dask."""

from __future__ import annotations

import threading
from typing import Any

from deisa.wire import ok


class RankZeroComm:
    """The communicator of a Bridge's rank 0, alone."""

    def Get_rank(self) -> int:  # noqa: N802 (mpi4py's name)
        return 0


class FailingLink:
    """A scheduler link whose ``register`` raises each of ``failures``, then answers (called on
    the Bridge's loop thread, counted under a lock)."""

    address = "tcp://127.0.0.1:8786"

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls = 0
        self.lock = threading.Lock()

    async def register(self, **_: Any) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
            if self.failures:
                raise self.failures.pop(0)
        return ok()

    def register_failed(self, name: str, step: int, exc: BaseException) -> str:
        return f"registering step {step} of {name!r} failed: {type(exc).__name__}: {exc}"
