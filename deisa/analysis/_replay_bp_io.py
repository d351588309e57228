"""Reading ADIOS2 BP output, every read bounded: for :class:`deisa.Replay`.

:func:`open_bp` opens a BP4/BP5 directory so that no read waits for bytes that are not there (a
truncated file is an error naming it, never a hang); :class:`BPBlock` is one step of one array,
or one box of it, sliced like an array, what :func:`dask.array.from_array` reads a chunk from,
by whichever process computes it (each process keeps a few files open: :func:`_reader`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict
from contextlib import suppress
from typing import Any

import numpy as np

from ._replay_array import ReplayError

__all__ = ["BPBlock", "adios2_message", "bindings_of", "close_bp", "open_bp"]

logger = logging.getLogger(__name__)

_OPEN_READERS = 8  # BP files kept open per process by BPBlock (the oldest is closed first)
#: ADIOS2's terminal colour codes, and the time that opens its messages
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_STAMP = re.compile(r"^\s*\[[A-Z][a-z]{2} [A-Z][a-z]{2} [^\]]*\]\s*")


def adios2_message(exc: BaseException) -> str:
    """ADIOS2's message of ``exc`` on one line, without its terminal colour codes and time."""
    text = _STAMP.sub("", _COLOUR.sub("", str(exc)).strip())
    return " ".join(text.replace(": iostream error", "").split())


def _check_parts(path: str) -> None:
    """Every part of ``path`` ADIOS2 reads is a regular file: a pipe would block its open."""
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith(("md.", "mmd.", "data.")) and not os.path.isfile(entry.path):
                raise ReplayError(
                    f"{entry.path} is not a regular file (a pipe, a device, a directory or a "
                    "dangling link): not BP output a Replay reads"
                )


def open_bp(bindings: Any, path: str, mode: Any, name: str) -> tuple[Any, Any, Any]:
    """``(adios, io, engine)`` reading ``path``, every read bounded: no wait for the file to
    grow (``OpenTimeoutSecs`` 0, where BP5's ``Mode.Read`` waits an hour for a metadata file
    shorter than its index says), and the ``stdio`` transport, whose short read is an error
    where the POSIX transport waits for the missing bytes (BP4: for ever)."""
    _check_parts(path)
    adios = bindings.ADIOS()
    io = adios.DeclareIO(name)
    io.SetParameter("OpenTimeoutSecs", "0")
    io.AddTransport("File", {"Library": "stdio"})
    try:
        return adios, io, io.Open(path, mode)
    except Exception as exc:
        raise ReplayError(f"{path}: not readable by ADIOS2 ({adios2_message(exc)})") from None


def close_bp(engine: Any, path: str) -> None:
    """Close ``engine``, which :func:`open_bp` opened on ``path``. ADIOS2's BP5 reader writes
    its profile to ``/tmp/<file name>_<pid in hex>_profiling.json`` at every ``Close``, whatever
    its parameters say (ADIOS2 2.10-2.12), readable by all: that file, this process's own, goes."""
    bp5 = "BP5" in engine.Type().upper()
    engine.Close()
    if bp5:
        profile = f"/tmp/{os.path.basename(path)}_{os.getpid():x}_profiling.json"
        with suppress(FileNotFoundError):
            os.remove(profile)


def bindings_of(path: str) -> Any:
    try:
        import adios2.bindings as bindings
    except ImportError as exc:
        raise ReplayError(
            f"{path} is ADIOS2 output: reading it needs the adios2 package "
            "(pip install 'deisa-insitu[adios2]')"
        ) from exc
    return bindings


class BPBlock:
    """The ``index``-th step of the array ``name`` of a BP file, sliced like an array: what
    :func:`dask.array.from_array` reads a chunk from. Pickled as the path and the names, so a
    worker opens the file itself; each process keeps a few files open (:func:`_reader`).

    ``origin``: where it starts in the step's array; a box of the step (one block a writer
    put) is the region of ``shape`` elements from there. Default: the whole step.
    """

    def __init__(
        self,
        path: str,
        name: str,
        index: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        step: int | None = None,
        origin: tuple[int, ...] | None = None,
    ) -> None:
        self.path, self.name, self.index = path, name, index
        self.origin = origin if origin is not None else (0,) * len(shape)
        self.shape, self.dtype, self.ndim = shape, dtype, len(shape)
        self.step = index if step is None else step  # its number, for messages

    def __getitem__(self, index: Any) -> np.ndarray:
        index = index if isinstance(index, tuple) else (index,)
        index = index + (slice(None),) * (self.ndim - len(index))
        pairs = zip(index, self.shape, strict=True)
        ranges = [s.indices(n) if isinstance(s, slice) else None for s, n in pairs]
        if None in ranges or any(r[2] != 1 for r in ranges if r):  # not a box: read, then index
            return self[tuple(slice(None) for _ in self.shape)][index]
        start = [r[0] + o for r, o in zip(ranges, self.origin, strict=True) if r]
        count = [max(r[1] - r[0], 0) for r in ranges if r]
        out = np.empty(count, self.dtype)
        if out.size == 0:
            return out
        bindings = bindings_of(self.path)
        key, (lock, _, io, engine) = _reader(bindings, self.path, self.step)
        with lock:
            try:
                variable = io.InquireVariable(self.name)
                variable.SetStepSelection([self.index, 1])  # the index-th step holding the array
                variable.SetSelection([start, count])
                engine.Get(variable, out, bindings.Mode.Sync)
            except Exception as exc:
                _forget(key)  # an engine whose read failed is not used again
                raise ReplayError(
                    f"{self.path}: step {self.step} of {self.name!r} cannot be read "
                    f"({adios2_message(exc)})"
                ) from None
        return out


_READERS: OrderedDict[tuple[str, int], tuple[threading.Lock, Any, Any, Any]] = OrderedDict()
_READERS_LOCK = threading.Lock()


def _reader(
    bindings: Any, path: str, step: int
) -> tuple[tuple[str, int], tuple[threading.Lock, Any, Any, Any]]:
    """This process's open reader of ``path`` (random access), opened again if the file
    changed, and its key; a lock per file, since an ADIOS2 engine is not to be used by two
    threads at once."""
    try:
        key = (path, os.stat(os.path.join(path, "md.idx")).st_mtime_ns)
    except OSError as exc:
        raise ReplayError(f"{path}: step {step} cannot be read ({exc.strerror})") from None
    with _READERS_LOCK:
        if key in _READERS:
            _READERS.move_to_end(key)
            return key, _READERS[key]
        try:
            adios, io, engine = open_bp(bindings, path, bindings.Mode.ReadRandomAccess, "read")
        except ReplayError as exc:
            raise ReplayError(f"step {step}: {exc}") from None
        _READERS[key] = (threading.Lock(), adios, io, engine)
        while len(_READERS) > _OPEN_READERS:
            (oldest, _), reader = _READERS.popitem(last=False)
            _close(oldest, reader)
        return key, _READERS[key]


def _forget(key: tuple[str, int]) -> None:
    with _READERS_LOCK:
        reader = _READERS.pop(key, None)
    if reader is not None:
        try:
            close_bp(reader[3], key[0])  # its lock is held by the caller
        except Exception as exc:
            logger.debug("deisa replay: closing %s: %s", key[0], adios2_message(exc))


def _close(path: str, reader: tuple[threading.Lock, Any, Any, Any]) -> None:
    lock, _, _, engine = reader
    with lock:
        close_bp(engine, path)
