"""ADIOS2 BP4/BP5 output for :class:`deisa.Replay`: its arrays chunked as the ranks wrote them.

An ADIOS2 code that wrote ``out.bp`` (BP4 or BP5, a directory holding ``md.idx``) kept, for each
step and each global array, every block a writer ``Put``: its start and count. A
:class:`BPFile` reads that metadata once, in one pass over the steps (no data read), with the
serial ``adios2`` package (``pip install 'deisa-insitu[adios2]'``); each array's step is then a
lazy dask array whose chunks are those blocks (on each axis, from one block's start to the next,
over every step: exactly the blocks for any decomposition that forms a grid, the same cut finer
otherwise), each chunk read with ADIOS2 by whichever process computes it (:class:`BPBlock`).

- The time axis is the ADIOS2 step (``0 .. N-1``, or ``Replay(steps=...)``'s numbers, one per
  ADIOS2 step); an array written every 10th step has the steps 0, 10, 20...
- A global single value (a ``Put`` of a variable defined without shape: a step counter, a time)
  is a one-element array of its name, with the steps that wrote it, as the deisa ADIOS2 engine
  publishes it (docs/adios2.md): ``replay["step"][t].compute()[0]``, ``replay.zip("U",
  "step")``. The values are read in the same pass (they are in the metadata).
- Local arrays and local values (no global shape), and strings, are not arrays of a Replay: they
  are left out, with one log line naming them. A step whose blocks leave holes in the array or
  overlap, or an array whose shape changes between steps, is a :class:`ReplayError` at
  ``replay[name]``, never a wrong array.

Files are data, never code, and never hang a reader (docs/security.md, "Replay's inputs"): an
array written with an ADIOS2 operator is refused at ``replay[name]`` unless trusted
(:mod:`deisa.analysis._replay_operators`); a shape is checked against the file's data and the
grid of blocks against ``max_metadata_bytes``; every read is bounded (:func:`_open`), a failed
one a :class:`ReplayError` naming the file and the step.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize

from . import _labels
from ._replay_array import ReplayArray, ReplayError, UnknownArrayError
from ._replay_operators import bp4_operators, describe

__all__ = ["BPBlock", "BPFile", "is_bp"]

logger = logging.getLogger(__name__)

#: ADIOS2's type names, those of a Replay's arrays (``long double`` has no portable numpy twin)
DTYPES = {
    "char": "int8", "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16",
    "uint16_t": "uint16", "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64",
    "uint64_t": "uint64", "float": "float32", "double": "float64", "float complex": "complex64",
    "double complex": "complex128", "complex": "complex64",
}  # fmt: skip
_OPEN_READERS = 8  # BP files kept open per process by BPBlock (the oldest is closed first)
#: ADIOS2's terminal colour codes, and the time that opens its messages
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_STAMP = re.compile(r"^\s*\[[A-Z][a-z]{2} [A-Z][a-z]{2} [^\]]*\]\s*")


def is_bp(path: str) -> bool:
    """Whether ``path`` is ADIOS2 output: a BP4/BP5 directory (it holds ``md.idx``)."""
    return os.path.isfile(os.path.join(path, "md.idx"))


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


def _open(bindings: Any, path: str, mode: Any, name: str) -> tuple[Any, Any, Any]:
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


def _data_bytes(path: str) -> int:
    """The bytes of the data files (``data.*``) of the BP output ``path``."""
    with os.scandir(path) as entries:
        return sum(e.stat().st_size for e in entries if e.name.startswith("data.") and e.is_file())


def _bindings(path: str) -> Any:
    try:
        import adios2.bindings as bindings
    except ImportError as exc:
        raise ReplayError(
            f"{path} is ADIOS2 output: reading it needs the adios2 package "
            "(pip install 'deisa-insitu[adios2]')"
        ) from exc
    return bindings


@dataclass
class _Variable:
    """One global array of a BP file: what every step's metadata says of it."""

    name: str
    type: str
    shape: tuple[int, ...]
    steps: list[int] = field(default_factory=list)  # ADIOS2 steps holding blocks of it
    blocks: list[list[tuple[tuple[int, ...], tuple[int, ...]]]] = field(default_factory=list)
    reshaped: str | None = None  # how its shape changed between steps, if it did
    operator: str | None = None  # written with an ADIOS2 operator: its name ("": unnamed)


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


