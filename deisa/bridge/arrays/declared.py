"""The arrays of one rank's Bridge: :class:`Arrays`, declared by its construction, and more by
:meth:`deisa.Bridge.declare`.

Runs in a simulation rank: written on its main thread (an array, once declared, never changes);
read from both threads. Imports :mod:`.decomposition` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .decomposition import ArraySpec, Decomposition, DecompositionError


class Arrays:
    """Each array as every rank declared it, and this rank's block of each.

    Empty until :meth:`declare`, which the Bridge's construction calls, the same on every rank,
    and :meth:`deisa.Bridge.declare` again with arrays not declared yet.

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
        the ``allgather`` of ``mine``): the global array of each name.

        Raises
        ------
        DecompositionError
            The same on every rank: a name declared already, blocks that do not tile.
        """
        for name in sorted(mine):
            if name in self._decompositions:
                raise DecompositionError(f"array {name!r} is declared already")
        built = {
            name: Decomposition.from_specs(name, [specs[name] for specs in everyone])
            for name in sorted(mine)
        }
        self._decompositions.update(built)
        self._specs.update(mine)

    @property
    def decompositions(self) -> dict[str, Decomposition]:
        """The arrays, as every rank declared them."""
        return self._decompositions

    @property
    def specs(self) -> dict[str, ArraySpec]:
        """This rank's block of each array."""
        return self._specs
