"""ADIOS2 BP4/BP5 output for :class:`deisa.Replay`: its arrays chunked as the ranks wrote them.

An ADIOS2 code that wrote ``out.bp`` (BP4 or BP5, a directory holding ``md.idx``) kept, for each
step and each global array, every block a writer ``Put``: its start and count. A
:class:`BPFile` reads that metadata once, in one pass over the steps (no data read), with the
serial ``adios2`` package (``pip install 'deisa-insitu[adios2]'``); each array's step is then a
lazy dask array whose chunks are those blocks (on each axis, from one block's start to the next,
over every step: exactly the blocks for any decomposition that forms a grid, the same cut finer
otherwise), each chunk read with ADIOS2 by whichever process computes it (:class:`BPBlock`).

An array whose shape changes between steps (``SetShape``), whose blocks change (several
``Put``s a writer, boxes that move, ``JoinedDim``), or whose blocks do not hold every element
once (a refined level) is read as the live run reads a moving array: each step its own layout,
assembled from its blocks (:mod:`deisa.analysis._replay_moving`).

- The time axis is the ADIOS2 step (``0 .. N-1``, or ``Replay(steps=...)``'s numbers, one per
  ADIOS2 step); an array written every 10th step has the steps 0, 10, 20...
- A global single value (a ``Put`` of a variable defined without shape: a step counter, a time)
  is a one-element array of its name, with the steps that wrote it, as the deisa ADIOS2 engine
  publishes it (docs/adios2.md): ``replay["step"][t].compute()[0]``, ``replay.zip("U",
  "step")``. The values are read in the same pass (they are in the metadata).
- Local arrays and local values (no global shape), and strings, are not arrays of a Replay: they
  are left out, with one log line naming them.

Files are data, never code, and never hang a reader (docs/security.md, "Replay's inputs"): an
array written with an ADIOS2 operator is refused at ``replay[name]`` unless trusted
(:mod:`deisa.analysis._replay_operators`); a shape (a moving step's blocks) is checked against
the file's data and the grid of blocks against ``max_metadata_bytes``; every read is bounded
(:func:`~deisa.analysis._replay_bp_io.open_bp`), a failed one a :class:`ReplayError` naming the
file and the step.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize

from ..wire.attributes import (
    AttributeIndex,
    AttrsError,
    changes,
    is_openpmd,
    openpmd_record,
    plain,
)
from ..wire.layout import LayoutError
from . import _labels
from ._replay_array import ReplayArray, ReplayError, UnknownArrayError
from ._replay_bp_io import BPBlock, adios2_message, bindings_of, close_bp, open_bp
from ._replay_moving import MovingReplayArray, bp_layout, check_layouts, layout_error
from ._replay_operators import bp4_operators, describe

__all__ = ["BPFile", "adios2_message", "is_bp"]

logger = logging.getLogger(__name__)

#: ADIOS2's type names, those of a Replay's arrays (``long double`` has no portable numpy twin)
DTYPES = {
    "char": "int8", "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16",
    "uint16_t": "uint16", "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64",
    "uint64_t": "uint64", "float": "float32", "double": "float64", "float complex": "complex64",
    "double complex": "complex128", "complex": "complex64",
}  # fmt: skip
_Block = tuple[tuple[int, ...], tuple[int, ...], int]  # a block's start, count and writer


def is_bp(path: str) -> bool:
    """Whether ``path`` is ADIOS2 output: a BP4/BP5 directory (it holds ``md.idx``)."""
    return os.path.isfile(os.path.join(path, "md.idx"))


def _data_bytes(path: str) -> int:
    """The bytes of the data files (``data.*``) of the BP output ``path``."""
    with os.scandir(path) as entries:
        return sum(e.stat().st_size for e in entries if e.name.startswith("data.") and e.is_file())


@dataclass
class _Variable:
    """One global array of a BP file: what every step's metadata says of it."""

    name: str
    type: str
    shape: tuple[int, ...]  # at its first step
    steps: list[int] = field(default_factory=list)  # ADIOS2 steps holding blocks of it
    shapes: list[tuple[int, ...]] = field(default_factory=list)  # at each of those steps
    blocks: list[list[_Block]] = field(default_factory=list)  # (start, count, writer)
    operator: str | None = None  # written with an ADIOS2 operator: its name ("": unnamed)

    def moves(self) -> bool:
        """Whether its shape or its blocks change between steps, or some step's blocks do not
        hold every element once: each step is then its own layout (its blocks may move
        between writers and keep one grid)."""
        boxes = [{(start, count) for start, count, _ in blocks} for blocks in self.blocks]
        return (
            any(s != self.shape for s in self.shapes)
            or any(b != boxes[0] for b in boxes)
            or sum(math.prod(count) for _, count in boxes[0]) != math.prod(self.shape)
        )


