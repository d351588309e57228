"""The deisa ADIOS2 engine's attributes and array names (called from C++,
plugin/adios2/deisa_engine.cxx, on the simulation's main thread of each rank, at EndStep).

An io's ADIOS2 attributes (global ones and variables' ``var/attr``: numbers, strings, arrays of
them) are the same on every rank in ADIOS2's model: rank 0's are read at each ``EndStep`` and
each array gets those of its own path and the paths above it
(:func:`deisa.wire.attributes.of_array`). Those an array has when the engine declares it are its
static attributes (its open metadata, ``ArraySpec(attrs=)``); at each step it is published,
those new or changed since go with the step (``Bridge.set_attrs``, one ``deisa_publish``).

The arrays of an openPMD io (an ``/openPMD`` attribute) are published by their record names
(``E/x``, ``rho``, ``electrons/position/x``: :func:`deisa.wire.attributes.openpmd_record`),
which rank 0 decides and every rank learns (:meth:`EngineAttributes.names`, collective); any
other variable keeps its ADIOS2 name.

Runs in a simulation rank, on its main thread (from C++, at ``EndStep``); rank 0's names
reach the others by one ``bcast`` (mpi4py). Imports the arrays' decomposition and
:mod:`deisa.wire.attributes` only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ...wire.attributes import AttributeIndex, changes, is_openpmd, of_array, openpmd_record
from ..arrays.decomposition import ArraySpec

__all__ = ["EngineArrayNameError", "EngineAttributes"]

logger = logging.getLogger(__name__)


class EngineArrayNameError(ValueError):
    """Two ADIOS2 variables of an openPMD io that would be published under one record name."""


class EngineAttributes:
    """One engine's attributes: the name each of its arrays is published under, and what
    rank 0 has sent of each array's attributes."""

    def __init__(self) -> None:
        self._raw: dict[str, str] = {}  # published name -> ADIOS2 variable
        self._sent: dict[str, dict[str, Any]] = {}  # published name -> attributes sent

    def names(
        self, comm: Any, variables: Sequence[str], attributes: Mapping[str, Any] | None
    ) -> list[str]:
        """The names new ``variables`` are published under, the same on every rank (rank 0's
        decision, broadcast over ``comm``, a Fortran handle; collective): an openPMD io's
        records by their record names, any other variable by its ADIOS2 name.

        Raises
        ------
        EngineArrayNameError
            On every rank: two variables that would be published as one record (an openPMD
            series written group- or file-based, ``/data/%T/``, whose iterations are new
            variables): the message says to write it variable-based.
        """
        from mpi4py import MPI

        mpi = MPI.Comm.f2py(comm)
        decided: list[str] | str | None = None
        if mpi.Get_rank() == 0:
            decided = self._decide(list(variables), attributes or {})
        decided = mpi.bcast(decided, root=0)
        if isinstance(decided, str):
            raise EngineArrayNameError(decided)
        assert decided is not None
        for name, raw in zip(decided, variables, strict=True):
            self._raw[name] = raw
        return decided

    def _decide(self, variables: list[str], attributes: Mapping[str, Any]) -> list[str] | str:
        """Rank 0: the published names of ``variables``, or why they clash."""
        openpmd = is_openpmd(attributes)
        names: list[str] = []
        for raw in variables:
            record = openpmd_record(raw, attributes) if openpmd else None
            name = raw if record is None else record
            other = self._raw.get(name) or next(
                (v for n, v in zip(names, variables, strict=False) if n == name), None
            )
            if other is not None and other != raw:
                return (
                    f"deisa ADIOS2 engine: the openPMD variables `{other}' and `{raw}' are the "
                    f"same record `{name}', which the engine publishes as one array: write the "
                    'series variable-based ("iteration_encoding": "variable_based", '
                    "docs/openpmd.md), one ADIOS2 step per iteration"
                )
            names.append(name)
        if openpmd:
            renamed = {raw: n for raw, n in zip(variables, names, strict=True) if raw != n}
            if renamed:
                logger.info(
                    "deisa ADIOS2 engine: openPMD records published by their names: %s",
                    ", ".join(f"{raw} -> {n}" for raw, n in renamed.items()),
                )
        return names

    def raw(self, name: str) -> str:
        """The ADIOS2 variable the array ``name`` is published from."""
        return self._raw.get(name, name)

    def static(self, spec: ArraySpec, name: str, attributes: Mapping[str, Any]) -> ArraySpec:
        """Rank 0: ``spec`` with the attributes array ``name`` has now, its static ones."""
        found = of_array(attributes, self.raw(name))
        self._sent[name] = dict(found)
        return spec.with_attrs(found) if found else spec

    def step(self, bridge: Any, attributes: Mapping[str, Any], names: Sequence[str]) -> int:
        """Rank 0, before the step's publications: each array of ``names`` (published this
        step) gets the attributes new or changed since its previous step
        (``bridge.set_attrs``); how many arrays got some."""
        changed = 0
        index = AttributeIndex(attributes)
        for name in names:
            sent = self._sent.setdefault(name, {})
            news = changes(sent, index.of_array(self.raw(name)))
            if news:
                sent.update(news)
                bridge.set_attrs(name, news)
                changed += 1
        return changed
