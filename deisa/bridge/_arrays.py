"""The arrays of one rank's Bridge: :class:`Arrays`, declared once by its construction.

Built on the rank's main thread by the Bridge's construction, never changed after: read from
both threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .decomposition import ArraySpec, Decomposition


class Arrays:
    """Each array as every rank declared it, and this rank's block of each.

    Empty until :meth:`declare`, which the Bridge's construction calls once, the same on every
    rank; read-only afterwards.

    Attributes
    ----------
    decompositions : dict of str to Decomposition
        The arrays, as every rank declared them.
    specs : dict of str to ArraySpec
        This rank's block of each array.
    """

    def __init__(self) -> None:
        self._decompositions: dict[str, Decomposition] = {}
        self._specs: dict[str, ArraySpec] = {}

    def declare(
        self, mine: Mapping[str, ArraySpec], everyone: Sequence[Mapping[str, ArraySpec]]
    ) -> None:
        """Take in this rank's blocks (``mine``) and every rank's (``everyone``, in rank order:
        the ``allgather`` of ``mine``): the global array of each name."""
        for name in sorted(mine):
            specs = [specs[name] for specs in everyone]
            self._decompositions[name] = Decomposition.from_specs(name, specs)
        self._specs = dict(mine)

    @property
    def decompositions(self) -> dict[str, Decomposition]:
        """The arrays, as every rank declared them."""
        return self._decompositions

    @property
    def specs(self) -> dict[str, ArraySpec]:
        """This rank's block of each array."""
        return self._specs
