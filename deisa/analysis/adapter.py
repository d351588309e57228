"""The analytics side: rebuild global dask arrays from the blocks the Bridges published.

>>> gtemp = Adapter(client)["gtemp"]          # doctest: +SKIP
>>> field = gtemp[3, :, :]                     # dask Array (NX, NY) of step 3  # doctest: +SKIP
>>> for step, field in gtemp.items(): ...      # every step until the end  # doctest: +SKIP

Steps arrive in order, one scheduler message per step (:mod:`deisa.scheduler.extension`). Taking a
step out of the scheduler's queue hands its keys to this client and frees room for bridges
blocked by ``buffer_nb``. An array for one step is built straight from the blocks' own keys: it
holds the futures and adds no task, and the data lives as long as the array (or anything
computed from it) does.

Each Adapter is one *consumer*: every Adapter attached to an array receives every step, unless
Adapters share a ``group`` name, whose members share the steps (each step goes to one of them).
Several arrays of the same step are read together with :meth:`Adapter.zip`, sliding windows of
steps with :meth:`ArrayDescriptor.windows`. See ``docs/streams.md``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from typing import Any, Literal

from distributed import Client

from ..scheduler import StreamExtension
from ..wire import SCHEDULER_FILE_ENV, Reply, Route
from ._reading import EndOfStreamError, StepArray, StepNotAvailableError
from ._step_reader import StepReader
from ._stream_array import ArrayDescriptor, StepLostError

__all__ = [
    "Adapter",
    "ArrayDescriptor",
    "EndOfStreamError",
    "StepLostError",
    "StepNotAvailableError",
]

logger = logging.getLogger(__name__)


class Adapter(StepReader):
    """Access, from a Dask client, the arrays that simulation Bridges publish.

    Parameters
    ----------
    client
        A connected, synchronous :class:`distributed.Client`.
    timeout
        Seconds to wait for a step (or the array's description) before raising
        :class:`TimeoutError` saying what is missing. ``None``: wait forever.
    group
        ``None`` (default): this Adapter is a consumer of its own and receives every step of
        the arrays it reads, whatever other Adapters read (fan-out). A name: the Adapters of
        that group (on any client) share the steps, each step going to the member that asks
        first; the group counts as one consumer.
    on_lost
        What iterating (:meth:`ArrayDescriptor.items`, ``windows``, :meth:`zip`) does at a step
        lost with a worker (its blocks died before this Adapter took it): ``"warn"`` (default)
        skips it with one :class:`RuntimeWarning` naming the step and the worker; ``"raise"``
        raises :class:`StepLostError` (iterating again goes on after it). Selecting a lost step
        (``descriptor[t]``) always raises :class:`StepLostError`; :meth:`stats` lists them.

    Notes
    -----
    The Adapter attaches to an array at its first access that contacts the scheduler (its
    ``meta``, ``shape``, a selection or an iteration) and receives the steps published from then
    on; the first consumer of a run also receives the steps that waited for one (within
    ``buffer_nb``). Until it detaches, the simulation's flow control waits for it like for any
    other consumer (``buffer_nb`` counts the slowest). It detaches on :meth:`close` (or at the end
    of its ``with`` block), or when its client closes or dies: at once for a closed client or a
    killed process, within ``distributed.comm.timeouts.tcp`` (30 s by default) for a host that
    vanished. Steps it has taken stay alive as long as its arrays do.

    An analytics started by ``deisa-run`` (or by hand with ``DEISA_SCHEDULER_FILE`` set)
    connects with :meth:`from_env`, which also owns and closes its client.

    Examples
    --------
    >>> client = Client(scheduler_file="scheduler.json")  # doctest: +SKIP
    >>> gtemp = Adapter(client)["gtemp"]  # doctest: +SKIP
    >>> gtemp[0, :, :].mean().compute()  # doctest: +SKIP

    Two analyses side by side, each seeing every step, and a pool of two workers sharing them:

    >>> with Adapter(client) as pca, Adapter(client) as plot:  # doctest: +SKIP
    ...     ...
    >>> pool = Adapter(client, group="histograms")  # in two processes  # doctest: +SKIP

    Under ``deisa-run --analytics my.py -- ...``:

    >>> with Adapter.from_env() as adapter:  # doctest: +SKIP
    ...     for step, field in adapter["gtemp"].items(): ...
    """

    def __init__(
        self,
        client: Client,
        *,
        timeout: float | None = 60.0,
        group: str | None = None,
        on_lost: Literal["warn", "raise"] = "warn",
    ) -> None:
        if group is not None and (not isinstance(group, str) or not group):
            raise ValueError(f"group={group!r} must be a non-empty string or None")
        if on_lost not in ("warn", "raise"):
            raise ValueError(f"on_lost={on_lost!r} must be 'warn' or 'raise'")
        self.client = client
        self.timeout = timeout
        self.group = group
        self.on_lost = on_lost
        self.consumer = f"{client.id}/{uuid.uuid4().hex[:12]}"
        client.register_plugin(StreamExtension())
        from ..worker import install  # deisa's worker services, unless already there

        install(client)
        self._descriptors: dict[str, ArrayDescriptor] = {}
        self._closed = False
        self._owns_client = False

    @classmethod
    def from_env(cls, **kwargs: Any) -> Adapter:
        """An Adapter on a client of its own, connected to the scheduler file named by the
        environment variable ``DEISA_SCHEDULER_FILE`` (which ``deisa-run`` sets).

        The Adapter owns that client: :meth:`close` (or the end of its ``with`` block) closes
        it after detaching.

        Parameters
        ----------
        **kwargs
            The Adapter's keyword arguments (``timeout``, ``group``...).

        Raises
        ------
        RuntimeError
            ``DEISA_SCHEDULER_FILE`` is not set.
        FileNotFoundError
            The file it names does not exist.

        Examples
        --------
        >>> with Adapter.from_env(timeout=120) as adapter:  # doctest: +SKIP
        ...     print(adapter["gtemp"][0].mean().compute())
        """
        path = os.environ.get(SCHEDULER_FILE_ENV, "")
        if not path:
            raise RuntimeError(
                f"Adapter.from_env(): the environment variable {SCHEDULER_FILE_ENV} is not set; "
                "set it to the file written by `dask scheduler --scheduler-file FILE' (deisa-run "
                "sets it), or connect a Client yourself: Adapter(Client(scheduler_file=...))"
            )
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"Adapter.from_env(): {SCHEDULER_FILE_ENV}={path!r} names no file; is the "
                "scheduler started (`dask scheduler --scheduler-file FILE')?"
            )
        client = Client(scheduler_file=path)
        try:
            adapter = cls(client, **kwargs)
        except BaseException:
            client.close()
            raise
        adapter._owns_client = True
        return adapter

    def close(self) -> None:
        """Detach from every array: the stream stops waiting for this consumer and releases the
        steps it had not taken (unless another consumer still has to take them). Arrays it
        handed out stay valid, unless the Adapter owns its client (:meth:`from_env`): it closes
        it then. Idempotent; the Adapter cannot read afterwards."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.client.status == "running":
                self._request(Route.DETACH, consumer=self.consumer)
        finally:
            if self._owns_client:
                self.client.close()

    def __getitem__(self, name: str) -> ArrayDescriptor:
        """The descriptor of array ``name``; cheap, it contacts nobody until subscripted."""
        if name not in self._descriptors:
            self._descriptors[name] = ArrayDescriptor(self, name)
        return self._descriptors[name]

    def stats(self) -> dict[str, Any]:
        """Scheduler-side counters: calls per route, steps published, taken and queued; and
        ``"lost"``: per array this Adapter reads, the ``(step, worker)`` of each step it found
        lost with a worker (the scheduler's ``streams`` list them too, until the run ends)."""
        stats = self._request(Route.STATS)
        stats["lost"] = {
            name: [(step, worker) for step, workers in d._lost.items() for worker in workers]
            for name, d in self._descriptors.items()
            if d._lost
        }
        return stats

    def set(self, name: str, value: Any) -> int:
        """Set the steering value ``name`` that the simulation reads with :meth:`Bridge.get`.

        The latest value wins: a value set twice before the simulation reads it is read with
        its second value; reads do not consume it. ``None`` clears it (readers get their
        default). A C code reads it through the PDI plugin's ``read`` section.

        Parameters
        ----------
        name
            Non-empty name, shared with the simulation (e.g. ``"stop"``).
        value
            ``None``, a ``bool``, ``int``, ``float``, ``complex`` or ``str``, or a numpy array
            or scalar (not of objects); 1 MiB at most. Never pickled: see
            :mod:`deisa.analysis.steering`.

        Returns
        -------
        int
            How many times ``name`` was set so far, this call included.

        Raises
        ------
        deisa.wire.SteeringError
            A bad name, a value of another type (a list: send ``np.asarray(value)``), or too
            large; the message names the value's type and what is accepted.

        See Also
        --------
        deisa.analysis.steering : the semantics of steering values.

        Examples
        --------
        >>> Adapter(client).set("stop", True)  # doctest: +SKIP
        1
        """
        from . import steering

        return steering.set_value(self.client, name, value)

    def _request(self, route: Route, **kwargs: Any) -> Reply:
        """Call ``route`` on the scheduler (:mod:`deisa.wire`) and return its reply."""
        if self._closed and route not in (Route.DETACH, Route.STATS):
            raise RuntimeError(f"this Adapter was closed: it cannot read any more ({route})")
        reply: Reply = self.client.sync(getattr(self.client.scheduler, route.value), **kwargs)
        return reply

    def _read_together(self, arrays: list[StepArray]) -> None:
        """:meth:`zip`'s one read a step: the ``deisa_get`` of every array in ``arrays`` that
        needs its next step from the scheduler, sent at once and awaited together (one
        round trip for a step of many arrays instead of one each, so that the analytics keeps
        up and the steps it is done with are let go, and their shared-memory slots reused, at
        once). Each reply is then taken in array by array, as one ``deisa_get`` would be; the
        first error is raised once every reply is in."""
        due = [a for a in arrays if isinstance(a, ArrayDescriptor) and a._due()]
        if len(due) < 2:
            return  # one array: its own deisa_get, when its iteration asks for it
        if self._closed:
            raise RuntimeError(f"this Adapter was closed: it cannot read any more ({Route.GET})")
        get = getattr(self.client.scheduler, Route.GET.value)

        async def together() -> list[Any]:  # a failed call does not lose the others' steps
            calls = (get(**a._get_call()) for a in due)
            return list(await asyncio.gather(*calls, return_exceptions=True))

        replies: list[Any] = self.client.sync(together)
        failure: BaseException | None = None
        for array, reply in zip(due, replies, strict=True):
            try:
                if isinstance(reply, BaseException):
                    raise reply
                array._receive(reply)
            except Exception as exc:  # the others' steps are taken in first
                failure = failure or exc
        if failure is not None:
            raise failure