class BPFile:
    """The metadata of one ADIOS2 BP output, read in one pass over its steps.

    Parameters
    ----------
    path
        The ``.bp`` directory.
    steps
        The step number of each ADIOS2 step, in order (``Replay(steps=...)``); default: the
        ADIOS2 step indices.
    trust_operators
        ``Replay(trust_operators=...)``: the arrays written with an ADIOS2 operator that may be
        read (``True``: all of them).
    max_metadata_bytes
        ``Replay(max_metadata_bytes=...)``: the most bytes sized from the metadata (the grid
        checking that an array's blocks cover it).

    Raises
    ------
    ReplayError
        Not readable by ADIOS2, the ``adios2`` package missing, or ``steps`` of another length
        than the file's steps.
    """

    def __init__(
        self,
        path: str,
        steps: Sequence[int] | None = None,
        *,
        trust_operators: bool | Collection[str] = False,
        max_metadata_bytes: int = 64 * 2**20,
    ) -> None:
        self.path = path
        self._trusted = trust_operators
        self._max_metadata_bytes = max_metadata_bytes
        self._variables: dict[str, _Variable] = {}
        self._values: dict[str, dict[int, Any]] = {}  # a single value: step -> value
        self._left_out: dict[str, str] = {}  # local arrays and values: their shape kind
        self.count = self._scan(_bindings(path))
        self._numbers = list(range(self.count)) if steps is None else [int(s) for s in steps]
        if len(self._numbers) != self.count:
            raise ReplayError(
                f"steps= gives {len(self._numbers)} step numbers for the {self.count} ADIOS2 "
                f"steps of {path}"
            )
        if self._left_out:
            logger.info(
                "deisa replay: %s: %s left out (not global arrays or global values)",
                path,
                ", ".join(f"{n!r} ({kind})" for n, kind in sorted(self._left_out.items())),
            )

    def _scan(self, bindings: Any) -> int:
        """Read every step's metadata (and its single values); the number of steps."""
        _, io, engine = _open(bindings, self.path, bindings.Mode.Read, "deisa-replay-scan")
        bp4 = bp4_operators(self.path) if engine.Type().upper().startswith("BP4") else {}
        count = 0
        try:
            while True:
                try:
                    status = engine.BeginStep(bindings.StepMode.Read, 0.0)
                except Exception as exc:
                    raise ReplayError(
                        f"{self.path}: the metadata of step {count} cannot be read "
                        f"({adios2_message(exc)})"
                    ) from None
                if status != bindings.StepStatus.OK:
                    if status == bindings.StepStatus.NotReady:
                        logger.info(
                            "deisa replay: %s is still being written: its first %d steps read",
                            self.path, count,
                        )  # fmt: skip
                    break
                try:
                    self._scan_step(bindings, io, engine, count, bp4)
                    engine.EndStep()
                except ReplayError:
                    raise
                except Exception as exc:
                    raise ReplayError(
                        f"{self.path}: step {count} cannot be read ({adios2_message(exc)})"
                    ) from None
                count += 1
        finally:
            try:
                engine.Close()
            except Exception as exc:  # the error that stopped the scan is the one to tell
                logger.debug("deisa replay: closing %s: %s", self.path, adios2_message(exc))
        return count

    def _scan_step(
        self, bindings: Any, io: Any, engine: Any, step: int, bp4: dict[str, str]
    ) -> None:
        for name, info in io.AvailableVariables().items():
            variable = io.InquireVariable(name)
            kind = variable.ShapeID()
            if kind == bindings.ShapeID.GlobalValue and variable.Type() in DTYPES:
                self._values.setdefault(name, {})[step] = _read_value(bindings, engine, variable)
            elif kind == bindings.ShapeID.GlobalValue:
                self._left_out[name] = f"a single value of type {variable.Type()}"
            elif kind == bindings.ShapeID.GlobalArray:
                operations = variable.Operations()  # BP5's metadata says "an operator"
                operator = bp4.get(name) or bp4.get("") or ("" if operations else None)
                self._add_blocks(name, info, engine.BlocksInfo(name, step), step, operator)
            else:
                self._left_out[name] = str(kind).rsplit(".", 1)[-1]

    def _add_blocks(
        self, name: str, info: dict[str, str], blocks: list[Any], step: int, operator: str | None
    ) -> None:
        shape = _numbers(info.get("Shape", ""))
        found = self._variables.setdefault(name, _Variable(name, info["Type"], shape))
        if operator is not None and found.operator is None:
            found.operator = operator
        if shape != found.shape and found.reshaped is None:
            found.reshaped = f"{found.shape} at step {found.steps[0]}, {shape} at step {step}"
        if not blocks:
            return
        found.steps.append(step)
        found.blocks.append([(_numbers(b["Start"]), _numbers(b["Count"])) for b in blocks])

    # -- what Replay asks ------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The global arrays of at least one axis, in name order."""
        arrays = [n for n, v in self._variables.items() if v.shape and v.steps]
        return sorted(arrays + list(self._values))

    @property
    def steps(self) -> list[int]:
        """The step number of every ADIOS2 step of the file."""
        return list(self._numbers)

    def array(self, name: str, chunks: Any, dims: Any) -> ReplayArray:
        """The saved array ``name``: its steps, each a lazy dask array chunked as written."""
        if name in self._values:
            return self._value_array(name, dims)
        variable = self._variables.get(name)
        if variable is None or name not in self.names:
            present = ", ".join(repr(n) for n in self.names) or "none"
            raise UnknownArrayError(
                f"no array {name!r} in {self.path}; the arrays there are: {present}"
            )
        if variable.reshaped is not None:
            raise ReplayError(
                f"{name!r} in {self.path} changes its shape between steps ({variable.reshaped})"
                ": a Replay array has one shape"
            )
        dtype = _dtype(variable, self.path)
        self._check_data(variable, dtype)
        spec = chunks if chunks is not None else self._written_chunks(variable)
        grid = da.core.normalize_chunks(spec, variable.shape, dtype=dtype)
        token = tokenize(self.path, name, os.stat(os.path.join(self.path, "md.idx")).st_mtime_ns)
        steps = [self._numbers[s] for s in variable.steps]

        def build(i: int) -> da.Array:
            block = BPBlock(self.path, name, i, variable.shape, dtype, steps[i])
            return da.from_array(
                block,
                chunks=grid,
                name=f"replay-{name}-{token}-{tokenize(grid)}-{i}",
                meta=np.empty((0,) * len(variable.shape), dtype),
            )

        labels = _labels.chosen(name, None, dims, len(variable.shape), self.path)
        return ReplayArray(name, steps, variable.shape, dtype, grid, build, self.path, labels)

    def _check_data(self, variable: _Variable, dtype: np.dtype) -> None:
        """Refuse an operator not trusted, and a shape the file's data cannot hold."""
        name = variable.name
        if variable.operator is not None:
            trusted = self._trusted is True or (
                not isinstance(self._trusted, bool) and name in self._trusted
            )
            if not trusted:
                raise ReplayError(
                    f"{name!r} in {self.path} was written with an ADIOS2 operator, "
                    f"{describe(variable.operator, self.path)}: reading it runs that code on "
                    f"the file's bytes; Replay(..., trust_operators=[{name!r}]) reads it if you "
                    "trust whoever wrote the file"
                )
            return  # compressed: its data may be smaller than its shape
        step_bytes = int(np.prod(variable.shape, dtype=np.float64) * dtype.itemsize)
        held = _data_bytes(self.path)
        if step_bytes > held:
            first = self._numbers[variable.steps[0]]
            raise ReplayError(
                f"{name!r} in {self.path} declares shape {variable.shape} ({step_bytes} bytes a "
                f"step), more than the {held} bytes of its data files (data.*): step {first} "
                "cannot be read (a data file missing, truncated or crafted)"
            )

    def _value_array(self, name: str, dims: Any) -> ReplayArray:
        """The single value ``name`` as a one-element array per step that wrote it."""
        written = self._values[name]
        steps = sorted(written)
        dtype = np.asarray(written[steps[0]]).dtype
        token = tokenize(self.path, name, [written[s] for s in steps])

        def build(i: int) -> da.Array:
            value = np.asarray([written[steps[i]]], dtype=dtype)
            return da.from_array(value, chunks=(1,), name=f"replay-{name}-{token}-{i}")

        labels = _labels.chosen(name, None, dims, 1, self.path)
        numbers = [self._numbers[s] for s in steps]
        return ReplayArray(name, numbers, (1,), dtype, ((1,),), build, self.path, labels)

    def _written_chunks(self, variable: _Variable) -> tuple[tuple[int, ...], ...]:
        """On each axis, from one block's start or end to the next, over every step; checked
        that every step's blocks cover the array once."""
        shape = variable.shape
        bounds = []
        for axis, extent in enumerate(shape):
            cuts = {0, extent}
            for blocks in variable.blocks:
                for start, count in blocks:
                    cuts.update((start[axis], start[axis] + count[axis]))
            if min(cuts) < 0 or max(cuts) > extent:
                raise ReplayError(
                    f"a block of {variable.name!r} in {self.path} lies outside its shape {shape} "
                    f"on axis {axis}"
                )
            bounds.append(np.array(sorted(cuts)))
        cells = int(np.prod([len(b) - 1 for b in bounds], dtype=np.float64))
        if cells * 8 > self._max_metadata_bytes:
            raise ReplayError(
                f"the blocks of {variable.name!r} in {self.path} cut it into "
                f"{' x '.join(str(len(b) - 1) for b in bounds)} pieces: checking that they cover "
                f"it would take {cells * 8} bytes, over max_metadata_bytes="
                f"{self._max_metadata_bytes} (raise it for a file you trust, or give chunks=)"
            )
        for step, blocks in zip(variable.steps, variable.blocks, strict=True):
            _check_cover(variable.name, self._numbers[step], blocks, bounds, self.path)
        return tuple(tuple(np.diff(b).tolist()) for b in bounds)


