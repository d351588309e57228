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
gather each).

Runs on the rank's main thread, like :meth:`deisa.Bridge.publish`.

Imports the asynchronous publisher only.
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
