"""An array's attributes on the analytics' side (:class:`AttrsView`, shared by the live arrays
and those of a Replay): its static ones updated by those each step brought; runs in the
analytics' process. The values are plain (:mod:`deisa.wire.attributes`)."""

from __future__ import annotations

from typing import Any

from ..wire.attributes import openpmd_record


class AttrsView:
    """:attr:`attrs` and :meth:`attrs_of` of a :class:`~deisa.analysis._reading.StepArray`,
    from :meth:`_static_attrs` and ``_attr_changes`` (step -> the attributes new or changed at
    that step), which the array fills as it learns its steps."""

    _attr_changes: dict[int, dict[str, Any]]

    def _static_attrs(self) -> dict[str, Any]:
        """The array's attributes before its first step (a live array's open metadata)."""
        return {}

    def _resolve_int(self, step: int) -> int:  # the StepArray's
        raise NotImplementedError

    @property
    def attrs(self) -> dict[str, Any]:
        """The array's attributes as of the latest step known (:attr:`steps`): its static ones
        (``ArraySpec(attrs=)``; an ADIOS2 io's at its first step), updated by those each step
        set (``Bridge.publish(attrs=)``; the engine's attributes new or changed at the step);
        plain values (numbers, strings, lists). :meth:`attrs_of` gives them as of a step."""
        merged = dict(self._static_attrs())
        for step in sorted(self._attr_changes):
            merged.update(self._attr_changes[step])
        return merged

    def attrs_of(self, step: int) -> dict[str, Any]:
        """The array's attributes as of ``step`` (a step number; negative: from the end): the
        static ones updated by those of every step up to ``step``; what
        ``to_xarray(step).attrs`` holds. On a live stream, waits for the step as
        ``array[step]`` does.

        Raises
        ------
        StepNotAvailableError, EndOfStreamError
            As ``array[step]``.
        """
        step = self._resolve_int(step)
        merged = dict(self._static_attrs())
        for changed in sorted(s for s in self._attr_changes if s <= step):
            merged.update(self._attr_changes[changed])
        return merged


def record_hint(name: str) -> str:
    """For a name an openPMD io's array is not published under (``/data/meshes/E/x``): the
    record name it is (``E/x``), said in a timeout's message; else nothing."""
    record = openpmd_record(name)
    if record is None:
        return ""
    return (
        f" (the deisa ADIOS2 engine publishes an openPMD code's {name!r} under its record name "
        f"{record!r}: docs/openpmd.md)"
    )
