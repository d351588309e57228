"""An asyncio event loop in a daemon thread, for synchronous callers (MPI ranks, PDI)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Run coroutines on a private event loop from synchronous code.

    distributed's comms need a running loop; an MPI rank has none, and must not share one with
    a Client it does not have.
    """

    def __init__(self, name: str = "deisa-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._kept: list[concurrent.futures.Future[Any]] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and return its result (``TimeoutError`` after ``timeout``)."""
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), self.loop)
        return future.result()

    def spawn(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop; its future, which the caller may wait for or cancel."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def keep(self, future: concurrent.futures.Future[Any]) -> None:
        """Hold ``future``, a coroutine that runs until :meth:`cancel_kept` (rank 0's connection,
        registrar and watches run until the close, or until the Bridge detaches)."""
        self._kept.append(future)

    def cancel_kept(self) -> None:
        """Cancel the coroutines :meth:`keep` holds."""
        for future in self._kept:
            future.cancel()

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()
