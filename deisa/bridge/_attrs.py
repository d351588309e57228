"""The Bridge's attributes (:meth:`AttrsCalls.set_attrs`, ``publish(..., attrs=)``): checked
plain on the calling rank, rank 0's kept for the array's next publication
(:class:`~deisa.bridge._steps.StepBook`), then sent with that step's one ``deisa_publish``.
Runs on the simulation's main thread (rank 0's registration pops them on the loop thread).

Imports the Bridge's parts, the arrays' decomposition and :mod:`deisa.wire.attributes` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..wire.attributes import plain_attrs

if TYPE_CHECKING:
    from ._parts import BridgeParts
    from .arrays.decomposition import Decomposition


class AttrsCalls:
    """:class:`~deisa.bridge.bridge.Bridge`'s calls about attributes."""

    rank: int
    _parts: BridgeParts

    @property
    def decompositions(self) -> dict[str, Decomposition]:
        """The arrays, as every rank declared them."""
        return self._parts.arrays.decompositions

    def set_attrs(self, name: str, attrs: Mapping[str, Any]) -> None:
        """Set attributes of array ``name`` from its next published step on (the time of the
        step, a unit that changes; static ones: ``ArraySpec(..., attrs=)``); not collective:
        rank 0's are sent, with that step's one message to the scheduler, and the analytics
        reads them as ``adapter[name].attrs_of(step)`` (and ``.attrs``, the latest). Values are
        plain: numbers, strings, lists of them (:mod:`deisa.wire.attributes`). An attribute is
        never removed; setting the same value again sends nothing new (docs/adios2.md,
        "Attributes").

        Raises
        ------
        KeyError
            ``name`` is not one of the Bridge's arrays.
        deisa.wire.attributes.AttrsError
            A value that is not plain (a :class:`TypeError`), naming its key.
        """
        if name not in self.decompositions:
            raise KeyError(
                f"set_attrs({name!r}): not one of the Bridge's arrays {sorted(self.decompositions)}"
            )
        checked = plain_attrs(attrs, f"attrs of {name!r}")
        if self.rank == 0:
            self._parts.steps.set_attrs(name, checked)

    def _attach_attrs(
        self, name: str, step: int, revision: int, attrs: Mapping[str, Any] | None, ok: bool
    ) -> None:
        """``publish``: ``attrs`` set, and on rank 0 those set so far go with this publication
        (``ok``: one that will be registered), those new or changed only."""
        if attrs is not None:
            self.set_attrs(name, attrs)
        if self.rank == 0 and ok:
            static = self.decompositions[name].attrs
            self._parts.steps.attach_attrs(name, step, revision, static)
