"""The HDF5 and Zarr side of :class:`deisa.Replay`: what a file's metadata says of its datasets,
and a dataset of one file read lazily, block by block, by whichever process computes it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _labels
from ._replay_array import ReplayError

__all__ = ["Dataset", "HDF5Block", "list_datasets", "zarr_datasets"]

_ZARR_MARKS = ("zarr.json", ".zgroup", ".zarray")  # the metadata files of Zarr 3 and 2


@dataclass(frozen=True)
class Dataset:
    """What the metadata says of one dataset of one file: enough to read it lazily."""

    path: str
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...] | None
    dims: tuple[str, ...] | None = None  # every axis's name in the file, if it names them all
    start: tuple[int, ...] | None = None  # a box's ``start`` attribute (one file per rank)
    whole: tuple[int, ...] | None = None  # its ``shape`` attribute: the step's global shape
    problem: str | None = None  # why those attributes place no box (raised when it is read)


class HDF5Block:
    """One dataset of one HDF5 file, sliced like an array; pickled as its path and name, so
    that a worker opens the file itself when it computes a block.

    ``leading``: the index of the step on the dataset's first axis (a file with a time axis,
    or a per-step file whose dataset keeps a leading axis of length 1), else ``None``.
    ``origin``: where it starts in the step's array (a box of ``shape`` elements from there,
    read with slices); default: the whole step.
    """

    def __init__(
        self,
        dataset: Dataset,
        leading: int | None,
        shape: tuple[int, ...],
        origin: tuple[int, ...] | None = None,
    ) -> None:
        self.path, self.dataset, self.leading = dataset.path, dataset.name, leading
        self.shape, self.dtype, self.ndim = shape, dataset.dtype, len(shape)
        self.origin = origin

    def __getitem__(self, index: Any) -> np.ndarray:
        import h5py

        index = index if isinstance(index, tuple) else (index,)
        if self.origin is not None:  # dask's chunk reads: one slice an axis
            index = index + (slice(None),) * (self.ndim - len(index))
            shifted = []
            for i, n, o in zip(index, self.shape, self.origin, strict=True):
                start, stop, stride = i.indices(n)
                shifted.append(slice(start + o, stop + o, stride))
            index = tuple(shifted)
        if self.leading is not None:
            index = (self.leading, *index)
        with h5py.File(self.path, "r") as f:
            return np.asarray(f[self.dataset][index])


def list_datasets(path: str, *, boxes: bool = False) -> list[Dataset]:
    """Every dataset of the HDF5 file ``path`` (in groups too: ``"group/name"``), metadata only;
    ``boxes``: with each one's ``start`` and ``shape`` attributes (a box of a step, in one file
    per rank), which must then be integers, one an axis (else the dataset's ``problem``, raised
    when its array is read)."""
    try:
        import h5py
    except ImportError as exc:
        raise ReplayError(
            f"reading {path} needs the h5py package (pip install 'deisa-insitu[posthoc]')"
        ) from exc

    if not os.path.isfile(path):
        raise ReplayError(f"{path}: not a regular file (a pipe, a device?): not an HDF5 file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise ReplayError(f"{path}: not a readable HDF5 file ({exc})") from exc
    found: list[Dataset] = []
    with f:

        def visit(name: str, item: Any) -> None:
            if isinstance(item, h5py.Dataset):
                dims = _labels.hdf5_dims(item)
                start = whole = problem = None
                if boxes:
                    try:
                        start, whole = (_box_attribute(path, name, item, a) for a in BOX_ATTRS)
                    except ReplayError as exc:  # raised when its array is asked for
                        problem = str(exc)
                info = Dataset(path, name, item.shape, item.dtype, item.chunks, dims, start, whole)
                found.append(dataclasses.replace(info, problem=problem) if problem else info)

        f.visititems(visit)
    return found


#: the attributes of a box (:func:`list_datasets`): its start, and the step's global shape
BOX_ATTRS = ("start", "shape")


def _box_attribute(path: str, name: str, item: Any, attribute: str) -> tuple[int, ...] | None:
    """The integers of ``item``'s ``attribute`` (one an axis), or ``None`` where it has none."""
    if attribute not in item.attrs:
        return None
    value = np.asarray(item.attrs[attribute])
    if value.dtype.kind not in "iu" or value.ndim > 1 or (value < 0).any():
        raise ReplayError(
            f"{path}:{name}: its {attribute!r} attribute {value.tolist()!r} is not a list of "
            "non-negative integers (a box's start, or its step's shape, one an axis)"
        )
    if value.size != len(item.shape):
        raise ReplayError(
            f"{path}:{name}: its {attribute!r} attribute {value.tolist()!r} does not give one "
            f"integer an axis of its {len(item.shape)} axes"
        )
    return tuple(int(v) for v in value.reshape(-1))


def zarr_datasets(path: str) -> list[Dataset]:
    """Every array of the Zarr store ``path`` (in groups too), metadata only; a directory that
    is no Zarr store (nor BP output, looked for first) is a :class:`ReplayError` saying what
    Replay reads."""
    if not any(os.path.exists(os.path.join(path, m)) for m in _ZARR_MARKS):
        raise ReplayError(
            f"{path} is a directory but no dataset: not ADIOS2 BP output (no md.idx) nor a Zarr "
            f"store (no {', '.join(_ZARR_MARKS)}); Replay reads an HDF5 file, a Zarr store, a "
            ".bp directory, or one file per step"
        )
    try:
        import zarr
    except ImportError as exc:
        raise ReplayError(
            f"{path} is a Zarr store (a directory): reading it needs the zarr package "
            "(pip install 'deisa-insitu[zarr]')"
        ) from exc
    try:
        group = zarr.open_group(path, mode="r")
    except Exception as exc:
        raise ReplayError(f"{path}: not a readable Zarr store ({exc})") from exc
    return [
        Dataset(
            path,
            name,
            tuple(item.shape),
            np.dtype(item.dtype),
            tuple(item.chunks),
            _labels.zarr_dims(item),
        )
        for name, item in group.members(max_depth=None)
        if isinstance(item, zarr.Array)
    ]
