"""deisa-core's ``IBridge`` on our :class:`~deisa.Bridge`: ``deisa.insitu.Bridge``.

A simulation written for deisa-dask (``Bridge(comm, arrays_metadata)``, ``send``, ``get``,
``close``) changes its import and runs on this project's Bridge:

- ``arrays_metadata`` (deisa-core's ``global_shape``, ``chunk_shape``, ``chunk_position``,
  and our optional ``dtype``, ``float64`` by default) becomes one
  :class:`~deisa.ArraySpec` per array, the block starting at ``chunk_position * chunk_shape``
  (a last block may be smaller: uneven splits are fine here);
- the arrays every rank declares share one :class:`~deisa.Bridge` over ``comm``; each set of
  ranks holding other arrays gets one over ``comm.Split`` (as deisa-dask splits per array);
- ``send`` is :meth:`~deisa.Bridge.publish`, collective over the ranks holding the array;
- a *control* Bridge over ``comm``, built last and closed last, opens a one-element-per-rank
  array whose name lists the simulation's arrays (:func:`deisa.wire.insitu_control_name`):
  the analytics learns from it which arrays to expect (the handshake) and when the simulation
  has closed (``execute_callbacks``). It reads the analytics' ``set`` values as steering
  values (:meth:`~deisa.Bridge.get`, rank 0 asks, every rank gets the same answer) and, with
  ``wait_for_go``, waits for the analytics' go (given by ``Deisa.execute_callbacks``).

``docs/ecosystem.md`` lists each difference with deisa-dask.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import time
import weakref
import zlib
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..bridge.arrays.decomposition import ArraySpec
from ..bridge.bridge import Bridge as _Bridge
from ..bridge.bridge import BridgeError
from ..wire import (
    INSITU_GO,
    insitu_control_name,
    insitu_index_name,
    insitu_value_name,
)
from .comm import is_mpi_like, speaking_comm, undefined_color

try:
    from deisa.core import IBridge, validate_arrays_metadata
except ImportError as exc:  # deisa-core is optional; this module is its backend
    raise ImportError(
        "deisa.insitu speaks deisa-core's interface and needs it: pip install deisa-core "
        "(or pip install 'deisa-insitu[core]')"
    ) from exc

__all__ = ["Bridge", "metadata_spec"]

logger = logging.getLogger(__name__)

EXTRA_KEYS = ("dtype",)
"""Keys of ``arrays_metadata`` that deisa-core does not define and this backend reads."""

_MISSING = object()


def metadata_spec(name: str, metadata: Mapping[str, Any]) -> ArraySpec | None:
    """The :class:`~deisa.ArraySpec` of one entry of deisa-core's ``arrays_metadata``, or
    ``None`` for an empty array (a zero in its shapes: nothing to publish).

    Examples
    --------
    >>> metadata_spec("t", {"global_shape": (10, 8), "chunk_shape": (4, 8),
    ...                     "chunk_position": (2, 0)})  # doctest: +NORMALIZE_WHITESPACE
    ArraySpec(dtype=dtype('float64'), global_shape=(10, 8), start=(8, 0), shape=(2, 8),
              dims=None, time_length=None)
    """
    global_shape = tuple(int(n) for n in metadata["global_shape"])
    chunk = tuple(int(n) for n in metadata["chunk_shape"])
    position = tuple(int(p) for p in metadata["chunk_position"])
    if 0 in global_shape or 0 in chunk:
        return None
    start = tuple(p * c for p, c in zip(position, chunk, strict=True))
    shape = tuple(min(c, n - s) for c, n, s in zip(chunk, global_shape, start, strict=True))
    try:
        return ArraySpec(metadata.get("dtype", "float64"), global_shape, start, shape)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"arrays_metadata[{name!r}]: {exc}") from exc


def _validated(arrays_metadata: Any) -> dict[str, dict[str, Any]]:
    """deisa-core's validation, our extra keys set aside."""
    if not isinstance(arrays_metadata, dict):
        raise TypeError("arrays_metadata must be a dict")
    core = {
        name: {k: v for k, v in m.items() if k not in EXTRA_KEYS} if isinstance(m, dict) else m
        for name, m in arrays_metadata.items()
    }
    validate_arrays_metadata(core)
    return arrays_metadata


