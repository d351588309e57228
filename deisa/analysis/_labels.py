"""Labelled arrays: a step's dask array as an :class:`xarray.DataArray`, lazily; the names of
its axes, from a live array's metadata or from saved files.

The spatial axes take the array's dimension names (``ArraySpec(dims=...)`` on a live stream, the
file's or ``Replay(dims=...)`` on saved output), else xarray's defaults (``dim_0``...); the step
number is the coordinate :data:`~deisa.wire.TIME_DIM` (``"step"``): a scalar coordinate of one
step, the dimension coordinate of several stacked. xarray wraps the dask array as it is: nothing
is computed.

xarray is an optional dependency (``pip install "deisa-insitu[xarray]"``), imported on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import dask.array as da

from ..wire import TIME_DIM, check_dims

if TYPE_CHECKING:
    import xarray as xr

logger = logging.getLogger(__name__)

INSTALL = 'pip install "deisa-insitu[xarray]"'


class XarrayMissingError(ImportError):
    """Labelled arrays were asked for (``as_xarray=True``, ``to_xarray``) without xarray."""


def xarray() -> ModuleType:
    """The :mod:`xarray` module.

    Raises
    ------
    XarrayMissingError
        xarray is not installed; the message says how to install it.
    """
    try:
        import xarray as xr
    except ImportError as exc:
        raise XarrayMissingError(
            f"as_xarray=True (labelled arrays) needs the xarray package: {INSTALL}"
        ) from exc
    return xr


def step(array: da.Array, name: str, dims: Sequence[str] | None, number: int) -> xr.DataArray:
    """One step's array, its axes named ``dims`` (``None``: xarray's defaults), the step number
    its scalar ``"step"`` coordinate."""
    labelled = xarray().DataArray(array, dims=None if dims is None else tuple(dims), name=name)
    return labelled.assign_coords({TIME_DIM: number})


def stack(steps: Sequence[xr.DataArray]) -> xr.DataArray:
    """Steps labelled by :func:`step`, stacked along a leading ``"step"`` dimension whose
    coordinate holds their step numbers."""
    stacked: xr.DataArray = xarray().concat(steps, dim=TIME_DIM)
    return stacked


# -- the names of saved arrays' axes (deisa.Replay) -------------------------------------------


def hdf5_dims(dataset: Any) -> tuple[str, ...] | None:
    """The names of an :class:`h5py.Dataset`'s axes: each one's label, else the name of its
    first dimension scale (netCDF-4's, h5py's ``dims[i].attach_scale``); ``None`` if an axis has
    neither."""
    names: list[str] = []
    for axis in dataset.dims:
        if axis.label:
            names.append(axis.label)
        elif len(axis):
            names.append(axis[0].name.rsplit("/", 1)[-1])
        else:
            return None
    return tuple(names)


def zarr_dims(array: Any) -> tuple[str, ...] | None:
    """The names of a :class:`zarr.Array`'s axes: Zarr 3's ``dimension_names``, else the
    attribute ``_ARRAY_DIMENSIONS`` (xarray's convention); ``None`` if an axis is unnamed."""
    names = getattr(array.metadata, "dimension_names", None)
    names = names or array.attrs.get("_ARRAY_DIMENSIONS")
    if not names or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names)


def chosen(
    name: str, in_file: Sequence[str] | None, given: Any, ndim: int, source: str
) -> tuple[str, ...] | None:
    """The names of the ``ndim`` spatial axes of the saved array ``name``: the file's
    (``in_file``) if valid, else those ``given`` to ``Replay(dims=...)``, else ``None``.

    Raises
    ------
    TypeError, ValueError
        ``given`` is not one distinct name per axis; the message names ``dims[name]``.
    """
    names = check_dims(given, ndim, f"dims[{name!r}]")
    if in_file is None:
        return names
    try:
        found = check_dims(list(in_file), ndim, f"the axes of {name!r} in {source}")
    except (TypeError, ValueError) as exc:
        logger.warning("deisa replay: %s; not used as dimension names", exc)
        return names
    if names is not None and names != found:
        logger.warning(
            "deisa replay: dims[%r]=%s not used: %s names the axes of %r %s",
            name,
            names,
            source,
            name,
            found,
        )
    return found
