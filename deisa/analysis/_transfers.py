"""What workers fetched from other workers during a ``with`` block, from their own counters.

:func:`measure_incoming_transfers` checks what a split really moved, against
:attr:`deisa.analysis.splitter.Partition.bytes_to_move` (importable from
:mod:`deisa.analysis.splitter`, as before).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distributed import Client

__all__ = ["TransferMeasurement", "measure_incoming_transfers"]


@dataclass
class TransferMeasurement:
    """Data fetched by workers from other workers during a ``with`` block.

    Attributes
    ----------
    count : int
        Inter-worker fetch requests (each may carry several keys).
    nbytes : int
        Bytes received.
    exact : bool
        False when more fetches happened than the workers' transfer logs keep
        (``distributed.admin.low-level-log-length``); ``nbytes`` is then a lower bound.
    """

    count: int = 0
    nbytes: int = 0
    exact: bool = True


class measure_incoming_transfers:  # noqa: N801 - used as a function-like context manager
    """Measure inter-worker transfers during a ``with`` block, from the workers' counters.

    Reads ``WorkerState.transfer_incoming_count_total`` (semi-private) and the newest entries of
    ``Worker.transfer_incoming_log``; both are only read here. Measure after the work is done
    (e.g. after ``wait``): a fetch is counted when requested and logged when received.

    Examples
    --------
    >>> with measure_incoming_transfers(client) as moved:  # doctest: +SKIP
    ...     wait(split(x).map(fn))
    >>> moved.nbytes  # doctest: +SKIP
    0
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self.result = TransferMeasurement()
        self._before: dict[str, int] = {}

    def __enter__(self) -> TransferMeasurement:
        self._before = self.client.run(_incoming_count)
        return self.result

    def __exit__(self, *exc: object) -> None:
        after = self.client.run(_incoming_since, self._before)
        for count, nbytes, exact in after.values():
            self.result.count += count
            self.result.nbytes += nbytes
            self.result.exact = self.result.exact and exact


def _incoming_count(dask_worker: Any) -> int:
    return int(dask_worker.state.transfer_incoming_count_total)


def _incoming_since(before: dict[str, int], dask_worker: Any) -> tuple[int, int, bool]:
    new = _incoming_count(dask_worker) - before.get(dask_worker.address, 0)
    log = list(dask_worker.transfer_incoming_log)
    recent = log[len(log) - new :] if new else []
    return new, int(sum(entry["total"] for entry in recent)), new <= len(log)
