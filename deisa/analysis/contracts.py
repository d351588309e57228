"""The analytics' side of contracts: set one, and build the array of a step sent under one.

See :mod:`deisa.contract` for what a contract is.
"""

from __future__ import annotations

from typing import Any

from ..contract import Contract, ContractError, block_box, local_slices, sub_chunks
from ..wire import Route, is_ok


def set_contract(
    client: Any, name: str, contract: Contract | None, timeout: float | None
) -> Contract | None:
    """Set (or with ``None`` drop) the contract of array ``name`` from a synchronous client.

    Returns the contract as the scheduler stored it (resolved, with its version).

    Raises
    ------
    ContractError
        The contract does not fit the array, or no simulation opened the array in ``timeout``.
    """
    wire = None if contract is None else contract.to_wire()
    reply = client.sync(
        getattr(client.scheduler, Route.SET_CONTRACT.value),
        name=name,
        contract=wire,
        timeout=timeout,
    )
    if not is_ok(reply):
        raise ContractError(f"contract of {name!r} refused: {reply['message']}")
    return None if reply["contract"] is None else Contract.from_wire(reply["contract"])


def region_array(futures: dict[Any, Any], meta: dict[str, Any], wire: dict[str, Any]) -> Any:
    """The dask array of a step sent under contract ``wire``: exactly its region.

    ``futures`` are the step's blocks by key, numbered from the first block sent (see
    :class:`Plan`); the array is built from them with no task, then sliced to the region (a
    slice per block on its border, none when the region follows block edges).
    """
    import dask.array as da
    import numpy as np

    contract = Contract.from_wire(wire)
    chunks = meta["chunks"]
    box = contract.box if contract.region is not None else None
    # only the steps restricted (no region): the whole array
    blocks = tuple((0, len(c)) for c in chunks) if box is None else block_box(box, chunks)
    sub = sub_chunks(blocks, chunks)
    array = da.Array(
        dict(futures),
        next(iter(futures))[0],
        chunks=sub,
        dtype=np.dtype(meta["dtype"]),
        shape=tuple(sum(sizes) for sizes in sub),
    )
    if box is None:
        return array
    index = local_slices(box, blocks, chunks)
    if all(s.start == 0 and s.stop == n for s, n in zip(index, array.shape, strict=True)):
        return array
    return array[index]
