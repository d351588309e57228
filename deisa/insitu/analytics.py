"""deisa-core's ``IDeisa`` on our :class:`~deisa.Adapter`: ``deisa.insitu.Deisa``.

An analytics written for deisa-dask (``Deisa()``, ``register_callback``/``@register`` with
windows and AND/OR triggers, ``execute_callbacks``, ``set``) changes its import and reads the
streams of this project's Bridges:

- the handshake: the simulation's ``deisa.insitu.Bridge`` opens, last, a control stream whose
  name lists its arrays (:func:`deisa.wire.insitu_control_arrays`); ``Deisa``, with
  ``wait_for_go``, waits for that stream, and :meth:`Deisa.execute_callbacks` sets the
  steering value :data:`deisa.wire.INSITU_GO` that the Bridges wait for (deisa-core's
  contract: it "unblocks the simulation"), so no step comes before the callbacks registered;
- one :class:`~deisa.Adapter` (one consumer) reads every array of the simulation, one thread
  per array iterating :meth:`~deisa.ArrayDescriptor.items`; each step becomes deisa-core's
  ``DeisaArray`` (the same dask array, its blocks where the workers received them, ``.t`` the
  step) and goes through every callback registered on its array (:mod:`.triggers`: windows,
  AND/OR); a callback due runs on a thread of its own, its calls in step order;
- ``set(key, value, timestep)`` is steering (:meth:`deisa.Adapter.set`): the value under
  :func:`deisa.wire.insitu_value_name`, the timesteps set so far under
  :func:`deisa.wire.insitu_index_name`; the Bridge's ``get`` reads them.

``docs/ecosystem.md`` lists each difference with deisa-dask.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import dask.array as da
import numpy as np
from distributed import Client

from ..analysis import steering
from ..analysis.adapter import Adapter
from ..wire import (
    INSITU_GO,
    insitu_control_arrays,
    insitu_index_name,
    insitu_value_name,
)
from .triggers import DEFAULT_SLIDING_WINDOW_SIZE, Registration, parse_windows

try:
    from deisa.core import DeisaArray, IDeisa
except ImportError as exc:  # deisa-core is optional; this module is its backend
    raise ImportError(
        "deisa.insitu speaks deisa-core's interface and needs it: pip install deisa-core "
        "(or pip install 'deisa-insitu[core]')"
    ) from exc

__all__ = ["DEFAULT_SLIDING_WINDOW_SIZE", "Deisa", "build_deisa_array", "connect"]

logger = logging.getLogger(__name__)

READ_WAIT_S = 1.0
"""How long a reader waits on the scheduler for a step before it looks whether to stop."""

UNKNOWN_GRACE_S = 10.0
"""How long ``register_callback`` waits for an array it does not know to be opened."""


def build_deisa_array(darr: da.Array, timestep: int) -> Any:
    """deisa-core's ``DeisaArray`` of step ``timestep``: ``darr``'s graph, blocks and, for a
    step of a stream, its block locations (:func:`deisa.split` keeps using them)."""
    array = DeisaArray(
        t=timestep,
        dask=darr.dask,
        name=darr.name,
        chunks=darr.chunks,
        dtype=darr.dtype,
        meta=darr._meta,
        shape=darr.shape,
    )
    locations = getattr(darr, "locations", None)
    if locations is not None:
        setattr(array, "locations", locations)  # noqa: B010 (deisa-core's class has none)
    return array


def connect(scheduler_file: str | None = None, timeout: float = 10) -> Client:
    """A client on ``scheduler_file``, else ``$DEISA_SCHEDULER_FILE``, else deisa-dask's
    ``$DEISA_DASK_SCHEDULER_ADDRESS`` (an address or a scheduler file, by default
    ``tcp://127.0.0.1:8787``).

    Raises
    ------
    ValueError
        An address that is neither (as deisa-dask).
    """
    path = scheduler_file or os.environ.get("DEISA_SCHEDULER_FILE", "")
    if path:
        return Client(scheduler_file=path, timeout=timeout)
    address = os.environ.get("DEISA_DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:8787")
    try:
        return Client(address=address, timeout=timeout)
    except ValueError:
        if os.path.isfile(address):
            return Client(scheduler_file=address, timeout=timeout)
        raise ValueError(
            f"DEISA_DASK_SCHEDULER_ADDRESS={address!r}: give the address of the scheduler, or a "
            "scheduler file"
        ) from None


def _log_exception(exception: BaseException) -> None:
    """deisa-dask's default exception handler: log it."""
    logger.error("deisa.insitu: exception thrown by a callback: %r", exception)


class Deisa(IDeisa):
    """deisa-core's ``IDeisa`` on an :class:`~deisa.Adapter`.

    Parameters
    ----------
    feedback_queue_size
        The most timesteps kept per ``set`` key (the oldest are cleared).
    client
        A connected :class:`distributed.Client` to use (not closed by :meth:`close`); by
        default one is connected (:func:`connect`).
    scheduler_file
        Where to connect when no ``client`` is given.
    wait_for_go
        Wait in the constructor for a simulation's Bridges (their control stream), as deisa-dask
        does. The Bridges' own go comes from :meth:`execute_callbacks`.
    timeout
        Seconds to connect the client (deisa-dask's meaning).
    go_timeout
        Seconds to wait for the Bridges (here and in :meth:`execute_callbacks`); ``None``:
        forever.

    Attributes
    ----------
    client : distributed.Client
    adapter : deisa.Adapter
        The consumer of every array of the simulation.
    arrays_metadata : dict
        Per array of the simulation: ``global_shape``, ``chunk_shape``, ``dtype`` once known.
    """

    def __init__(
        self,
        feedback_queue_size: int = 1024,
        *args: Any,
        client: Client | None = None,
        scheduler_file: str | None = None,
        wait_for_go: bool = True,
        timeout: float = 10,
        go_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(feedback_queue_size)
        self.feedback_queue_size = int(feedback_queue_size)
        self._owns_client = client is None
        self.client = connect(scheduler_file, timeout) if client is None else client
        self.adapter = Adapter(self.client, timeout=READ_WAIT_S)
        self.go_timeout = go_timeout
        self.arrays_metadata: dict[str, dict[str, Any]] = {}
        self._controls: set[str] = set()  # the control streams followed
        self._readers: dict[str, threading.Thread] = {}
        self._callbacks: dict[str, Registration] = {}
        self._executors: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._closed = False
        try:
            if wait_for_go:
                self._wait_for_simulation()
            else:
                self._refresh()
        except BaseException:
            self.close()
            raise

    # -- the simulation ------------------------------------------------------------------------

    def _refresh(self) -> bool:
        """Follow the control streams open now: their arrays get a reader. Whether one is."""
        streams = self.adapter.stats()["streams"]
        for name, stream in sorted(streams.items()):
            arrays = insitu_control_arrays(name)
            if arrays is None or stream["run"] is None or stream["closed"]:
                continue
            with self._lock:
                self._controls.add(name)
                for array in arrays:
                    self.arrays_metadata.setdefault(array, {})
                    if array not in self._readers:
                        descriptor = self.adapter[array]  # made here, read by its thread only
                        thread = threading.Thread(
                            target=self._read,
                            args=(array, descriptor),
                            name=f"deisa-insitu-{array}",
                            daemon=True,
                        )
                        self._readers[array] = thread
                        thread.start()
        return bool(self._controls)

    def _wait_for_simulation(self) -> None:
        started = time.monotonic()
        while not self._refresh():
            if self.go_timeout is not None and time.monotonic() - started > self.go_timeout:
                raise TimeoutError(f"no simulation's Bridges within go_timeout={self.go_timeout}s")
            time.sleep(0.1)

    def _read(self, name: str, descriptor: Any) -> None:
        """A reader thread: every step of ``name``, to the end of its stream."""
        while not self._stop.is_set():
            try:
                for step, array in descriptor.items():
                    if not self.arrays_metadata.get(name):
                        self.arrays_metadata[name] = {
                            "global_shape": descriptor.shape,
                            "chunk_shape": tuple(c[0] for c in descriptor.chunks),
                            "dtype": str(descriptor.dtype),
                        }
                    self._arrive(name, step, build_deisa_array(array, step))
                    if self._stop.is_set():
                        return
                logger.info("deisa.insitu: end of %r", name)
                return
            except TimeoutError:
                continue  # no step within READ_WAIT_S: look at the stop flag
            except Exception:
                if not self._stop.is_set():
                    logger.exception("deisa.insitu: reading %r failed", name)
                return

    def _arrive(self, name: str, step: int, item: Any) -> None:
        due: list[tuple[Registration, list[list[Any]]]] = []
        with self._lock:
            for registration in list(self._callbacks.values()):
                if name not in registration.names:
                    continue
                try:
                    windows = registration.arrive(name, step, item)
                except Exception as exc:
                    self._handle(registration, exc)
                    continue
                if windows is not None:
                    due.append((registration, windows))
            for registration, windows in due:
                executor = self._executors[registration.callback_id]
                future = executor.submit(self._run, registration, windows)
                self._pending.add(future)
                future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def _run(self, registration: Registration, windows: list[list[Any]]) -> None:
        with self._lock:
            if self._callbacks.get(registration.callback_id) is not registration:
                return  # unregistered while this call waited behind the one before
        try:
            registration.callback(*windows)
        except Exception as exc:
            self._handle(registration, exc)

    def _handle(self, registration: Registration, exc: BaseException) -> None:
        try:
            if registration.exception_handler is not None:
                registration.exception_handler(exc)
        except BaseException:
            logger.info(
                "deisa.insitu: exception in the exception handler: unregistering %s",
                registration.callback_id,
            )
            self.unregister_callback(registration.callback_id)

    # -- deisa-core's IDeisa ---------------------------------------------------------------------

    def register(
        self,
        *callback_args: Any,
        exception_handler: Callable[[BaseException], Any] = _log_exception,
        when: Literal["AND", "OR"] = "AND",
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """:meth:`register_callback` as a decorator: ``@deisa.register("t", Window("p", 2))``."""

        def decorator(callback: Callable[..., Any]) -> Callable[..., Any]:
            return self.register_callback(
                callback, *callback_args, exception_handler=exception_handler, when=when
            )

        return decorator

    def register_callback(
        self,
        callback: Callable[..., Any],
        *callback_args: Any,
        exception_handler: Callable[[BaseException], Any] = _log_exception,
        when: Literal["AND", "OR"] = "AND",
    ) -> Callable[..., Any]:
        """Call ``callback`` with one window (a list of ``DeisaArray``, oldest first) per array
        named, whenever ``when`` says (see :mod:`deisa.insitu.triggers`), from the next step
        of those arrays on.

        Returns ``callback``, its id set as ``callback.callback_id``. A callback's calls run on
        a thread of its own, one at a time, in step order; what it raises goes to
        ``exception_handler`` (by default: logged), and the callback is unregistered if the
        handler raises.

        Raises
        ------
        TypeError
            No array, or an argument that is neither a name nor ``Window(name, size)``.
        ValueError
            ``when`` not ``"AND"``/``"OR"``, a size below 1, or an array that the simulation
            does not publish (after waiting up to :data:`UNKNOWN_GRACE_S` for it to open).
        """
        windows = parse_windows(callback_args)
        registration = Registration("", callback, windows, when, exception_handler)
        started = time.monotonic()
        while True:
            unknown = [n for n in registration.names if n not in self.arrays_metadata]
            if not unknown or time.monotonic() - started > UNKNOWN_GRACE_S:
                break
            self._refresh()
            if [n for n in registration.names if n not in self.arrays_metadata]:
                time.sleep(0.1)
        if unknown:
            raise ValueError(f"unknown array name: {unknown[0]}")
        with self._lock:
            registration.callback_id = f"deisa_cb_{next(self._ids)}"
            self._callbacks[registration.callback_id] = registration
            self._executors[registration.callback_id] = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"deisa-insitu-{registration.callback_id}"
            )
        callback.callback_id = registration.callback_id  # type: ignore[attr-defined]
        return callback

    def unregister_callback(self, callback_id: Any) -> None:
        """Stop calling a callback (its id, or the callback itself): a call running ends, the
        calls due behind it are not made."""
        callback_id = getattr(callback_id, "callback_id", callback_id)
        with self._lock:
            self._callbacks.pop(callback_id, None)
            executor = self._executors.pop(callback_id, None)
        if executor is not None:
            # not cancel_futures: a future cancelled in the queue never wakes a waiting
            # concurrent.futures.wait (execute_callbacks'); the calls queued behind return at once
            executor.shutdown(wait=False)

    def execute_callbacks(self) -> None:
        """Give the Bridges their go, then wait until the simulation has closed every array
        and every callback call due has ended."""
        self.adapter.set(INSITU_GO, True)
        if not self._controls:
            self._wait_for_simulation()
        logger.info("deisa.insitu: execute_callbacks() waiting for the simulation")
        for thread in list(self._readers.values()):
            thread.join()
        while self._open_controls():
            time.sleep(0.05)
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                break
            concurrent.futures.wait(pending)
        self.adapter.set(INSITU_GO, None)  # a later simulation waits for its own analytics
        logger.info("deisa.insitu: execute_callbacks() done")

    def _open_controls(self) -> list[str]:
        streams = self.adapter.stats()["streams"]
        return [c for c in self._controls if c in streams and not streams[c]["closed"]]

    def set(self, key: str, value: Any, timestep: int) -> None:
        """Make ``value`` the simulation's ``get(key, timestep)``: a steering value (plain data:
        numbers, strings, numpy arrays; see :mod:`deisa.analysis.steering`). The last
        ``feedback_queue_size`` timesteps of ``key`` are kept."""
        with self._lock:
            index = steering.get_value(self.client, insitu_index_name(key), None)
            steps = [] if index is None else [int(t) for t in np.asarray(index).ravel()]
            self.adapter.set(insitu_value_name(key, timestep), value)
            if timestep not in steps:
                steps.append(int(timestep))
            while len(steps) > self.feedback_queue_size:
                self.adapter.set(insitu_value_name(key, steps.pop(0)), None)
            self.adapter.set(insitu_index_name(key), np.asarray(steps, dtype=np.int64))

    # -- the end ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop reading (within :data:`READ_WAIT_S`), detach, and close the client if it is ours."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for thread in list(self._readers.values()):
            thread.join(timeout=READ_WAIT_S * 5)
        with self._lock:
            executors = list(self._executors.values())
        for executor in executors:
            executor.shutdown(wait=False)
        try:
            self.adapter.close()
        finally:
            if self._owns_client:
                self.client.close()

    def __del__(self) -> None:
        if getattr(self, "_closed", True) is False:
            self._stop.set()
