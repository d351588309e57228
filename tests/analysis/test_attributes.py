"""deisa.analysis._attributes: an array's attributes as of a step, and the record name a
timeout points to for an openPMD code's ADIOS2 name."""

from __future__ import annotations

from typing import Any

import pytest

from deisa.analysis._attributes import AttrsView, record_hint


class Steps(AttrsView):
    """Steps 0, 2, 5 known; static attributes and the changes of steps 2 and 5."""

    def __init__(self) -> None:
        self._attr_changes = {2: {"time": 0.5, "new": [1]}, 5: {"time": 1.0}}

    def _static_attrs(self) -> dict[str, Any]:
        return {"units": "K", "time": 0.0}

    def _resolve_int(self, step: int) -> int:
        known = [0, 2, 5]
        if step < 0:
            return known[step]
        if step not in known:
            raise KeyError(step)
        return step


def test_attrs_of_a_step_are_the_static_ones_updated_up_to_it() -> None:
    steps = Steps()
    assert steps.attrs_of(0) == {"units": "K", "time": 0.0}
    assert steps.attrs_of(2) == {"units": "K", "time": 0.5, "new": [1]}
    assert steps.attrs_of(-1) == steps.attrs == {"units": "K", "time": 1.0, "new": [1]}
    with pytest.raises(KeyError):
        steps.attrs_of(3)


def test_a_timeout_on_an_openpmd_adios2_name_names_the_record() -> None:
    assert "under its record name 'E/x'" in record_hint("/data/meshes/E/x")
    assert "'electrons/position/x'" in record_hint("/data/particles/electrons/position/x")
    assert record_hint("T") == "" and record_hint("/data/snapshot") == ""
