"""deisa.wire.attributes: plain values, which of an io's attributes belong to an array, what
changed, openPMD record names."""

from __future__ import annotations

import numpy as np
import pytest

from deisa.wire.attributes import (
    AttrsError,
    changes,
    is_openpmd,
    of_array,
    openpmd_record,
    plain,
    plain_attrs,
)


def test_plain_values_are_python_numbers_strings_and_lists_exactly() -> None:
    assert plain(np.float32(0.1)) == float(np.float32(0.1)) != 0.1
    assert type(plain(np.float32(0.1))) is float
    assert plain(np.int64(1 << 40)) == 1 << 40 and type(plain(np.uint8(7))) is int
    assert plain(np.array([1.5, 2.5])) == [1.5, 2.5]
    assert plain(np.array(3)) == 3
    assert plain(("a", "b")) == ["a", "b"]
    assert plain(True) is True and plain("K") == "K"


@pytest.mark.parametrize(
    "value",
    [{"a": 1}, [[1, 2]], np.zeros((2, 2)), object(), 1j, None],
    ids=["dict", "nested", "2-D", "object", "complex", "None"],
)
def test_values_that_do_not_travel_plainly_are_refused_naming_the_key(value: object) -> None:
    with pytest.raises(AttrsError, match=r"(?s)attrs\['k'\]=.* is not a plain value"):
        plain_attrs({"k": value})


def test_attrs_need_a_mapping_with_string_keys() -> None:
    with pytest.raises(AttrsError, match="must be a dict"):
        plain_attrs([("k", 1)])  # type: ignore[arg-type]
    with pytest.raises(AttrsError, match="key 3 is not a string"):
        plain_attrs({3: 1})  # type: ignore[dict-item]
    assert plain_attrs(None) == {}


def test_changes_are_new_keys_and_other_values_of_other_types() -> None:
    before = {"time": 0.0, "n": 1, "nan": float("nan"), "l": [1, 2]}
    now = {"time": 0.5, "n": 1.0, "nan": float("nan"), "l": [1, 2], "new": "x"}
    assert changes(before, now) == {"time": 0.5, "n": 1.0, "new": "x"}
    assert changes(now, now) == {}


IO = {
    "/openPMD": "1.1.0",
    "/basePath": "/data",
    "/data/time": 0.5,
    "/data/meshes/E/unitDimension": [1.0, 1.0, -3.0, -1.0, 0.0, 0.0, 0.0],
    "/data/meshes/E/unitSI": 9.0,  # the record's, hidden by the component's own
    "/data/meshes/E/x/unitSI": 2.0,
    "/data/meshes/E/y/unitSI": 3.0,
    "/data/meshes/Ex/unitSI": 4.0,  # another record, whose name E/x's path begins with
    "/data/meshes/E/x/sub/key": "own, several segments",
    "__openPMD_groups/data/meshes/E": 0,
    "__openPMD_groups/": 0,
    "units": "K",
    "T/units": "degC",
}


def test_an_array_gets_its_own_then_its_parents_then_the_global_attributes() -> None:
    assert of_array(IO, "/data/meshes/E/x") == {
        "openPMD": "1.1.0",
        "basePath": "/data",
        "units": "K",
        "time": 0.5,
        "unitDimension": [1.0, 1.0, -3.0, -1.0, 0.0, 0.0, 0.0],
        "unitSI": 2.0,
        "sub/key": "own, several segments",
    }
    assert of_array(IO, "T")["units"] == "degC"  # its own beats the global one
    assert of_array(IO, "U")["units"] == "K"
    assert "unitSI" not in of_array(IO, "/data/meshes/B/x")


def test_openpmd_record_names() -> None:
    assert is_openpmd(IO) and not is_openpmd({"units": "K"})
    assert openpmd_record("/data/meshes/E/x", IO) == "E/x"
    assert openpmd_record("/data/meshes/rho", IO) == "rho"
    assert openpmd_record("/data/particles/e/position/x", IO) == "e/position/x"
    assert openpmd_record("/data/12/meshes/E/x") == "E/x"  # /data/%T/, the default
    assert openpmd_record("/data/meshes") is None and openpmd_record("/other/meshes/E") is None
    custom = {"/openPMD": "1.1.0", "/basePath": "/sim/", "/meshesPath": "fields/"}
    assert openpmd_record("/sim/fields/E/x", custom) == "E/x"
    assert openpmd_record("/sim/meshes/E/x", custom) is None