def _check_cover(
    name: str, step: int, blocks: list[Any], bounds: list[np.ndarray], path: str
) -> None:
    """Every cell of the grid ``bounds`` is in exactly one of the step's ``blocks``."""
    covered = np.zeros([len(b) - 1 for b in bounds], dtype=np.int64)
    for start, count in blocks:
        cells = tuple(
            slice(np.searchsorted(b, s), np.searchsorted(b, s + c))
            for b, s, c in zip(bounds, start, count, strict=True)
        )
        covered[cells] += 1
    if (covered != 1).any():
        problem = "overlap" if (covered > 1).any() else "leave holes in it"
        raise ReplayError(
            f"the {len(blocks)} blocks of {name!r} at step {step} in {path} {problem}: "
            "not an array a Replay can hand out"
        )


def _dtype(variable: _Variable, path: str) -> np.dtype:
    if variable.type not in DTYPES:
        raise ReplayError(
            f"{variable.name!r} in {path} holds ADIOS2 type {variable.type!r}, which a Replay "
            f"cannot read (types: {', '.join(DTYPES)})"
        )
    return np.dtype(DTYPES[variable.type])


def _read_value(bindings: Any, engine: Any, variable: Any) -> Any:
    out = np.empty(1, np.dtype(DTYPES[variable.Type()]))
    engine.Get(variable, out, bindings.Mode.Sync)
    return out[0]


