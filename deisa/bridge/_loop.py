"""An asyncio event loop in a daemon thread, for synchronous callers (MPI ranks, PDI).

Runs in a simulation rank. :class:`LoopThread` is built by the Bridge on the rank's main thread
(the simulation's, or PDI's), which then calls :meth:`~LoopThread.run`, :meth:`~LoopThread.spawn`,
:meth:`~LoopThread.soon` and :meth:`~LoopThread.batched`; everything those hand over runs on the
loop's own daemon thread (``deisa-bridge-<rank>``): the sends to the workers, rank 0's calls to
the scheduler and its registrar, the notices, the shared-memory channels' replies. That thread
never calls MPI (only the main thread does). Imports the standard library only.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import ctypes
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

logger = logging.getLogger(__name__)


def _gil_holding_write() -> Callable[[int, bytes, int], int] | None:
    """libc's ``write`` called with the GIL held (``ctypes.PyDLL``), or ``None``."""
    try:
        write = ctypes.PyDLL(None).write
    except (OSError, AttributeError):
        return None
    write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
    write.restype = ctypes.c_ssize_t
    return write


_WRITE = _gil_holding_write()
_ONE = (1).to_bytes(8, "little")  # an eventfd counts up by what is written


class LoopThread:
    """Run coroutines on a private event loop from synchronous code.

    distributed's comms need a running loop; an MPI rank has none, and must not share one with
    a Client it does not have.

    Inside :meth:`batched` (the Bridge's ``publish``), the calling thread's :meth:`soon` and
    :meth:`spawn_soon` wait until the batch ends, then reach the loop together, woken once by a
    write that keeps the GIL: the loop's work for a publish (hand the block to the worker,
    register a step) then runs after the call returns, not inside it. On a rank that has one
    core, a wake-up mid-call let the loop thread take the GIL and the core at the caller's next
    system call, three times per publish (docs/benchmarks.md, section 16).
    """

    def __init__(self, name: str = "deisa-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._calls: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._batching: int | None = None  # the thread inside batched(), if any
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.loop.add_reader(self._wake_fd, self._drain)
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        # the loop thread's threading.get_ident(): on_loop compares with it, and so may a caller
        # on a send's completion, without a call (the registrar)
        self.thread_id = self._thread.ident
        self._kept: list[concurrent.futures.Future[Any]] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and return its result (``TimeoutError`` after ``timeout``)."""
        return self.spawn(asyncio.wait_for(coro, timeout)).result()

    def spawn(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop; its future, which the caller may wait for or cancel.
        After the calls held so far (:meth:`batched`), if any; from the loop thread, without
        a wake-up (as :meth:`soon`)."""
        self._hand_over()
        if self.on_loop:
            future: concurrent.futures.Future[T] = concurrent.futures.Future()
            self.loop.call_soon(self._start, coro, future)
            return future
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def spawn_soon(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """:meth:`spawn`, at the end of the caller's :meth:`batched` if it is in one (do not
        wait for the future before :meth:`flush`)."""
        if not self._deferring():
            return self.spawn(coro)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.append((self._start, (coro, future)))
        return future

    def soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` on the loop (``call_soon_threadsafe``), at the end of the caller's
        :meth:`batched` if it is in one; from the loop thread itself, ``call_soon`` (no
        wake-up to write and read: a send's completion tells rank 0 so, once a step)."""
        if self._deferring():
            self._calls.append((fn, args))
            return
        self._hand_over()
        if self.on_loop:
            self.loop.call_soon(fn, *args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    @property
    def on_loop(self) -> bool:
        """Whether the caller is the loop thread."""
        return threading.get_ident() == self.thread_id

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Hold this thread's :meth:`soon` and :meth:`spawn_soon` calls until the block ends
        (or :meth:`flush`); they then reach the loop in the order they were made."""
        if self._batching is not None:  # nested: the outer batch flushes
            yield
            return
        self._batching = threading.get_ident()
        try:
            yield
        finally:
            self._batching = None
            self.flush()

    def flush(self) -> None:
        """Hand the calls held so far to the loop (before waiting for what they do), in a
        wake-up that keeps the GIL."""
        if not self._calls:
            return
        if _WRITE is None or _WRITE(self._wake_fd, _ONE, len(_ONE)) != len(_ONE):
            self._hand_over()  # the eventfd could not count: the usual way

    def _hand_over(self) -> None:
        """Queue the calls held so far on the loop now, ahead of what the caller queues next
        (the eventfd's wake-up reaches the loop only at its next turn, behind it)."""
        if self._calls:
            self.loop.call_soon_threadsafe(self._drain)

    def _deferring(self) -> bool:
        return self._batching is not None and self._batching == threading.get_ident()

    def _drain(self) -> None:
        """Loop thread: run the calls held, in order."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._wake_fd)
        while self._calls:
            fn, args = self._calls.popleft()
            try:
                fn(*args)
            except Exception:
                logger.exception("deisa bridge: a call on the loop failed")

    def _start(self, coro: Coroutine[Any, Any, T], future: concurrent.futures.Future[T]) -> None:
        """Loop thread: start ``coro`` for :meth:`spawn_soon`'s ``future`` (its outcome, or its
        cancellation either way)."""
        if future.cancelled():
            coro.close()
            return
        task = self.loop.create_task(coro)

        def outcome(done: asyncio.Task[T]) -> None:
            if done.cancelled():
                future.cancel()
            elif future.set_running_or_notify_cancel():
                exc = done.exception()
                if exc is None:
                    future.set_result(done.result())
                else:
                    future.set_exception(exc)

        def cancelled(done: concurrent.futures.Future[T]) -> None:
            if done.cancelled() and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(task.cancel)

        task.add_done_callback(outcome)
        future.add_done_callback(cancelled)

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
            self._hand_over()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.remove_reader(self._wake_fd)
            self.loop.close()
            os.close(self._wake_fd)
