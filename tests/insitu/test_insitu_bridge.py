"""deisa.insitu.bridge: deisa-core's IBridge on our Bridge, in process (an in-process Dask
cluster, ranks as threads: tests/thread_comm.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import STARTUP, test_env
from distributed import Client, LocalCluster
from thread_comm import ThreadComm, on_ranks

from deisa import Adapter, BridgeError
from deisa.wire import (
    insitu_control_arrays,
    insitu_control_name,
    insitu_index_name,
    insitu_value_name,
)

pytest.importorskip("deisa.core", reason="deisa.insitu needs deisa-core: pip install deisa-core")

from deisa.insitu.bridge import Bridge, _scheduler_file, metadata_spec


def meta(global_shape: tuple[int, ...], chunk: tuple[int, ...], position: tuple[int, ...],
         **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"global_shape": global_shape, "chunk_shape": chunk, "chunk_position": position, **extra}


# -- arrays_metadata -----------------------------------------------------------------------------


def test_metadata_becomes_an_array_spec_uneven_blocks_included() -> None:
    spec = metadata_spec("t", meta((10, 8), (4, 8), (1, 0)))
    assert spec is not None
    assert (spec.start, spec.shape, spec.dtype) == ((4, 0), (4, 8), np.dtype("float64"))
    last = metadata_spec("t", meta((10, 8), (4, 8), (2, 0), dtype="int32"))
    assert last is not None and (last.shape, last.dtype) == ((2, 8), np.dtype("int32"))
    assert metadata_spec("t", meta((0,), (0,), (0,))) is None  # empty: nothing to publish
    with pytest.raises(ValueError, match=r"arrays_metadata\['t'\]"):
        metadata_spec("t", meta((4,), (4,), (3,)))  # a block outside the array


def test_scheduler_file_from_deisa_dasks_variable(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:  # fmt: skip
    monkeypatch.delenv("DEISA_SCHEDULER_FILE", raising=False)
    monkeypatch.setenv("DEISA_DASK_SCHEDULER_ADDRESS", "127.0.0.1:4321")
    path, temporary = _scheduler_file(None)
    assert path == temporary and json.loads(Path(path).read_text()) == {
        "address": "tcp://127.0.0.1:4321"
    }
    Path(path).unlink()
    given = tmp_path / "scheduler.json"
    given.write_text("{}")
    monkeypatch.setenv("DEISA_DASK_SCHEDULER_ADDRESS", str(given))
    assert _scheduler_file(None) == (str(given), None)
    monkeypatch.setenv("DEISA_SCHEDULER_FILE", "ours.json")
    assert _scheduler_file(None) == ("ours.json", None)
    assert _scheduler_file("mine.json") == ("mine.json", None)


def test_control_names_round_trip() -> None:
    name = insitu_control_name(["t", "p"])
    assert insitu_control_arrays(name) == ["p", "t"]
    assert insitu_control_arrays("t") is None
    assert insitu_control_arrays("deisa.insitu:not json") is None


def test_deisa_cores_validation_and_our_checks_come_first() -> None:
    comm = ThreadComm.world(1)[0]
    with pytest.raises(TypeError):
        Bridge(comm, "not a dict", wait_for_go=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown keys"):
        Bridge(comm, {"t": meta((4,), (4,), (0,), colour="red")}, wait_for_go=False)
    with pytest.raises(ValueError, match="mpi4py"):
        Bridge(comm, {"t": meta((4,), (4,), (0,))}, mode="async", wait_for_go=False)
    with pytest.raises(TypeError, match="comm and arrays_metadata only"):
        Bridge(comm, {"t": meta((4,), (4,), (0,))}, "extra", wait_for_go=False)


# -- on a cluster --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Client]]:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                     dashboard_address=":0") as local,
        Client(local, timeout=STARTUP, set_as_default=False) as client,
    ):  # fmt: skip
        path = tmp_path_factory.mktemp("insitu") / "scheduler.json"
        path.write_text(json.dumps({"address": local.scheduler_address}))
        yield str(path), client


def test_two_ranks_send_an_array_and_one_of_them_a_probe(cluster: tuple[str, Client]) -> None:
    scheduler_file, client = cluster
    comms = ThreadComm.world(2)

    def simulate(comm: ThreadComm) -> dict[str, Any]:
        rank = comm.Get_rank()
        arrays = {"field": meta((4, 6), (2, 6), (rank, 0))}
        if rank == 1:
            arrays["probe"] = meta((3,), (3,), (0,), dtype="int64")
        bridge = Bridge(comm, arrays, scheduler_file=scheduler_file, wait_for_go=False)
        for step in range(2):
            bridge.send("field", np.full((2, 6), 10.0 * step + rank), step)
            if rank == 1:
                bridge.send("probe", np.arange(3) + step, step)
        with pytest.raises(ValueError, match="unknown"):
            bridge.send("nothing", np.zeros(1), 0)
        workers = bridge.workers
        bridge.close(2)
        return workers

    adapter = Adapter(client, timeout=STARTUP)
    workers = on_ranks(comms, simulate)
    assert workers[0] == workers[1] and len(workers[0]) == 2
    fields = dict(adapter["field"].items())
    assert sorted(fields) == [0, 1]
    np.testing.assert_array_equal(client.compute(fields[1]).result()[:, 0], [10, 10, 11, 11])
    probes = {step: client.compute(a).result().tolist() for step, a in adapter["probe"].items()}
    assert probes == {0: [0, 1, 2], 1: [1, 2, 3]}
    control = insitu_control_name(["field", "probe"])
    assert adapter.stats()["streams"][control]["closed"]
    adapter.close()


def test_get_reads_the_values_set_per_timestep(cluster: tuple[str, Client]) -> None:
    scheduler_file, client = cluster
    comms = ThreadComm.world(2)
    adapter = Adapter(client)
    adapter.set(insitu_value_name("dt", 3), 0.5)
    adapter.set(insitu_value_name("dt", 5), "half")
    adapter.set(insitu_index_name("dt"), np.array([3, 5]))

    def simulate(comm: ThreadComm) -> tuple[Any, ...]:
        bridge = Bridge(comm, {"g": meta((2,), (1,), (comm.Get_rank(),))},
                        scheduler_file=scheduler_file, wait_for_go=False)  # fmt: skip
        got = (
            bridge.get("dt", 3),
            bridge.get("dt", 4, default="none"),
            bridge.get("dt"),
            bridge.get("unset"),
            bridge.get("unset", 1, 7),
        )
        bridge.close(0)
        with pytest.raises(BridgeError, match="after close"):
            bridge.get("dt", 3)
        return got

    for got in on_ranks(comms, simulate):
        assert got == (0.5, "none", deque([(3, 0.5), (5, "half")]), deque(), 7)
    adapter.close()


NEVER_CLOSED = """
from thread_comm import ThreadComm

