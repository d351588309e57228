"""One step of several arrays, published with one exchange: :class:`StepScope`
(:meth:`deisa.Bridge.step`).

A code that writes many arrays a step (openPMD's mesh components and particle records) calls
:meth:`StepScope.publish` for each inside ``with bridge.step(t) as s:``. Each array is checked,
copied and sent as by :meth:`deisa.Bridge.publish`, but in ``mode="async"`` the exchange that
each ``publish`` would post is held, and the end of the step posts one for all of them (its
call: the arrays' names and the step, so that ranks that published other arrays are named as
today), which the next call of the Bridge completes; the sends the step's publishes start reach
the Bridge's event loop together at its end (:meth:`~deisa.bridge._loop.LoopThread.batched`),
so that the blocks for one worker go in one shared-memory hand-over
(:meth:`~deisa.bridge.shm.channel.Channel.put`) and rank 0 registers the arrays in one
``deisa_publish_many``. In ``mode="sync"`` each array is registered as ``publish`` does (one
gather each). A :class:`~deisa.BridgeGroup`'s step (:meth:`deisa.BridgeGroup.step`,
:class:`GroupStepScope`) is a :class:`StepScope` on each of the rank's Bridges: one exchange
per communicator.

Runs on the rank's main thread, like :meth:`deisa.Bridge.publish`.

Imports the asynchronous publisher only (a group's Bridges are seen through their ``step``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._async import AsyncPublisher


class StepScope:
    """Step ``step`` of a :class:`~deisa.Bridge`'s arrays, published with one exchange
    (``mode="async"``); a context manager, collective: every rank enters it, publishes the same
    arrays in the same order, and leaves it.

    Examples
    --------
    >>> with bridge.step(t) as s:  # doctest: +SKIP
    ...     for name in ("Ex", "Ey", "Ez"):
    ...         s.publish(name, fields[name])
    ...     s.publish("x", positions)  # a joined moving array: this rank's particles
    """

    def __init__(
        self, publish: Callable[..., None], publisher: AsyncPublisher | None, step: int
    ) -> None:
        self._publish = publish  # the Bridge's publish
        self._publisher = publisher  # its async machinery (None: mode="sync")
        self.step = step
        self._open = False
        self._batch = contextlib.ExitStack()  # the loop's calls, held to the end of the step

    def __enter__(self) -> StepScope:
        if self._publisher is not None:
            self._publisher.begin_step()
            self._batch.enter_context(self._publisher.parts.loop.batched())
        self._open = True
        return self

    def publish(
        self,
        name: str,
        block: Any,
        *,
        start: Sequence[int] | None = None,
        shape: Sequence[int] | None = None,
    ) -> None:
        """:meth:`deisa.Bridge.publish` of ``name`` at this step (same arguments, same checks),
        its exchange held to the end of the step."""
        if not self._open:
            raise RuntimeError(f"publish({name!r}) outside its bridge.step({self.step})")
        self._publish(name, block, self.step, start=start, shape=shape)

    def __exit__(self, *exc: object) -> None:
        self._open = False
        publisher = self._publisher
        if publisher is None:
            return
        held = publisher.end_step()
        with self._batch:  # the sends reach the loop together, after the exchange is posted
            if held:  # one exchange for the step's publishes: the first problem names its array
                names = tuple(call[0] for call, _ in held)
                problem = next((f"{c[0]!r}: {p}" for c, p in held if p is not None), None)
                publisher.post((names, self.step), problem)
            publisher.parts.transport.settle()  # the step's copies are over


class GroupStepScope:
    """Step ``step`` of a :class:`~deisa.BridgeGroup`'s arrays: a :class:`StepScope` on each of
    this rank's Bridges, entered in construction order and left in reverse order (the same on
    every rank), each :meth:`publish` sent to its array's; a context manager, collective over
    each Bridge's communicator as a :class:`StepScope` is. A Bridge none of whose arrays is
    published in the step posts nothing.
    """

    def __init__(self, bridge_of: Callable[[str], Any], bridges: Sequence[Any], step: int) -> None:
        self._bridge_of = bridge_of  # the group's Bridge of an array (a BridgeError if none here)
        self._bridges = bridges
        self.step = step
        self._scopes: dict[int, StepScope] = {}  # by id of their Bridge, while open
        self._steps = contextlib.ExitStack()

    def __enter__(self) -> GroupStepScope:
        with contextlib.ExitStack() as steps:  # one that fails leaves those entered before
            scopes = {id(b): steps.enter_context(b.step(self.step)) for b in self._bridges}
            self._steps = steps.pop_all()
        self._scopes = scopes
        return self

    def publish(
        self,
        name: str,
        block: Any,
        *,
        start: Sequence[int] | None = None,
        shape: Sequence[int] | None = None,
    ) -> None:
        """:meth:`StepScope.publish` of ``name`` on the Bridge of its array (same arguments);
        a :class:`~deisa.BridgeError` if this rank holds no block of it."""
        scope = self._scopes.get(id(self._bridge_of(name)))
        if scope is None:
            raise RuntimeError(f"publish({name!r}) outside its group.step({self.step})")
        scope.publish(name, block, start=start, shape=shape)

    def __exit__(self, *exc: object) -> None:
        self._scopes = {}
        self._steps.__exit__(*exc)  # type: ignore[arg-type]