def _scheduler_file(given: str | os.PathLike[str] | None) -> tuple[str, str | None]:
    """The scheduler file to connect to, and a temporary one written here to remove at close.

    ``given``, else ``$DEISA_SCHEDULER_FILE`` (ours), else deisa-dask's
    ``$DEISA_DASK_SCHEDULER_ADDRESS`` (a scheduler file or an address, by default
    ``tcp://127.0.0.1:8787``); an address is written into a temporary scheduler file.
    """
    if given:
        return os.fspath(given), None
    ours = os.environ.get("DEISA_SCHEDULER_FILE", "")
    if ours:
        return ours, None
    address = os.environ.get("DEISA_DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:8787")
    if os.path.isfile(address):
        return address, None
    if "://" not in address:
        address = "tcp://" + address
    fd, path = tempfile.mkstemp(prefix="deisa-insitu-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"address": address}, f)
    return path, path


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class Bridge(IBridge):
    """deisa-core's ``IBridge`` on :class:`deisa.Bridge`; one per rank.

    Parameters
    ----------
    comm
        deisa-core's ``ICommunicator``: an mpi4py communicator, or any object with
        ``Get_rank``, ``Get_size``, ``gather``, ``bcast``, ``barrier`` (and ``Split``, where
        some arrays are held by some ranks only). Construction and :meth:`close` are
        collective over it.
    arrays_metadata
        This rank's arrays: ``{name: {"global_shape", "chunk_shape", "chunk_position"}}``
        (deisa-core's keys), plus an optional ``"dtype"`` (``"float64"`` by default: our Bridge
        checks each block against it). A rank lists only the arrays it sends.
    scheduler_file
        Where the scheduler is; by default ``$DEISA_SCHEDULER_FILE``, else deisa-dask's
        ``$DEISA_DASK_SCHEDULER_ADDRESS`` (a file or an address).
    wait_for_go
        Wait, in the constructor, for the go of an analytics: ``deisa.insitu.Deisa``'s
        ``execute_callbacks`` gives it (deisa-core's contract: it "unblocks the simulation";
        deisa-dask gives it when its ``Deisa`` is built), so every step reaches the callbacks
        registered before. The go stays set until that ``execute_callbacks`` ends.
    go_timeout
        Seconds to wait for the go; ``None`` (default): forever.
    timeout
        deisa-dask's: seconds to connect (our ``connect_timeout``).
    **kwargs
        Any option of :class:`~deisa.BridgeOptions` (``buffer_nb``, ``placement``...).
        ``mode`` is ``"sync"`` by default (``send`` returns once the step is registered, as
        deisa-dask's does); ``"async"`` needs an mpi4py communicator.

    Raises
    ------
    TypeError, ValueError
        ``arrays_metadata`` refused by deisa-core's validator (or a bad ``dtype``), a
        positional argument beyond deisa-core's, ``mode="async"`` with another communicator.
    deisa.BridgeError
        On every rank: blocks that do not tile their array, a scheduler not reached, a go not
        come within ``go_timeout``.
    """

    def __init__(
        self,
        comm: Any,
        arrays_metadata: dict[str, dict[str, Any]],
        *args: Any,
        scheduler_file: str | os.PathLike[str] | None = None,
        wait_for_go: bool = True,
        go_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        if args:
            raise TypeError(f"Bridge() takes comm and arrays_metadata only, got {args!r} more")
        self.comm = comm
        self.id: int = int(comm.Get_rank())
        self.arrays_metadata = _validated(arrays_metadata)
        self._closed = False
        self._bridges: list[tuple[tuple[str, ...], _Bridge]] = []
        self._bridge_of: dict[str, _Bridge] = {}
        self._control: _Bridge | None = None
        self._sub_comms: list[Any] = []
        self._feedback: dict[tuple[str, int], Any] = {}  # (key, timestep) -> value read
        if "timeout" in kwargs:  # deisa-dask's connection timeout
            kwargs["connect_timeout"] = kwargs.pop("timeout")
        kwargs.setdefault("mode", "sync")
        if kwargs["mode"] == "async" and not is_mpi_like(comm):
            raise ValueError(
                "mode='async' needs an mpi4py communicator (Iallgather); this one is a "
                f"{type(comm).__name__}: leave mode='sync'"
            )
        specs: dict[str, ArraySpec | None] = {}
        problem: str | None = None
        for name, metadata in self.arrays_metadata.items():
            try:
                specs[name] = metadata_spec(name, metadata)
            except ValueError as exc:  # raised on every rank, below
                problem = problem or f"rank {self.id}: {exc}"
        self._empty = {name for name, spec in specs.items() if spec is None}
        self._scheduler_file, temporary = _scheduler_file(scheduler_file)
        # removed at close(), or when the Bridge is collected or the interpreter exits
        # without a close() (a code that never calls it)
        self._temp_file = weakref.finalize(self, _remove, temporary) if temporary else None
        try:
            published = {n: s for n, s in specs.items() if s is not None}
            self._build(speaking_comm(comm), published, kwargs, problem)
            if wait_for_go:
                self._wait_for_go(go_timeout)
        except BaseException:
            self._remove_temp_file()
            raise

    # -- construction ------------------------------------------------------------------------

    def _build(
        self,
        speaking: Any,
        specs: dict[str, ArraySpec],
        options: dict[str, Any],
        problem: str | None,
    ) -> None:
        """The Bridges, in the same order on every rank: over comm, per set of holders, and
        the control Bridge last."""
        size = speaking.Get_size()
        held = speaking.allgather((problem, sorted(specs)))
        first = next((p for p, _ in held if p), None)
        if first is not None:
            raise ValueError(f"arrays_metadata: {first}")
        holders: dict[str, tuple[int, ...]] = {}
        for rank, (_, names) in enumerate(held):
            for name in names:
                holders[name] = (*holders.get(name, ()), rank)
        groups: dict[tuple[int, ...], list[str]] = {}
        for name in sorted(holders):
            groups.setdefault(holders[name], []).append(name)
        whole = groups.pop(tuple(range(size)), [])
        failure: str | None = None
        if whole:
            failure = self._add(tuple(whole), specs, speaking, options)
        for ranks, names in sorted(groups.items(), key=lambda item: item[1][0]):
            member = self.id in ranks
            color = zlib.crc32(",".join(names).encode()) & 0x7FFFFFFE
            sub = self.comm.Split(color if member else undefined_color(), self.id)
            if member and failure is None:
                self._sub_comms.append(sub)
                failure = self._add(tuple(names), specs, speaking_comm(sub), options)
        first = next((f for f in speaking.allgather(failure) if f), None)
        if first is None:
            control = ArraySpec("int8", (size,), (self.id,), (1,))
            connect = {k: v for k, v in options.items() if k == "connect_timeout"}
            self._control = _Bridge(
                self._scheduler_file,
                {insitu_control_name(sorted(holders)): control},
                comm=speaking,
                mode="sync",
                **connect,
            )
            logger.info(
                "deisa.insitu: rank %d, arrays %s (%s empty), Bridges %s",
                self.id, sorted(holders), sorted(self._empty) or "none",
                [list(names) for names, _ in self._bridges],
            )  # fmt: skip
            return
        self._close_all()
        raise BridgeError(first)

    def _add(
        self, names: tuple[str, ...], specs: dict[str, ArraySpec], comm: Any, options: Any
    ) -> str | None:
        try:
            bridge = _Bridge(
                self._scheduler_file, {n: specs[n] for n in names}, comm=comm, **options
            )
        except (BridgeError, ValueError) as exc:
            return f"the Bridge of {list(names)}: {exc}"
        self._bridges.append((names, bridge))
        self._bridge_of.update(dict.fromkeys(names, bridge))
        return None

    def _wait_for_go(self, timeout: float | None) -> None:
        assert self._control is not None
        started = time.monotonic()
        if self.id == 0:
            logger.info("deisa.insitu: waiting for the analytics (deisa.insitu.Deisa)")
        while not self._control.get(INSITU_GO, False):
            if timeout is not None and time.monotonic() - started > timeout:
                self._close_all()
                raise BridgeError(f"no analytics was ready within go_timeout={timeout} s")
            time.sleep(0.05)

    # -- deisa-core's IBridge ------------------------------------------------------------------

    def send(
        self, array_name: str, chunk: np.ndarray, timestep: int, *args: Any, **kwargs: Any
    ) -> None:
        """Publish this rank's ``chunk`` of ``array_name`` at ``timestep``: collective over the
        ranks that declared the array (:meth:`deisa.Bridge.publish`).

        ``update_workers`` is accepted and ignored (the Bridge follows workers that join or
        leave by itself). ``filter_workers`` is called with :attr:`workers` and its answer
        checked as deisa-dask does (:class:`TypeError` for anything but a non-empty list of
        addresses); one that keeps every worker changes nothing, one that drops some raises
        :class:`NotImplementedError` (the placement is chosen once per run: pass
        ``placement=`` to the Bridge instead).

        Raises
        ------
        ValueError
            An array this rank did not declare (as deisa-dask).
        deisa.BridgeError
            On every rank of the array's Bridge: a block of another shape or dtype than
            declared, a bad timestep, a failed transfer or registration.
        """
        if array_name not in self.arrays_metadata:
            raise ValueError(f"array {array_name} is unknown.")
        if kwargs.get("filter_workers"):
            self._check_filter(kwargs["filter_workers"])
        if array_name in self._empty:
            logger.debug("deisa.insitu: %r is empty: nothing to send", array_name)
            return
        self._bridge_of[array_name].publish(array_name, chunk, timestep)

    def _check_filter(self, filter_workers: Any) -> None:
        workers = filter_workers(self.workers)
        if not isinstance(workers, list):
            raise TypeError(f"worker_filter must return a list, got {type(workers)}")
        if not workers:
            raise TypeError("worker_filter must return a non-empty list")
        if not all(isinstance(w, str) for w in workers):
            raise TypeError("worker_filter must return a list of strings")
        if set(workers) != set(self.workers):
            raise NotImplementedError(
                f"send(filter_workers=...) kept {sorted(workers)} of {sorted(self.workers)}: "
                "deisa.insitu places blocks by a placement chosen once per run; pass "
                "placement='round_robin', 'locality' or 'node_local' to the Bridge"
            )

    @property
    def workers(self) -> dict[str, dict[str, Any]]:
        """The workers the blocks go to, by address (deisa-dask's ``workers``, with no
        details: the scheduler's worker records stay on the scheduler)."""
        bridges = [b for _, b in self._bridges] + ([self._control] if self._control else [])
        return {w: {"address": w} for w in (bridges[0].workers if bridges else [])}

    def get(self, key: str, timestep: int | None = None, default: Any = None) -> Any:
        """The value the analytics set for ``key`` at ``timestep`` (``Deisa.set``), or
        ``default``; with ``timestep=None``, every ``(timestep, value)`` pair set so far, as a
        :class:`collections.deque`. Collective over ``comm``; does not wait for a value.
        """
        if self._closed or self._control is None:
            raise BridgeError(f"get({key!r}) after close()")
        control = self._control
        index = control.get(insitu_index_name(key), None)
        steps = [] if index is None else [int(t) for t in np.asarray(index).ravel()]
        if timestep is not None:
            steps = [t for t in steps if t == timestep]
        for t in steps:  # the same steps, in the same order, on every rank
            if (key, t) not in self._feedback:
                value = control.get(insitu_value_name(key, t), _MISSING)
                if value is not _MISSING:
                    self._feedback[(key, t)] = value
        if timestep is not None:
            return self._feedback.get((key, timestep), default)
        return deque((t, self._feedback[(key, t)]) for t in steps if (key, t) in self._feedback)

    def close(self, timestep: int | None = None) -> None:
        """Close every Bridge of this rank (the arrays' streams end; the control stream last,
        which tells the analytics the simulation is done); collective over ``comm``,
        idempotent. ``timestep`` is deisa-core's and only logged."""
        if self._closed:
            return
        logger.info("deisa.insitu: rank %d closes at timestep %s", self.id, timestep)
        self._close_all()

    def _close_all(self) -> None:
        self._closed = True
        error: BaseException | None = None
        bridges = [b for _, b in self._bridges] + ([self._control] if self._control else [])
        for bridge in bridges:
            try:
                bridge.close()
            except BridgeError as exc:
                error = error or exc
        for sub in self._sub_comms:
            free = getattr(sub, "Free", None)
            if free is not None:
                try:
                    free()
                except Exception:  # freeing is best effort, as deisa-dask's
                    logger.debug("deisa.insitu: freeing a communicator failed", exc_info=True)
        self._sub_comms.clear()
        self._remove_temp_file()
        if error is not None:
            raise error

    def _remove_temp_file(self) -> None:
        if self._temp_file is not None:
            self._temp_file()  # once: a finalizer runs at most once
            self._temp_file = None

    def __del__(self) -> None:
        """Nothing collective (a rank collected alone would hang the others): a Bridge not
        closed is reported, and the analytics sees no end of its streams."""
        if not getattr(self, "_closed", True) and not sys.is_finalizing():
            logger.warning(
                "deisa.insitu: the Bridge of rank %s was not closed: call close(timestep) on "
                "every rank, or the analytics never sees the end of the run",
                getattr(self, "id", "?"),
            )

    def __enter__(self) -> Bridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
