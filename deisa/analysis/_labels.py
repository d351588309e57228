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
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np

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


def step(
    array: da.Array,
    name: str,
    dims: Sequence[str] | None,
    number: int,
    attrs: Mapping[str, Any] | None = None,
) -> xr.DataArray:
    """One step's array, its axes named ``dims`` (``None``: openPMD's ``axisLabels`` if
    ``attrs`` give one per axis, else xarray's defaults), the step number its scalar
    ``"step"`` coordinate, ``attrs`` (the array's attributes as of the step) its ``.attrs``,
    with ``units`` from openPMD's ``unitDimension`` where it gives none (:func:`units`) and
    the spatial coordinates from openPMD's grid (:func:`grid_coords`)."""
    attrs = dict(attrs or {})
    ndim = array.ndim
    labels = attrs.get("axisLabels")
    if dims is None and _one_string_per_axis(labels, ndim) and len(set(labels)) == ndim:  # type: ignore[arg-type]
        dims = tuple(labels)  # type: ignore[arg-type]
    if "units" not in attrs and (text := units(attrs.get("unitDimension"))) is not None:
        attrs["units"] = text
    labelled = xarray().DataArray(
        array, dims=None if dims is None else tuple(dims), name=name, attrs=attrs
    )
    coords = grid_coords(attrs, tuple(array.shape))
    if coords:
        labelled = labelled.assign_coords(
            {d: (d, values, a) for d, (values, a) in zip(labelled.dims, coords, strict=True)}
        )
    return labelled.assign_coords({TIME_DIM: number})


# openPMD's unitDimension: the powers of the SI base units, in this order
_SI_BASE = ("m", "kg", "s", "A", "K", "mol", "cd")


def units(dimension: Any) -> str | None:
    """openPMD's ``unitDimension`` (the powers of m, kg, s, A, K, mol, cd) as a units string,
    ``"kg m s^-3 A^-1"`` (``"1"``: dimensionless); ``None`` if it is not seven numbers.

    >>> units([1.0, 1.0, -3.0, -1.0, 0.0, 0.0, 0.0])
    'm kg s^-3 A^-1'
    """
    if not isinstance(dimension, list) or len(dimension) != len(_SI_BASE):
        return None
    if not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in dimension):
        return None
    parts = []
    for unit, power in zip(_SI_BASE, dimension, strict=True):
        if power == 0:
            continue
        exponent = int(power) if float(power).is_integer() else power
        parts.append(unit if exponent == 1 else f"{unit}^{exponent}")
    return " ".join(parts) or "1"


def grid_coords(
    attrs: Mapping[str, Any], shape: tuple[int, ...]
) -> list[tuple[np.ndarray, dict[str, Any]]] | None:
    """The coordinates of a mesh's axes from openPMD's attributes: ``gridGlobalOffset[i] +
    (index + position[i]) * gridSpacing[i]`` along axis ``i`` (``position`` 0 and offset 0
    where absent), in the grid's unit (its ``unitSI``: ``gridUnitSI``); ``None`` unless
    ``gridSpacing`` gives one number per axis.
    """
    ndim = len(shape)
    spacing = attrs.get("gridSpacing")
    if not _one_number_per_axis(spacing, ndim):
        return None
    offset = attrs.get("gridGlobalOffset")
    position = attrs.get("position")
    offset = offset if _one_number_per_axis(offset, ndim) else [0.0] * ndim
    position = position if _one_number_per_axis(position, ndim) else [0.0] * ndim
    unit = attrs.get("gridUnitSI")
    coord_attrs = {"unitSI": unit} if isinstance(unit, (int, float)) else {}
    return [
        (offset[i] + (np.arange(n) + position[i]) * spacing[i], coord_attrs)  # type: ignore[index]
        for i, n in enumerate(shape)
    ]


def _one_number_per_axis(value: Any, n: int) -> bool:
    """Whether an attribute's ``value`` is a list of ``n`` numbers (booleans are not)."""
    return (
        isinstance(value, list)
        and len(value) == n
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    )


def _one_string_per_axis(value: Any, n: int) -> bool:
    """Whether an attribute's ``value`` is a list of ``n`` strings."""
    return isinstance(value, list) and len(value) == n and all(isinstance(v, str) for v in value)


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
