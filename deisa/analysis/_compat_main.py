"""pdidev/deisa main's client (2024-2025: ``Deisa(nb_workers, scheduler_file_name=...)``), on
top of the :class:`~deisa.analysis.adapter.Adapter`; what maps to what and what is refused:
:mod:`deisa.analysis.compat` and ``docs/migrating.md``.

>>> deisa = Deisa(scheduler_file_name="scheduler.json", nb_workers=2)  # doctest: +SKIP
>>> arrays = deisa.get_deisa_arrays()  # once the simulation has started  # doctest: +SKIP
>>> gt = arrays["global_t"][:, :, :]  # the whole declared time axis, lazy  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from collections import namedtuple
from typing import Any

import dask.array as da
from distributed import Client

from ..wire import SCHEDULER_FILE_ENV
from ._compat_client import CompatClient, announce, open_names, wait_until_closed
from ._live_time_axis import time_axis_array
from ._released import is_int
from .adapter import Adapter

logger = logging.getLogger(__name__)

__all__ = ["Deisa", "DeisaArray", "DeisaArrays", "MySlice"]

MySlice = namedtuple("MySlice", ["start", "stop", "step"])
"""One axis of a selection, ``(start, stop, step)``, as that generation recorded it."""


def selection_of(index: Any, shape: tuple[int, ...]) -> list[MySlice]:
    """What ``DeisaArray.__getitem__`` records of ``index`` on an array of ``shape``: one
    :data:`MySlice` per axis that an integer, a slice or the ``...`` selects (negative bounds
    from the end, ``None`` bounds the axis' ends); other indices (lists, ``None``) are left to
    dask and recorded for no axis, as that generation did.

    Raises
    ------
    ValueError
        A slice step below 0, or more than one ``...``, as that generation raised.
    """
    items = index if isinstance(index, tuple) else (index,)
    if sum(item is Ellipsis for item in items) > 1:
        raise ValueError("Only one use of Ellipsis allowed.")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        named = sum(1 for item in items if item is not None and item is not Ellipsis)
        items = items[:at] + (slice(None),) * (len(shape) - named) + items[at + 1 :]
    selection: list[MySlice] = []
    axis = 0
    for item in items:
        if item is None:
            continue
        size = shape[axis] if axis < len(shape) else 0
        if is_int(item):
            start = int(item) + size if item < 0 else int(item)
            selection.append(MySlice(start, start + 1, 1))
        elif isinstance(item, slice):
            if item.step is not None and item.step < 0:
                raise ValueError(f"{item.step} only positive step values are accepted")
            start = 0 if item.start is None else item.start + size * (item.start < 0)
            stop = size if item.stop is None else item.stop + size * (item.stop < 0)
            selection.append(MySlice(start, stop, 1 if item.step is None else item.step))
        axis += 1
    return selection


class DeisaArray:
    """One array of the simulation, as that generation's ``DeisaArray``.

    Attributes
    ----------
    name
        The array's name.
    array
        The whole array as one lazy dask array, time first: the time length the simulation's
        YAML declares (``size: [500, ...]``), its steps read when computed (see
        :mod:`deisa.analysis._live_time_axis`); without a declared length, the steps received
        to the end of the stream. Deleted by :meth:`gc`.
    selection
        ``None`` until indexed, then the last index as one :data:`MySlice` per axis.
    """

    def __init__(self, name: str, array: da.Array) -> None:
        self.name = name
        self.array = array
        self.selection: list[MySlice] | None = None

    def __repr__(self) -> str:
        return f"<DeisaArray {self.name!r}: selection {self.selection!r}>"

    def __getitem__(self, index: Any) -> da.Array:
        """``array[index]`` (integers, negative ones too, slices and one ``...``, as that
        generation took them; what dask takes besides), recorded as :attr:`selection`."""
        self.selection = selection_of(index, self.array.shape)
        result: da.Array = self.array[index]
        return result

    def gc(self) -> None:
        """Drop :attr:`array` (the steps live as long as the arrays computed from it)."""
        del self.array


class DeisaArrays:
    """The arrays of the simulation, by name, with that generation's contract calls.

    Its contract is what that generation's was: the selections, by name, which did not change
    what the simulation sent ("contracts are not handled yet" in its code). Here too every
    step is sent whole; to send less, set a contract with
    :meth:`deisa.analysis.adapter.ArrayDescriptor.require` (``docs/migrating.md``).
    """

    def __init__(self, arrays: dict[str, da.Array]) -> None:
        self.arrays = [DeisaArray(name, array) for name, array in arrays.items()]
        self.contract: dict[str, list[MySlice] | None] | None = None

    def __getitem__(self, name: str) -> DeisaArray:
        for array in self.arrays:
            if array.name == name:
                return array
        raise ValueError(f"{name} array does not exist in Deisa data store.")

    def handle_contract(self) -> None:
        """:meth:`generate_contract`, then :meth:`share_contract`."""
        self.generate_contract()
        self.share_contract()

    def generate_contract(self) -> dict[str, list[MySlice] | None]:
        """The selection of every array, by name (``None``: not indexed yet)."""
        self.contract = {array.name: array.selection for array in self.arrays}
        logger.debug("deisa compat: generated contract %s", self.contract)
        return self.contract

    def share_contract(self) -> None:
        """Record the contract as shared; the simulation still sends every step whole, as that
        generation's bridges did (see the class docstring)."""
        logger.debug("deisa compat: contract %s kept (every step is sent whole)", self.contract)

    def gc(self) -> None:
        """:meth:`DeisaArray.gc` of every array."""
        for array in self.arrays:
            array.gc()


class Deisa:
    """pdidev/deisa main's ``Deisa``: a client, the simulation's arrays.

    Parameters
    ----------
    nb_workers
        The Dask workers to wait for.
    scheduler_file_name, scheduler_address, cluster
        Where the scheduler is, the first given of ``cluster`` (a ``LocalCluster`` or any
        cluster object), ``scheduler_address`` and ``scheduler_file_name``.
    use_ucx
        Accepted: the protocol is the scheduler's address (a ``ucx://`` scheduler, with
        distributed-ucxx installed).
    timeout
        Seconds to wait for the workers, the simulation's arrays or a step; ``None``
        (default): forever, as that generation did.

    Raises
    ------
    RuntimeError
        None of ``cluster``, ``scheduler_address`` and ``scheduler_file_name`` is given.
    """

    def __init__(
        self,
        nb_workers: int,
        scheduler_file_name: str | os.PathLike[str] | None = None,
        scheduler_address: str | None = None,
        cluster: Any = None,
        use_ucx: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        if not is_int(nb_workers) or nb_workers < 1:
            raise ValueError(f"nb_workers={nb_workers!r} must be a positive integer")
        announce("deisa.Deisa")
        self.timeout = timeout
        self.client = _connect(cluster, scheduler_address, scheduler_file_name)
        try:
            self.client.wait_for_workers(int(nb_workers), timeout=timeout)
            self.adapter = Adapter(self.client, timeout=timeout)
        except BaseException:
            self.client.close()
            raise
        self._made: list[DeisaArrays] = []

    def get_client(self) -> Client:
        """The client; its ``compute`` and ``persist`` also accept the fork's ``release=``."""
        return self.client

    def get_deisa_arrays(self) -> DeisaArrays:
        """The simulation's arrays, once it has opened them (as that generation waited for its
        first rank): each a lazy dask array of its whole time axis (:class:`DeisaArray`)."""
        names = open_names(self.adapter, self.timeout)
        arrays = DeisaArrays({name: self._whole(name) for name in names})
        self._made.append(arrays)
        return arrays

    def wait_for_last_bridge_and_shutdown(self, delay: float = 2) -> None:
        """Return once the simulation has closed every array it opened (checked every
        ``delay`` seconds); then shut the scheduler and its workers down, unless ``deisa-run``
        started this analytics (it owns them, and stops them itself): then close the client."""
        wait_until_closed(
            self.adapter,
            delay,
            lambda: any(self.adapter[n].steps or self.adapter[n].ended for n in self._names()),
        )
        if os.environ.get(SCHEDULER_FILE_ENV):
            self.client.close()
        else:
            self.client.shutdown()

    def _whole(self, name: str) -> da.Array:
        descriptor = self.adapter[name]
        length = descriptor.time_length
        if length is None:  # no declared length: the steps, to the end of the stream
            whole: da.Array = descriptor[...]
            return whole
        return time_axis_array(descriptor, length)

    def _names(self) -> list[str]:
        return [array.name for made in self._made for array in made.arrays]


def _connect(cluster: Any, address: str | None, scheduler_file: Any) -> CompatClient:
    """The client, on the first of ``cluster``, ``address`` and ``scheduler_file`` given."""
    if cluster is not None:
        return CompatClient(cluster)
    if address:
        return CompatClient(address)
    if scheduler_file:
        return CompatClient(scheduler_file=os.fspath(scheduler_file))
    raise RuntimeError(
        "Deisa(nb_workers, ...) needs where the scheduler is: "
        "scheduler_file_name='scheduler.json', scheduler_address='tcp://...', or "
        "cluster=a LocalCluster"
    )
