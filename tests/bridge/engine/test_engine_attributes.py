"""deisa.bridge.engine.attributes: the engine's array names (openPMD records) and the attributes
rank 0 sends, with a real mpi4py communicator (COMM_SELF) and a recording Bridge stand-in."""

from __future__ import annotations

from typing import Any

import pytest

from deisa import ArraySpec
from deisa.bridge.engine.attributes import EngineArrayNameError, EngineAttributes

OPENPMD = {"/openPMD": "1.1.0", "/basePath": "/data", "/data/time": 0.0, "/author": "me"}


class Recorder:
    """What ``set_attrs`` was given, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def set_attrs(self, name: str, attrs: dict[str, Any]) -> None:
        self.calls.append((name, attrs))


def comm() -> int:
    from mpi4py import MPI

    return int(MPI.COMM_SELF.py2f())


def test_an_openpmd_ios_variables_are_published_by_their_record_names() -> None:
    engine = EngineAttributes()
    raws = ["/data/meshes/E/x", "/data/particles/e/weighting", "/data/other"]
    assert engine.names(comm(), raws, OPENPMD) == ["E/x", "e/weighting", "/data/other"]
    assert engine.raw("E/x") == "/data/meshes/E/x" and engine.raw("T") == "T"
    # a plain io keeps ADIOS2's names
    assert EngineAttributes().names(comm(), ["/data/meshes/E/x"], {"units": "K"}) == [
        "/data/meshes/E/x"
    ]


def test_two_variables_of_one_record_are_refused_naming_them() -> None:
    engine = EngineAttributes()
    engine.names(comm(), ["/data/0/meshes/E/x"], {**OPENPMD, "/basePath": "/data/%T/"})
    with pytest.raises(
        EngineArrayNameError, match=r"`/data/0/meshes/E/x' and `/data/1/meshes/E/x'"
    ):
        engine.names(comm(), ["/data/1/meshes/E/x"], {**OPENPMD, "/basePath": "/data/%T/"})


def test_static_attributes_then_only_what_changed_at_each_step() -> None:
    engine = EngineAttributes()
    io = {**OPENPMD, "/data/meshes/E/x/unitSI": 2.0}
    (name,) = engine.names(comm(), ["/data/meshes/E/x"], io)
    spec = engine.static(ArraySpec("float64", (4,), (0,), (4,)), name, io)
    assert spec.attrs == {"openPMD": "1.1.0", "basePath": "/data", "author": "me", "time": 0.0,
                          "unitSI": 2.0}  # fmt: skip
    bridge = Recorder()
    assert engine.step(bridge, io, [name]) == 0  # step 0: as declared
    assert engine.step(bridge, {**io, "/data/time": 0.5}, [name]) == 1
    assert engine.step(bridge, {**io, "/data/time": 0.5, "/new": [1, 2]}, [name]) == 1
    assert bridge.calls == [("E/x", {"time": 0.5}), ("E/x", {"new": [1, 2]})]