from deisa.insitu.bridge import Bridge

arrays = {"never-closed": {"global_shape": (4,), "chunk_shape": (4,), "chunk_position": (0,)}}
bridge = Bridge(ThreadComm.world(1)[0], arrays, wait_for_go=False)
bridge.send("never-closed", __import__("numpy").arange(4.0), 0)
print("sent", flush=True)
"""  # and exits without close(), as a code may


def test_a_bridge_never_closed_leaves_no_temporary_scheduler_file(tmp_path: Path) -> None:
    """deisa-dask's ``DEISA_DASK_SCHEDULER_ADDRESS`` (an address) goes into a temporary
    scheduler file, removed at close(); a process that exits without close() leaves none
    either (it left one in the temporary directory each run)."""
    env = test_env()
    env.pop("DEISA_SCHEDULER_FILE", None)
    env["TMPDIR"] = str(tmp_path)  # where the temporary scheduler file goes
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env["PYTHONPATH"]])
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=":0") as local:  # fmt: skip
        env["DEISA_DASK_SCHEDULER_ADDRESS"] = local.scheduler_address
        proc = subprocess.run([sys.executable, "-c", NEVER_CLOSED], env=env,
                              capture_output=True, text=True, timeout=STARTUP)  # fmt: skip
    assert proc.returncode == 0 and "sent" in proc.stdout, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_go_and_the_block_checks(cluster: tuple[str, Client]) -> None:
    scheduler_file, client = cluster
    Adapter(client).set("deisa.insitu/go", None)
    comm = ThreadComm.world(1)[0]
    arrays = {"solo": meta((2,), (2,), (0,))}
    with pytest.raises(BridgeError, match="go_timeout"):
        Bridge(comm, arrays, scheduler_file=scheduler_file, go_timeout=0.3)
    Adapter(client).set("deisa.insitu/go", True)
    with (
        Bridge(comm, arrays, scheduler_file=scheduler_file, go_timeout=STARTUP) as bridge,
        pytest.raises(BridgeError, match="dtype int64, declared float64"),
    ):
        bridge.send("solo", np.zeros(2, dtype=np.int64), 0)
    Adapter(client).set("deisa.insitu/go", None)
    with Bridge(comm, arrays, scheduler_file=scheduler_file, wait_for_go=False) as bridge:
        every = list(bridge.workers)
        bridge.send("solo", np.zeros(2), 0, update_workers=True, filter_workers=lambda w: every)
        with pytest.raises(TypeError, match="non-empty"):
            bridge.send("solo", np.zeros(2), 1, filter_workers=lambda w: [])
        with pytest.raises(NotImplementedError, match="placement"):
            bridge.send("solo", np.zeros(2), 1, filter_workers=lambda w: every[:1])


def test_without_deisa_core_both_halves_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib
    import sys

    import deisa

    for module in ("deisa.insitu.bridge", "deisa.insitu.analytics"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, "deisa.core", None)  # an import of it fails
    for module in ("deisa.insitu.bridge", "deisa.insitu.analytics"):
        with pytest.raises(ImportError, match="pip install deisa-core"):
            importlib.import_module(module)
    assert deisa.Bridge.__module__ == "deisa.bridge.bridge"  # the rest of deisa is unaffected
