"""Replay saved output through the Adapter's reading interface: develop on files, run in situ.

>>> gtemp = Replay("heat.h5")["gtemp"]                # doctest: +SKIP
>>> field = gtemp[10, :, :]                           # lazy dask Array of step 10  # doctest: +SKIP
>>> for step, field in gtemp.items(): ...             # every saved step  # doctest: +SKIP

A :class:`Replay` reads what a run saved (decl_hdf5's files, or any HDF5 or Zarr data laid out
the same way, or an ADIOS2 code's BP4/BP5 output) and hands out :class:`ReplayArray` objects
with the interface of the live arrays of :class:`deisa.Adapter`
(:class:`deisa.analysis._reading.StepArray`): ``[t, ...]`` on step numbers,
:meth:`~ReplayArray.items`, :meth:`~ReplayArray.windows`, :attr:`~ReplayArray.steps`, ``len``,
``dtype``, ``shape``, and :meth:`Replay.zip`. An analysis written against them runs on a live
stream unchanged.

Sources
-------
- **One file, time axis first** (``"heat.h5"``; a Zarr store: ``"heat.zarr"``): every dataset
  of shape ``(T, *shape)`` is an array of ``T`` steps. Their step numbers are those of a 1-D
  integer dataset ``step`` of length ``T`` when the file has one (``configs/heat_both.yml``
  writes it beside every 10th step: steps 0, 10, 20...), else ``0 .. T-1``. Rows after the
  ``step`` values stop increasing were never written (a run stopped early: decl_hdf5 declares
  the whole time axis up front) and are left out.
- **One file per step**, a pattern (``"data_{step}.h5"``, decl_hdf5's ``data_${step}.h5`` or a
  ``{step:05d}`` field; the step numbers are read from the names), a glob (``"data_*.h5"``: the
  last number of each name) or a list of paths (steps ``0 .. n-1`` in the list's order). Each
  file holds the step's datasets with the spatial shape, or with a leading axis of length 1.
- **One dataset per step** in one HDF5 file (``x/step_0003``, ``x/0003``, ``x_0003``,
  ``x_step_0003``): the array ``x``, its steps the numbers in the names; or in one file per
  rank (``"particles_${rank}.h5"``): joined in rank order, or boxes placed by their ``start``.
- **ADIOS2 output** (``"out.bp"``, BP4 or BP5): every global array; its steps are the ADIOS2
  steps holding it, its chunks the blocks the writers put (:mod:`deisa.analysis._replay_bp`); a
  global single value is a one-element array, as the deisa ADIOS2 engine publishes it.

An array whose shape or blocks change from step to step reads as a live moving array, each
step assembled from its blocks (:mod:`deisa.analysis._replay_moving`; docs/moving-data.md).

``steps=`` gives the step numbers explicitly, for any source.

Files are data, never code (docs/security.md, "Replay's inputs"): an ADIOS2 array written with
an operator is refused unless ``trust_operators=`` names it; what a file declares is checked
against ``max_metadata_bytes=`` and the file's size before anything is sized from it; a
truncated BP file is a :class:`ReplayError` naming the file and the step, never a read that
waits.

Labelled arrays (``items(as_xarray=True)``, ``to_xarray``) name the spatial axes after the file
where it names them: HDF5 dimension scales (or labels), the Zarr attribute
``_ARRAY_DIMENSIONS`` (or Zarr 3's ``dimension_names``), the time axis excluded; else after
``dims=`` given to :class:`Replay`; else xarray's defaults (``dim_0``...).

Everything is lazy: ``Replay(...)`` and ``replay[name]`` read the files' metadata only (all
of it, so a bad input fails there, before any step is read), and a step's dask array reads its
blocks when computed, on whatever runs the computation: dask's local scheduler, or the
cluster of a :class:`distributed.Client` if one exists (the files must then be readable from
the workers at the same path). Blocks are the run's where the source has a ``block_start``
dataset (see :mod:`deisa.analysis._blocks`), else the file's chunks, else dask's automatic ones.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize

from . import _labels, _replay_files, _replay_per_rank, _replay_per_step
from ._blocks import BLOCKS_DATASET, is_block_starts
from ._replay_array import ReplayArray, ReplayError, UnknownArrayError
from ._replay_bp import BPFile, is_bp
from ._replay_hdf5 import Dataset, HDF5Block, list_datasets, zarr_datasets
from ._replay_operators import checked_trust
from ._step_reader import StepReader

__all__ = ["Replay", "ReplayArray", "ReplayError", "UnknownArrayError"]

logger = logging.getLogger(__name__)

#: the name of the dataset holding the step numbers of a file with a time axis
STEP_DATASET = "step"
#: the default of ``Replay(max_metadata_bytes=...)``
MAX_METADATA_BYTES = 64 * 2**20


class Replay(StepReader):
    """The reading side of :class:`deisa.Adapter`, over saved output instead of a live stream.

    Parameters
    ----------
    source
        An HDF5 file or a Zarr store whose datasets have the time axis first; a pattern of one
        file per step (``"data_{step}.h5"``, ``"data_${step}.h5"``), a glob (``"data_*.h5"``)
        or a list of per-step files; an ADIOS2 ``.bp`` directory. See the module's
        documentation.
    client
        Optional :class:`distributed.Client`. Without one, computations run on dask's local
        scheduler; with one, on its cluster (it is the default scheduler of the process while
        it runs), and ``Replay`` first checks that its workers see the files.
    steps
        The step numbers of the saved steps, in order, overriding those the source gives.
    chunks
        Spatial chunks of a step's array (anything :func:`dask.array.from_array` takes);
        default: the run's blocks where the source has a ``block_start`` dataset, else the
        file's chunks, else ``"auto"``.
    dims
        Names of the spatial axes of the arrays whose file does not name them, for labelled
        arrays (``items(as_xarray=True)``): ``{"gtemp": ["x", "y"]}``. The file's names win
        (a warning is logged if they differ).
    trust_operators
        ADIOS2 output: the arrays written with an ADIOS2 operator that may be read (``["U"]``;
        ``True``: all). Reading one runs the operator's code on the file's bytes (ADIOS2's
        ``plugin`` operator loads the library the file names): trust only files of yours or of
        someone you trust. Default: none (``replay[name]`` raises a :class:`ReplayError` naming
        the array, the operator and the library).
    max_metadata_bytes
        The most bytes read or allocated from a file's declarations before any step is asked
        for (the ``step`` and ``block_start`` datasets, a BP array's grid of blocks); a file
        declaring more is refused, naming the dataset and the cap. Default 64 MiB.

    Raises
    ------
    FileNotFoundError
        A file (or every file of a pattern) is missing; the message names it.
    ReplayError
        ``steps`` that do not fit the source, a Zarr store without the ``zarr`` package, a
        directory that is no dataset, metadata over ``max_metadata_bytes``, a BP file that is
        truncated (naming the step).
    UnknownArrayError
        ``dims`` names an array the source does not hold.
    TypeError, ValueError
        ``dims`` is not a mapping, or an entry is not one distinct name per spatial axis; the
        message names the entry (``dims['gtemp']``); ``trust_operators`` is neither a boolean
        nor a collection of names; ``max_metadata_bytes`` is not a positive integer.

    Examples
    --------
    >>> replay = Replay("heat.h5")  # doctest: +SKIP
    >>> replay["gtemp"].steps  # doctest: +SKIP
    [0, 10, 20, 30]
    >>> for step, (temp, change) in replay.zip("gtemp", "gdtemp"): ...  # doctest: +SKIP
    >>> Replay("data_{step}.h5")["gtemp"][-1].mean().compute()  # doctest: +SKIP
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        client: Any = None,
        *,
        steps: Sequence[int] | None = None,
        chunks: Any = None,
        dims: Mapping[str, Sequence[str]] | None = None,
        trust_operators: bool | Collection[str] = False,
        max_metadata_bytes: int = MAX_METADATA_BYTES,
    ) -> None:
        if dims is not None and not isinstance(dims, Mapping):
            raise TypeError(
                f"dims={dims!r} must map array names to their axes' names, e.g. "
                "{'gtemp': ['x', 'y']}"
            )
        self._trust_operators = checked_trust(trust_operators)
        if (
            isinstance(max_metadata_bytes, bool)
            or not isinstance(max_metadata_bytes, int)
            or max_metadata_bytes <= 0
        ):
            raise ValueError(
                f"max_metadata_bytes={max_metadata_bytes!r} must be a positive number of bytes"
            )
        self._max_metadata_bytes = max_metadata_bytes
        self.client = client
        self._chunks = chunks
        self._dims = dict(dims or {})
        self._arrays: dict[str, ReplayArray] = {}
        self._explicit_steps = None if steps is None else [int(s) for s in steps]
        if self._explicit_steps is not None and sorted(set(self._explicit_steps)) != list(
            self._explicit_steps
        ):
            raise ReplayError(f"steps={list(steps or [])!r} must be increasing step numbers")
        self._files: list[str] = []  # per-step files, in step order
        self._file_steps: list[int] = []
        self._datasets: dict[str, Dataset] = {}  # a file with a time axis: its datasets
        self._groups: dict[str, dict[int, Dataset]] = {}  # its datasets of one step, by name
        self._ranks: list[dict[str, dict[int, list[Dataset]]]] = []  # one file a rank: groups
        self._rank_files: list[str] = []
        self._zarr = False
        self._path = ""
        self._time_steps: list[int] | None = None
        self._bp: BPFile | None = None
        self._open(source)
        self._check_names()
        if client is not None:
            self._check_workers_see_the_files()

    # -- sources -------------------------------------------------------------------------------

    def _open(self, source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> None:
        """Read the metadata of ``source``, whichever kind it is."""
        if isinstance(source, (str, os.PathLike)):
            text = os.fspath(source)
            if _replay_files.RANK_FIELD.search(text):
                self._per_rank(text)
            elif _replay_files.STEP_FIELD.search(text):
                self._files, self._file_steps = _replay_files.files_of_pattern(text)
            elif _replay_files.GLOB_CHARS.search(text):
                found = _replay_files.files_of_glob(text, self._explicit_steps)
                self._files, self._file_steps = found
            else:
                self._one_file(text)
        else:
            self._files, self._file_steps = _replay_files.files_of_list(source)
        if self._files:
            self._source = (
                self._files[0]
                if len(self._files) == 1
                else (f"{len(self._files)} files ({self._files[0]}, ...)")
            )
            self._datasets = {d.name: d for d in list_datasets(self._files[0])}
            if self._explicit_steps is not None:
                self._check_count(len(self._files), "per-step files")
                self._file_steps = self._explicit_steps

    def _per_rank(self, pattern: str) -> None:
        """One file per rank, its datasets named by step (:mod:`._replay_per_step`)."""
        if _replay_files.STEP_FIELD.search(pattern):
            raise ReplayError(f"{pattern!r}: a pattern of one file per rank has no {{step}} field")
        files, _ = _replay_files.files_of_pattern(pattern, _replay_files.RANK_FIELD, "rank")
        self._source = f"{len(files)} files, one a rank ({files[0]}, ...)"
        self._ranks = [_replay_per_rank.group_per_rank(list_datasets(f, boxes=True)) for f in files]
        self._rank_files = files

    def _check_names(self) -> None:
        """The arrays ``dims`` and ``trust_operators`` name are the source's."""
        for name in self._dims:  # checked now, with the arrays' metadata
            try:
                self[name]
            except UnknownArrayError as exc:
                raise UnknownArrayError(f"dims: {exc}") from None
        if self._bp is not None and not isinstance(self._trust_operators, bool):
            for name in sorted(self._trust_operators - set(self.names)):
                raise self._unknown(name, "trust_operators: ")

    def _one_file(self, path: str) -> None:
        path = os.path.abspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file or Zarr store (the Replay source)")
        self._path = self._source = path
        if is_bp(path):
            self._bp = BPFile(
                path,
                self._explicit_steps,
                trust_operators=self._trust_operators,
                max_metadata_bytes=self._max_metadata_bytes,
            )
            return
        if os.path.isdir(path):
            self._zarr = True
            self._datasets = {d.name: d for d in zarr_datasets(path)}
        else:
            self._datasets = {d.name: d for d in list_datasets(path)}
            self._groups = _replay_per_step.group_per_step(self._datasets.values())
        self._time_steps = self._steps_of_the_file()

    def _steps_of_the_file(self) -> list[int] | None:
        """The step numbers of a file with a time axis, from its ``step`` dataset (None: none)."""
        if self._explicit_steps is not None:
            return self._explicit_steps
        info = self._datasets.get(STEP_DATASET)
        if info is None or len(info.shape) != 1 or info.dtype.kind not in "iu":
            return None
        values = self._read_small(info).astype(np.int64)
        falls = np.flatnonzero(np.diff(values) <= 0)
        written = int(falls[0]) + 1 if falls.size else len(values)
        if written < len(values):
            logger.info(
                "deisa replay: %s: the %r dataset increases over its first %d of %d entries; "
                "the rest were never written (a run that stopped early)",
                self._path,
                STEP_DATASET,
                written,
                len(values),
            )
        return values[:written].tolist()

    def _read_small(self, info: Dataset) -> np.ndarray:
        """The whole dataset ``info`` (the step numbers, the blocks' starts), refused before
        any read if it declares more than ``max_metadata_bytes``."""
        declared = int(np.prod(info.shape, dtype=np.float64)) * info.dtype.itemsize
        if declared > self._max_metadata_bytes:
            raise ReplayError(
                f"the {info.name!r} dataset of {info.path} declares shape {info.shape} "
                f"({declared} bytes of {info.dtype}), over max_metadata_bytes="
                f"{self._max_metadata_bytes}: a crafted file, or raise the cap for a file "
                "you trust"
            )
        if self._zarr:
            import zarr

            return np.asarray(zarr.open_array(info.path, mode="r", path=info.name)[...])
        import h5py

        with h5py.File(info.path, "r") as f:
            return np.asarray(f[info.name][...])

    def _check_count(self, count: int, what: str) -> None:
        assert self._explicit_steps is not None
        if len(self._explicit_steps) != count:
            raise ReplayError(
                f"steps= gives {len(self._explicit_steps)} step numbers for {count} {what}"
            )

    def _check_workers_see_the_files(self) -> None:
        paths = self._files or self._rank_files or [self._path]
        seen = self.client.run(lambda: [os.path.exists(p) for p in paths])
        for worker, exists in seen.items():
            missing = [p for p, ok in zip(paths, exists, strict=True) if not ok]
            if missing:
                raise FileNotFoundError(
                    f"worker {worker} cannot see {missing[0]}"
                    + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                    + ": the workers read the files themselves, at the same path"
                )

    # -- arrays ----------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The arrays this source holds (datasets with a time axis, or those of the first
        per-step file; the global arrays of ADIOS2 output)."""
        if self._bp is not None:
            return self._bp.names
        if self._ranks:
            return sorted({n for rank in self._ranks for n in rank} - {BLOCKS_DATASET})
        grouped = {d.name for group in self._groups.values() for d in group.values()}
        names = [
            n for n, d in self._datasets.items() if not is_block_starts(n, d) and n not in grouped
        ]
        if self._files:
            return sorted(names)
        per_step = [n for n in self._groups if n != BLOCKS_DATASET]
        return sorted(
            [n for n in names if self._time_axis_problem(self._datasets[n]) is None] + per_step
        )

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> ReplayArray:
        """The saved array ``name``; reads the files' metadata only.

        Raises
        ------
        UnknownArrayError
            No dataset ``name``; the message lists those present.
        ReplayError
            ``name`` has no time axis, or per-step files disagree on its shape or dtype (or
            some lack it).
        """
        if name not in self._arrays:
            self._arrays[name] = self._make(name)
        return self._arrays[name]

    def close(self) -> None:
        """Nothing to release (no file is kept open); for ``with`` blocks, as an Adapter's."""

    def __repr__(self) -> str:
        return f"<Replay of {self._source}: {', '.join(self.names) or 'no array'}>"

    def _unknown(self, name: str, prefix: str = "") -> UnknownArrayError:
        present = ", ".join(repr(n) for n in self.names) or "none"
        return UnknownArrayError(
            f"{prefix}no array {name!r} in {self._source}; the arrays there are: {present}"
        )

    def _time_axis_problem(self, info: Dataset) -> str | None:
        if len(info.shape) < 2:
            return (
                f"it has shape {info.shape}: an array needs a leading time axis and at least "
                "one spatial axis"
            )
        if self._explicit_steps is not None and info.shape[0] < len(self._explicit_steps):
            return (
                f"its first axis has {info.shape[0]} entries for the "
                f"{len(self._explicit_steps)} steps of steps="
            )
        if self._explicit_steps is None and self._time_steps is not None:
            declared = self._datasets[STEP_DATASET].shape[0]
            if info.shape[0] != declared:
                return (
                    f"its first axis has {info.shape[0]} entries, the {STEP_DATASET!r} dataset "
                    f"of the step numbers {declared}"
                )
        return None

    def _make(self, name: str) -> ReplayArray:
        if self._bp is not None:
            return self._bp.array(name, self._chunks, self._dims.get(name))
        if self._ranks:
            if name not in self.names:
                raise self._unknown(name)
            ranks, cap = [rank.get(name, {}) for rank in self._ranks], self._max_metadata_bytes
            dims, given = self._dims.get(name), self._explicit_steps
            return _replay_per_rank.per_rank_array(
                name, ranks, source=self._source, dims=dims, steps=given, max_metadata_bytes=cap
            )
        if self._files:
            return self._make_per_step(name)
        if name in self._groups and name != BLOCKS_DATASET:
            return self._make_step_datasets(name)
        info = self._datasets.get(name)
        if info is None:
            raise self._unknown(name)
        problem = self._time_axis_problem(info)
        if problem is not None:
            raise ReplayError(f"{name!r} in {self._source} has no time axis: {problem}")
        steps = self._time_steps if self._time_steps is not None else range(info.shape[0])
        shape = info.shape[1:]
        chunks = self._spatial_chunks(info, shape)
        token = tokenize(info.path, name, os.stat(info.path).st_mtime_ns, chunks)
        if self._zarr:
            full = da.from_zarr(info.path, component=name, chunks=(1, *chunks))

            def build(i: int) -> da.Array:
                return full[i]

        else:

            def build(i: int) -> da.Array:
                return da.from_array(
                    HDF5Block(info, i, shape),
                    chunks=chunks,
                    name=f"replay-{name}-{token}-{i}",
                    meta=np.empty((0,) * len(shape), info.dtype),
                )

        in_file = info.dims[1:] if info.dims else None
        dims = _labels.chosen(name, in_file, self._dims.get(name), len(shape), self._source)
        return ReplayArray(name, list(steps), shape, info.dtype, chunks, build, self._source, dims)

    def _make_per_step(self, name: str) -> ReplayArray:
        infos: list[Dataset] = []
        starts: list[Dataset | None] = []
        for path in self._files:  # metadata only, every file: a bad one fails here
            found = {d.name: d for d in list_datasets(path)}
            if name not in found:
                if path == self._files[0]:
                    raise self._unknown(name)
                raise ReplayError(
                    f"{path} has no dataset {name!r}, which {self._files[0]} has; the "
                    f"per-step files must hold the same arrays"
                )
            infos.append(found[name])
            starts.append(found.get(BLOCKS_DATASET))
        return self._per_step(name, infos, self._file_steps, starts)

    def _make_step_datasets(self, name: str) -> ReplayArray:
        """The array of the datasets named ``name`` and a step number, in one file."""
        group = self._groups[name]
        numbers = sorted(group)
        if self._explicit_steps is not None:
            self._check_count(len(numbers), f"datasets of {name!r} (one a step)")
        plain = self._datasets.get(BLOCKS_DATASET)
        starts = [_replay_per_step.starts_of(self._groups, n) or plain for n in numbers]
        steps = self._explicit_steps or numbers
        return self._per_step(name, [group[n] for n in numbers], steps, starts)

    def _per_step(
        self,
        name: str,
        infos: list[Dataset],
        steps: Sequence[int],
        starts: Sequence[Dataset | None],
    ) -> ReplayArray:
        return _replay_per_step.per_step_array(
            name,
            infos,
            steps,
            source=self._source,
            chunks=self._chunker(starts),
            dims=self._dims.get(name),
            max_metadata_bytes=self._max_metadata_bytes,
        )

    def _chunker(self, starts: Sequence[Dataset | None]) -> Any:
        """The chunks of the ``i``-th step, from its ``block_start`` rows (``starts[i]``)."""

        def chunks(i: int, info: Dataset, shape: tuple[int, ...], moving: bool) -> Any:
            spec, read, source = self._chunks, self._read_small, self._source
            return _replay_per_step.step_chunks(
                info, shape, starts[i], spec=spec, read_small=read, source=source, moving=moving
            )

        return chunks

    def _spatial_chunks(self, info: Dataset, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        starts = self._datasets.get(BLOCKS_DATASET)
        if starts is not None and not is_block_starts(BLOCKS_DATASET, starts):
            starts = None
        return self._chunker([starts])(0, info, shape, False)
