"""Attributes through a real Bridge (``COMM_SELF``) to a real scheduler and the Adapter, in
process: static ones (``ArraySpec(attrs=)``) in the open metadata, per step ones
(``publish(attrs=)``, ``set_attrs``) with the step's one ``deisa_publish``, merged by the
analytics (``attrs``, ``attrs_of``, the xarray view's ``.attrs`` and coordinates)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deisa import Adapter, ArraySpec, Bridge, BridgeOptions
from deisa.wire.attributes import AttrsError

STATIC = {
    "unitDimension": [1.0, 1.0, -3.0, -1.0, 0.0, 0.0, 0.0],
    "unitSI": 2.5,
    "gridSpacing": [0.5, 0.25],
    "gridGlobalOffset": [1.0, -1.0],
    "position": [0.5, 0.0],
    "axisLabels": ["y", "x"],
    "gridUnitSI": 1e-6,
    "geometry": "cartesian",
}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_attributes_reach_the_analytics_static_and_per_step(
    local_client, tmp_path: Path, mode: str
) -> None:
    from mpi4py import MPI

    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps({"address": local_client.scheduler.address}))
    spec = ArraySpec("float64", (4, 6), (0, 0), (4, 6), attrs=STATIC)
    options = BridgeOptions(mode=mode)
    field = np.arange(24.0).reshape(4, 6)
    with Bridge(str(path), {"E/x": spec}, comm=MPI.COMM_SELF, options=options) as bridge:
        bridge.publish("E/x", field, 0, attrs={"time": 0.0, "dt": 0.1})
        bridge.publish("E/x", field + 1, 1, attrs={"time": 0.1, "dt": 0.1})  # dt unchanged
        bridge.set_attrs("E/x", {"time": np.float32(0.25), "note": ["a", "b"]})
        bridge.publish("E/x", field + 2, 2)
        bridge.publish("E/x", field + 3, 3)  # nothing new
    with Adapter(local_client, timeout=60) as adapter:
        array = adapter["E/x"]
        taken = dict(array.items(as_xarray=True))
        assert list(taken) == [0, 1, 2, 3]
        assert array.attrs_of(0) == {**STATIC, "time": 0.0, "dt": 0.1}
        assert array.attrs_of(1) == {**STATIC, "time": 0.1, "dt": 0.1}
        latest = {**STATIC, "time": 0.25, "dt": 0.1, "note": ["a", "b"]}
        assert array.attrs_of(2) == array.attrs_of(3) == array.attrs == latest
        assert type(array.attrs["time"]) is float  # a float32 widened, exactly
        # what travelled per step: only what changed
        assert array._attr_changes == {
            0: {"time": 0.0, "dt": 0.1},
            1: {"time": 0.1},
            2: {"time": 0.25, "note": ["a", "b"]},
        }
        labelled = taken[1]
        assert labelled.attrs == {**STATIC, "time": 0.1, "dt": 0.1, "units": "m kg s^-3 A^-1"}
        assert labelled.dims == ("y", "x")  # openPMD's axisLabels name the unnamed axes
        np.testing.assert_array_equal(labelled["y"], 1.0 + (np.arange(4) + 0.5) * 0.5)
        np.testing.assert_array_equal(labelled["x"], -1.0 + np.arange(6) * 0.25)
        assert labelled["x"].attrs == {"unitSI": 1e-6}
        np.testing.assert_array_equal(labelled.values, field + 1)


def test_attributes_that_are_not_plain_are_refused_naming_the_key(
    local_client, tmp_path: Path
) -> None:
    from mpi4py import MPI

    with pytest.raises(AttrsError, match=r"attrs\['bad'\]=\{'a': 1\} is not a plain value"):
        ArraySpec("float64", (4,), (0,), (4,), attrs={"bad": {"a": 1}})
    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps({"address": local_client.scheduler.address}))
    spec = ArraySpec("float64", (4,), (0,), (4,))
    with Bridge(
        str(path), {"u": spec}, comm=MPI.COMM_SELF, options=BridgeOptions(mode="sync")
    ) as b:
        with pytest.raises(AttrsError, match=r"attrs of 'u'\['when'\]=<object"):
            b.set_attrs("u", {"when": object()})
        with pytest.raises(KeyError, match="set_attrs\\('v'\\): not one of the Bridge's arrays"):
            b.set_attrs("v", {"a": 1})
        b.publish("u", np.zeros(4), 0)
    with Adapter(local_client, timeout=60) as adapter:
        assert adapter["u"].attrs_of(0) == {}
