"""The 0.3.x generation of the released DEISA client (pdidev/deisa 0.3.0-0.3.2) and the older
``dask_interface.Initialization`` adaptor, on top of the :class:`~deisa.analysis.adapter.Adapter`
and contracts; what maps to what and what blocks when: :mod:`deisa.analysis.compat`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import dask.array as da
from distributed import Client

from ..contract import ContractError
from ._compat_client import CompatClient, announce, open_names, wait_until_closed
from ._reading import EndOfStreamError
from ._released import NotSupportedError, Selection, is_int, read_config
from .adapter import Adapter

logger = logging.getLogger(__name__)

__all__ = ["Adaptor", "Deisa", "DeisaArray", "DeisaArrays", "Initialization"]


# -- the arrays -------------------------------------------------------------------------------


class DeisaArray:
    """One array of the simulation, selected as the released ``deisa_array`` was.

    Parameters
    ----------
    adapter
        The :class:`~deisa.analysis.adapter.Adapter` that reads it.
    name
        The array's name.
    time_length
        The fixed length of its time axis if known (a PDI YAML given as ``config``), else
        ``None``: then the length the simulation declared (its YAML's fixed time size, in the
        array's metadata), else the time axis ends with the stream.

    Attributes
    ----------
    selection
        ``"All"`` until a selection is made, then one ``(start, stop, step)`` per axis (time
        first), as :meth:`DeisaArrays.check_contract` reports it.
    """

    def __init__(self, adapter: Adapter, name: str, time_length: int | None = None) -> None:
        self.name = name
        self.selection: Any = "All"
        self.descriptor = adapter[name]
        self._time_length = time_length
        self._wanted: Selection | None = None  # the selection the contract follows
        self._set: Any = ()  # what this object last set as the contract (() : nothing yet)

    def __repr__(self) -> str:
        return f"<DeisaArray {self.name!r}: selection {self.selection!r}>"

    def get_name(self) -> str:
        return self.name

    def __getitem__(self, index: Any) -> da.Array:
        """The steps and region ``index`` selects, as one dask array (time first); the
        selection becomes the array's contract at once (see the module docstring)."""
        selection = self._parse(index)
        self.selection, self._wanted = selection.released(), selection
        self._sign()
        return self._read(selection)

    def get_array(self) -> da.Array:
        """Every step of the array, whole, stacked on a leading time axis; asks the simulation
        for everything (no contract). Returns at the end of the stream (or of the fixed time
        length)."""
        selection = self._parse(Ellipsis)
        self._sign(selection)
        return self._read(selection)

    def set_selection(self, selection: Any) -> None:
        """Set the selection in the released form, applied at the next
        :meth:`DeisaArrays.validate_contract`: ``"All"`` or one ``(start, stop, step)`` per
        axis, time first (``None`` bounds: the axis' ends)."""
        if selection is None:
            raise NotSupportedError(
                f"set_selection(None) on {self.name!r}: a contract cannot withhold a whole "
                "array; remove its entry from the plugin's YAML (or its `when') instead"
            )
        if selection == "All":
            self.reset_selection()
            return
        index = tuple(slice(*axis) for axis in selection)
        self._wanted = self._parse(index)
        self.selection = self._wanted.released()

    def reset_selection(self) -> None:
        """Back to the whole array, applied at the next :meth:`DeisaArrays.validate_contract`."""
        self.selection, self._wanted = "All", None

    def gc(self) -> None:
        """Nothing to release: this object holds no data (a step's data lives as long as the
        dask arrays built on it)."""

    @property
    def time_length(self) -> int | None:
        """The length of the time axis: the configuration's, else the simulation's."""
        if self._time_length is not None:
            return self._time_length
        return self.descriptor.time_length

    def _parse(self, index: Any) -> Selection:
        return Selection.parse(index, self.name, self.descriptor.shape, self.time_length)

    def _sign(self, selection: Selection | None = None) -> None:
        """Make the contract of ``selection`` (by default the current one) the array's, unless
        it already is or the stream has ended (nothing more will be sent)."""
        selection = selection or self._wanted
        wanted = None if selection is None else selection.contract(self.descriptor.shape)
        if self.descriptor.ended or wanted == self._set:
            return
        if wanted is None:
            self.descriptor.drop_contract()
        else:
            self.descriptor.require(*wanted)
        self._set = wanted
        logger.debug("deisa compat: contract of %r: %s", self.name, wanted or "everything")

    def _read(self, selection: Selection) -> da.Array:
        d, time_index = self.descriptor, selection.steps()
        if isinstance(time_index, int):
            steps = [d._resolve_int(time_index)]
        else:
            steps = d._resolve_many(time_index)
            if not steps:
                raise EndOfStreamError(
                    f"the time selection {selection.time} of {self.name!r} holds no published "
                    f"step (steps received: {d.steps})"
                )
        box = selection.box()
        parts = [self._crop(step, box) for step in steps]
        data = parts[0] if isinstance(selection.time, int) else da.stack(parts)
        local = selection.local()
        index = local if isinstance(selection.time, int) else (slice(None), *local)
        trivial = all(i == slice(None) or i == slice(None, None, 1) for i in index)
        return data if trivial else data[index]

    def _crop(self, step: int, box: tuple[tuple[int, int], ...]) -> da.Array:
        """``box`` (global indices) of ``step``, sent whole or under a contract's region."""
        array = self.descriptor[step]
        contract = self.descriptor.contract_of(step)
        held = tuple((0, n) for n in self.descriptor.shape)
        if contract is not None and contract.region is not None:
            held = contract.box
        if any(lo < h0 or hi > h1 for (lo, hi), (h0, h1) in zip(box, held, strict=True)):
            raise ContractError(
                f"step {step} of {self.name!r} was sent under the contract "
                f"{contract.describe() if contract else ''}: it holds only that region, not "
                f"the selection {[f'{lo}:{hi}' for lo, hi in box]}; select it before reading"
            )
        index = tuple(slice(lo - h0, hi - h0) for (lo, hi), (h0, _) in zip(box, held, strict=True))
        return array if box == held else array[index]


class DeisaArrays:
    """The arrays of a simulation, as the released ``get_deisa_arrays()`` gave them: indexed
    by name, with the contract calls.

    Parameters
    ----------
    adapter
        The :class:`~deisa.analysis.adapter.Adapter` that reads them.
    declared
        The arrays a PDI YAML declared, with their fixed time length (``None``: unknown);
        without it, any name is looked up on the scheduler when selected.
    """

    def __init__(self, adapter: Adapter, declared: dict[str, int | None] | None = None) -> None:
        self.adapter = adapter
        self._declared = declared
        self.arrays = [DeisaArray(adapter, n, t) for n, t in (declared or {}).items()]
        self.contract: dict[str, Any] | None = None

    def __getitem__(self, name: str) -> DeisaArray:
        for array in self.arrays:
            if array.name == name:
                return array
        if self._declared is not None:
            raise ValueError(
                f"{name} array does not exist in Deisa data store (the configuration declares "
                f"{', '.join(map(repr, self._declared)) or 'none'})"
            )
        array = DeisaArray(self.adapter, name)
        self.arrays.append(array)
        return array

    def get_deisa_array(self, name: str) -> DeisaArray:
        return self[name]

    def check_contract(self) -> dict[str, Any]:
        """The selection of every array known so far, by name (see
        :attr:`DeisaArray.selection`); computed again at each call."""
        self.generate_contract()
        assert self.contract is not None
        return self.contract

    def generate_contract(self) -> None:
        self.contract = {a.name: a.selection for a in self.arrays}

    def validate_contract(self) -> None:
        """Make every array's selection its contract: a no-op for the selections made by
        indexing (their contract was set then); the ones changed since by
        :meth:`DeisaArray.set_selection` or :meth:`reset_contract` are set now and apply from
        a step boundary on."""
        for array in self.arrays:
            array._sign()
        self.gc()

    def reset_contract(self) -> None:
        for array in self.arrays:
            array.reset_selection()

    def drop_arrays(self, names: Any) -> None:
        raise NotSupportedError(
            f"drop_arrays({names!r}): a contract cannot withhold a whole array (and the "
            "released drop_arrays failed with a TypeError); remove the array's entry from the "
            "plugin's YAML, or give it a `when' that is false"
        )

    def add_deisa_array(self, deisa_a: Any, name: str | None = None) -> None:
        raise NotSupportedError(
            "add_deisa_array(): a contract applies to the arrays the simulation publishes; an "
            "array computed from them needs none: keep it in a variable"
        )

    def gc(self) -> None:
        for array in self.arrays:
            array.gc()


# -- the adaptor --------------------------------------------------------------------------------


class Adaptor:
    """The released ``Adaptor``: a client on the scheduler file, the simulation's arrays.

    Parameters
    ----------
    nb_workers
        Dask workers to wait for before returning (``None``: none).
    scheduler_info
        The scheduler file (``dask scheduler --scheduler-file``).
    timeout
        Seconds to wait for the workers, an array's opening or a step; ``None`` (default):
        forever, as the released library did.

    Attributes
    ----------
    client
        The :class:`distributed.Client` (``get_client()``); its ``compute`` and ``persist``
        accept, and ignore, the ``release=`` of the DEISA fork of distributed.
    adapter
        The :class:`~deisa.analysis.adapter.Adapter` on it: the new API, for what has no
        released form.
    """

    def __init__(
        self,
        nb_workers: int | None,
        scheduler_info: str | os.PathLike[str],
        *,
        timeout: float | None = None,
        _declared: dict[str, int | None] | None = None,
    ) -> None:
        if is_int(scheduler_info):
            raise NotSupportedError(
                "Initialization(Ssize, Sworker): the first dask_interface form (whose "
                "get_data() returned nothing); write Initialization(nb_workers, "
                "'scheduler.json')"
            )
        if nb_workers is not None and (not is_int(nb_workers) or nb_workers < 1):
            raise ValueError(f"nb_workers={nb_workers!r} must be a positive integer or None")
        announce(f"deisa.{type(self).__name__}")
        self.timeout = timeout
        self.client = CompatClient(scheduler_file=os.fspath(scheduler_info))
        try:
            if nb_workers is not None:
                self.client.wait_for_workers(int(nb_workers), timeout=timeout)
            self.adapter = Adapter(self.client, timeout=timeout)
        except BaseException:
            self.client.close()
            raise
        self._declared = _declared
        self._made: list[DeisaArrays] = []

    def get_client(self) -> Client:
        return self.client

    def get_deisa_arrays(self) -> DeisaArrays:
        """The arrays, to select from (``arrays[name][...]``) and sign a contract on."""
        arrays = DeisaArrays(self.adapter, self._declared)
        self._made.append(arrays)
        return arrays

    def get_dask_arrays(self, as_list: bool = False) -> dict[str, da.Array]:
        """Every array of the simulation, whole: ``{name: dask array (time, ...)}``.

        The names are those of the configuration's PDI YAML, else those the scheduler knows
        once the simulation has opened one; returns at the end of their streams (or of their
        fixed time lengths). Asks the simulation for everything (no contract).
        """
        if as_list:
            raise NotSupportedError(
                "get_dask_arrays(as_list=True) / get_data(as_list=True): (the released one "
                "failed with a NameError) iterate the steps with the Adapter instead: "
                "for step, field in adaptor.adapter[name].items(): ..."
            )
        arrays = self.get_deisa_arrays()
        names = list(self._declared) if self._declared else self._open_names()
        selected = [arrays[name] for name in names]
        if len(selected) == 1:
            return {names[0]: selected[0].get_array()}
        for array in selected:
            array._sign(array._parse(Ellipsis))
        whole = {a.name: tuple((0, n) for n in a.descriptor.shape) for a in selected}
        series: dict[str, list[da.Array]] = {name: [] for name in names}
        for step, parts in self.adapter.zip(*names, how="any"):
            for array, part in zip(selected, parts, strict=True):
                length = array.time_length
                if part is not None and (length is None or step < length):
                    series[array.name].append(array._crop(step, whole[array.name]))
        return {name: da.stack(parts) for name, parts in series.items() if parts}

    get_data = get_dask_arrays  # the Initialization(...) adaptor's name

    def wait_for_last_bridge_and_shutdown(self, delay: float = 2) -> None:
        """Wait until the simulation has closed every array it opened (checking every
        ``delay`` seconds), then shut the scheduler and its workers down."""
        wait_until_closed(
            self.adapter,
            delay,
            lambda: any(
                a.descriptor.steps or a.descriptor.ended for m in self._made for a in m.arrays
            ),
        )
        self.client.shutdown()

    def _open_names(self) -> list[str]:
        """The arrays a simulation has opened, once there is one."""
        return open_names(self.adapter, self.timeout)


class Deisa(Adaptor):
    """The released ``Deisa(scheduler_info, config)`` of pdidev/deisa 0.3.x.

    Parameters
    ----------
    scheduler_info
        The scheduler file.
    config
        0.3.0 and 0.3.1: a YAML file, the examples' ``config.yml`` (its ``workers``: the
        workers to wait for) or the simulation's PDI YAML in the released plugin's grammar
        (its ``deisa_arrays``: names and fixed time lengths); 0.3.2: the number of workers.
    use_ucx
        Accepted: the protocol is the scheduler file's address (a ``ucx://`` scheduler, with
        distributed-ucxx installed); it set an environment variable read at import only.
    timeout
        As :class:`Adaptor`'s.

    Examples
    --------
    >>> arrays = Deisa("scheduler.json", "config.yml").get_deisa_arrays()  # doctest: +SKIP
    >>> gt = arrays["global_t"][...]  # doctest: +SKIP
    """

    def __init__(
        self,
        scheduler_info: str | os.PathLike[str],
        config: int | str | os.PathLike[str],
        use_ucx: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        workers: int | None
        declared: dict[str, int | None] | None = None
        if is_int(config):
            workers = int(config)  # type: ignore[arg-type]
        elif isinstance(config, (str, os.PathLike)):
            parsed = read_config(config)
            workers, declared = parsed.workers, parsed.arrays or None
        else:
            raise TypeError(f"config={config!r} must be a YAML file or a number of workers")
        super().__init__(workers, scheduler_info, timeout=timeout, _declared=declared)


def Initialization(  # noqa: N802 (the released name)
    nb_workers: int, scheduler_info: str | os.PathLike[str], *, timeout: float | None = None
) -> Adaptor:
    """The older ``dask_interface.Initialization(Sworker, scheduler_info)``: an
    :class:`Adaptor`, whose ``get_data()`` gives every array whole."""
    return Adaptor(nb_workers, scheduler_info, timeout=timeout)