def _integers_of(text: str) -> tuple[int, ...]:
    """The integers of ADIOS2's text of a list (``"0, 4"``; ``""``: none), as ``BlocksInfo``
    and ``AvailableVariables`` give a start, a count or a shape."""
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def _block(info: dict[str, str]) -> _Block:
    """A block's start, count and writer, from what ADIOS2's ``BlocksInfo`` says of it."""
    return _integers_of(info["Start"]), _integers_of(info["Count"]), int(info.get("WriterID", 0))


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
        self._attributes: list[dict[str, Any]] = []  # each ADIOS2 step's, by ADIOS2's names
        self.count = self._scan(bindings_of(path))
        self._indexes: list[AttributeIndex | None] = [None] * len(self._attributes)
        # an openPMD file's records by their names (E/x, electrons/position/x), as in situ
        first = self._attributes[0] if self._attributes else {}
        self._records: dict[str, str] = {}  # record name -> ADIOS2 variable
        if is_openpmd(first):
            for raw in [*self._variables, *self._values]:
                record = openpmd_record(raw, first)
                if record is not None:
                    self._records[record] = raw
        self._numbers = list(range(self.count)) if steps is None else [int(s) for s in steps]
        self._index_of = {number: i for i, number in enumerate(self._numbers)}
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
        _, io, engine = open_bp(bindings, self.path, bindings.Mode.Read, "deisa-replay-scan")
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
                close_bp(engine, self.path)
            except Exception as exc:  # the error that stopped the scan is the one to tell
                logger.debug("deisa replay: closing %s: %s", self.path, adios2_message(exc))
        return count

    def _scan_step(
        self, bindings: Any, io: Any, engine: Any, step: int, bp4: dict[str, str]
    ) -> None:
        self._attributes.append(_read_attributes(io, self.path))
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
        shape = _integers_of(info.get("Shape", ""))
        found = self._variables.setdefault(name, _Variable(name, info["Type"], shape))
        if operator is not None and found.operator is None:
            found.operator = operator
        if not blocks:
            return
        if not found.steps:
            found.shape = shape
        found.steps.append(step)
        found.shapes.append(shape)
        found.blocks.append([_block(b) for b in blocks])

    # -- what Replay asks ------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The global arrays of at least one axis, in name order (an openPMD file's records by
        their record names, ``E/x``, as the deisa engine publishes them)."""
        arrays = self._raw_names()
        renamed = {n: r for r, n in self._records.items()}
        return sorted(renamed.get(n, n) for n in arrays)

    def _raw_names(self) -> list[str]:
        """The global arrays of at least one axis and the single values, by ADIOS2's names."""
        return [n for n, v in self._variables.items() if v.shape and v.steps] + list(self._values)

    def array(self, name: str, chunks: Any, dims: Any) -> ReplayArray:
        """The saved array ``name``: its steps, each a lazy dask array chunked as written, with
        the attributes of each step (:mod:`deisa.wire.attributes`, as the deisa engine sends
        them: those new or changed at a step the array is written)."""
        renamed = {n: r for r, n in self._records.items()}
        if name in renamed:  # an openPMD record asked for by its ADIOS2 variable
            record = renamed[name]
            raise UnknownArrayError(
                f"{name!r} in {self.path} is the openPMD record {record!r}: a Replay, as the "
                f"live run, names it so (replay[{record!r}])"
            )
        raw = self._records.get(name, name)
        array = self._raw_array(raw, chunks, dims)
        array._attr_changes = self._attr_changes(raw, [self._index_of[s] for s in array.steps])
        array.name = name
        return array

    def _attr_changes(self, raw: str, indices: list[int]) -> dict[int, dict[str, Any]]:
        """The attributes of ``raw`` new or changed at each of its ADIOS2 steps ``indices``."""
        seen: dict[str, Any] = {}
        found: dict[int, dict[str, Any]] = {}
        for i in indices:
            if self._indexes[i] is None:  # each step's attributes indexed once, for every array
                self._indexes[i] = AttributeIndex(self._attributes[i])
            index = self._indexes[i]
            assert index is not None
            news = changes(seen, index.of_array(raw))
            if news:
                seen.update(news)
                found[self._numbers[i]] = news
        return found

    @property
    def steps(self) -> list[int]:
        """The step number of every ADIOS2 step of the file."""
        return list(self._numbers)

    def _raw_array(self, name: str, chunks: Any, dims: Any) -> ReplayArray:
        """The ADIOS2 variable ``name``: its steps, each a lazy dask array chunked as written."""
        if name in self._values:
            return self._value_array(name, dims)
        variable = self._variables.get(name)
        if variable is None or name not in self._raw_names():
            present = ", ".join(repr(n) for n in self.names) or "none"
            kind = self._left_out.get(name)  # there, but no array: say what it is
            what = f" ({kind}): not a global array (read it with adios2);" if kind else ";"
            raise UnknownArrayError(
                f"no array {name!r} in {self.path}{what} the arrays there are: {present}"
            )
        dtype = _dtype(variable, self.path)
        if variable.moves():
            return self._moving_array(variable, dtype, chunks, dims)
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

    def _moving_array(
        self, variable: _Variable, dtype: np.dtype, chunks: Any, dims: Any
    ) -> MovingReplayArray:
        """``variable``, whose shape or blocks change between steps: each step assembled from
        its blocks, as the live run's (:mod:`deisa.analysis._replay_moving`)."""
        name, path = variable.name, self.path
        steps = [self._numbers[s] for s in variable.steps]
        layouts = []
        for step, shape, blocks in zip(steps, variable.shapes, variable.blocks, strict=True):
            try:
                layouts.append(bp_layout(shape, blocks))
            except LayoutError as exc:
                raise layout_error(name, path, step, exc) from None
        if self._trusted_operator(variable) is None:
            held = _data_bytes(path)
            for step, layout in zip(steps, layouts, strict=True):
                size = sum(box.size for box in layout.boxes) * dtype.itemsize
                if size > held:
                    raise ReplayError(
                        f"the blocks of {name!r} at step {step} in {path} hold {size} bytes, "
                        f"more than the {held} bytes of its data files (data.*): step {step} "
                        "cannot be read (a data file missing, truncated or crafted)"
                    )
        check_layouts(name, path, steps, layouts, self._max_metadata_bytes)
        token = tokenize(path, name, os.stat(os.path.join(path, "md.idx")).st_mtime_ns)

        def box(i: int, k: int, grid: tuple[tuple[int, ...], ...]) -> da.Array:
            at = layouts[i].boxes[k]
            block = BPBlock(path, name, i, at.count, dtype, steps[i], origin=at.start)
            return da.from_array(
                block,
                chunks=grid,
                name=f"replay-{name}-{token}-{tokenize(grid)}-{i}-{k}",
                meta=np.empty((0,) * len(at.count), dtype),
            )

        labels = _labels.chosen(name, None, dims, len(variable.shape), path)
        return MovingReplayArray(name, steps, layouts, dtype, box, path, labels, chunks)

    def _trusted_operator(self, variable: _Variable) -> str | None:
        """The operator ``variable`` was written with (None: none), refused if not trusted."""
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
        return variable.operator

    def _check_data(self, variable: _Variable, dtype: np.dtype) -> None:
        """Refuse an operator not trusted, and a shape the file's data cannot hold."""
        name = variable.name
        if self._trusted_operator(variable) is not None:
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
                for start, count, _ in blocks:
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
    for start, count, _ in blocks:
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


def _read_attributes(io: Any, path: str) -> dict[str, Any]:
    """The attributes of the step an ``io`` reads, by ADIOS2's names, as plain values (a single
    value as itself, an array as a list: :func:`deisa.wire.attributes.plain`); one of another
    type (complex) is left out, with a log line."""
    found: dict[str, Any] = {}
    for name in io.AvailableAttributes():
        attribute = io.InquireAttribute(name)
        kind = attribute.Type()
        values = list(attribute.DataString()) if kind == "string" else attribute.Data().tolist()
        try:
            found[name] = plain(values[0] if attribute.SingleValue() else values, name)
        except (AttrsError, IndexError) as exc:
            logger.info("deisa replay: %s: attribute %r (%s) left out: %s", path, name, kind, exc)
    return found