class BPBlock:
    """The ``index``-th step of the array ``name`` of a BP file, sliced like an array: what
    :func:`dask.array.from_array` reads a chunk from. Pickled as the path and the names, so a
    worker opens the file itself; each process keeps a few files open (:func:`_reader`)."""

    def __init__(
        self,
        path: str,
        name: str,
        index: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        step: int | None = None,
    ) -> None:
        self.path, self.name, self.index = path, name, index
        self.shape, self.dtype, self.ndim = shape, dtype, len(shape)
        self.step = index if step is None else step  # its number, for messages

    def __getitem__(self, index: Any) -> np.ndarray:
        index = index if isinstance(index, tuple) else (index,)
        index = index + (slice(None),) * (self.ndim - len(index))
        pairs = zip(index, self.shape, strict=True)
        ranges = [s.indices(n) if isinstance(s, slice) else None for s, n in pairs]
        if None in ranges or any(r[2] != 1 for r in ranges if r):  # not a box: read, then index
            return self[tuple(slice(None) for _ in self.shape)][index]
        start = [r[0] for r in ranges if r]
        count = [max(r[1] - r[0], 0) for r in ranges if r]
        out = np.empty(count, self.dtype)
        if out.size == 0:
            return out
        bindings = _bindings(self.path)
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
            adios, io, engine = _open(bindings, path, bindings.Mode.ReadRandomAccess, "read")
        except ReplayError as exc:
            raise ReplayError(f"step {step}: {exc}") from None
        _READERS[key] = (threading.Lock(), adios, io, engine)
        while len(_READERS) > _OPEN_READERS:
            _close(_READERS.popitem(last=False)[1])
        return key, _READERS[key]


def _forget(key: tuple[str, int]) -> None:
    with _READERS_LOCK:
        reader = _READERS.pop(key, None)
    if reader is not None:
        try:
            reader[3].Close()  # its lock is held by the caller
        except Exception as exc:
            logger.debug("deisa replay: closing %s: %s", key[0], adios2_message(exc))


def _close(reader: tuple[threading.Lock, Any, Any, Any]) -> None:
    lock, _, _, engine = reader
    with lock:
        engine.Close()
