"""deisa.insitu.analytics: deisa-core's IDeisa on our Adapter, in process (an in-process Dask
cluster, the simulation's ranks as threads: tests/thread_comm.py)."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import STARTUP
from distributed import Client, LocalCluster
from distributed.utils_test import poll_for
from thread_comm import ThreadComm, on_ranks

pytest.importorskip("deisa.core", reason="deisa.insitu needs deisa-core: pip install deisa-core")

from deisa.core import DeisaArray, IBridge, IDeisa, Window

from deisa import split
from deisa.insitu import Bridge, Deisa
from deisa.insitu import analytics as insitu


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, Client]]:
    """An in-process cluster of two workers, its scheduler file, and the client the analytics
    uses (the default one, as deisa-dask's callbacks compute with)."""
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                     dashboard_address=":0") as local,
        Client(local, timeout=STARTUP) as client,
    ):  # fmt: skip
        path = tmp_path / "scheduler.json"
        path.write_text(json.dumps({"address": local.scheduler_address}))
        yield str(path), client


def field(step: int, rank: int) -> np.ndarray:
    return np.full((2, 4), 100.0 * step + rank)


def simulation(scheduler_file: str, steps: int, *, feedback: bool = False) -> list[Any]:
    """Two ranks: ``t`` on both, ``p`` on rank 1 only; with ``feedback``, each waits for the
    analytics' ``seen`` of a step before the next (a collective ``get``)."""

    def rank_main(comm: ThreadComm) -> Any:
        rank = comm.Get_rank()
        arrays = {"t": {"global_shape": (4, 4), "chunk_shape": (2, 4), "chunk_position": (rank, 0)}}
        if rank == 1:
            arrays["p"] = {"global_shape": (3,), "chunk_shape": (3,), "chunk_position": (0,)}
        bridge = Bridge(comm, arrays, scheduler_file=scheduler_file, go_timeout=STARTUP)
        assert isinstance(bridge, IBridge)
        for step in range(steps):
            bridge.send("t", field(step, rank), step)
            if rank == 1:
                bridge.send("p", np.full(3, float(step)), step)
            if feedback:
                poll_for(lambda s=step: bridge.get("seen", s) is not None, timeout=STARTUP)
        got = bridge.get("seen")
        bridge.close(steps)
        return got

    comms = ThreadComm.world(2)
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.extend(on_ranks(comms, rank_main)))
    thread.start()
    return [thread, results]


def test_windows_and_feedback_through_a_two_rank_simulation(cluster: tuple[str, Client]) -> None:
    scheduler_file, _ = cluster
    sim, results = simulation(scheduler_file, 4, feedback=True)
    deisa = Deisa(scheduler_file=scheduler_file, go_timeout=STARTUP)
    assert isinstance(deisa, IDeisa)
    assert set(deisa.arrays_metadata) == {"t", "p"}
    calls: list[list[int]] = []

    @deisa.register(Window("t", 2))
    def on_t(t: list[DeisaArray]) -> None:
        latest = t[-1]
        assert isinstance(latest, DeisaArray)
        assert float(latest.sum().compute()) == pytest.approx(8 * (200 * latest.t + 1))
        assert split(latest)  # the blocks' locations came along
        calls.append([a.t for a in t])
        deisa.set("seen", latest.t, latest.t)

    assert on_t.callback_id == "deisa_cb_1"
    deisa.execute_callbacks()
    sim.join(STARTUP)
    assert calls == [[0], [0, 1], [1, 2], [2, 3]]
    assert results[0] == results[1] == deque([(0, 0), (1, 1), (2, 2), (3, 3)])
    assert deisa.arrays_metadata["t"] == {"global_shape": (4, 4), "chunk_shape": (2, 4),
                                          "dtype": "float64"}  # fmt: skip
    deisa.close()


def test_and_pairs_steps_or_takes_each_and_a_failing_callback_is_handled(
    cluster: tuple[str, Client],
) -> None:
    scheduler_file, _ = cluster
    sim, _ = simulation(scheduler_file, 3)
    deisa = Deisa(scheduler_file=scheduler_file, go_timeout=STARTUP)
    pairs: list[tuple[int, int]] = []
    each: list[tuple[int, ...]] = []
    caught: list[BaseException] = []

    deisa.register_callback(lambda t, p: pairs.append((t[-1].t, p[-1].t)), "t", "p")

    @deisa.register("t", "p", when="OR")
    def either(t: list[DeisaArray], p: list[DeisaArray]) -> None:
        each.append(tuple(w[-1].t for w in (t, p) if w))

    def bad(t: list[DeisaArray]) -> None:
        if t[-1].t == 0:  # hold step 0's call until steps 1 and 2 are due behind it
            poll_for(lambda: (2, 2) in pairs, timeout=STARTUP)
        raise RuntimeError(f"step {t[-1].t}")

    def handler(exc: BaseException) -> None:
        caught.append(exc)
        raise exc  # a handler that raises unregisters its callback

    deisa.register_callback(bad, "t", exception_handler=handler)
    deisa.execute_callbacks()
    sim.join(STARTUP)
    assert pairs == [(0, 0), (1, 1), (2, 2)]
    assert len(each) == 6 and each[-1] == (2, 2)
    assert [str(e) for e in caught] == ["step 0"]  # the calls due behind it were not made
    assert "deisa_cb_3" not in deisa._callbacks
    deisa.close()


def test_registering_checks_names_and_arguments(
    cluster: tuple[str, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler_file, _ = cluster
    monkeypatch.setattr(insitu, "UNKNOWN_GRACE_S", 0.2)
    sim, _ = simulation(scheduler_file, 1)
    deisa = Deisa(scheduler_file=scheduler_file, go_timeout=STARTUP)
    with pytest.raises(ValueError, match="unknown array name: nope"):
        deisa.register_callback(print, "nope")
    with pytest.raises(TypeError, match="at least one"):
        deisa.register_callback(print)
    with pytest.raises(ValueError, match="'AND' or 'OR'"):
        deisa.register_callback(print, "t", when="SOMETIMES")  # type: ignore[arg-type]
    deisa.execute_callbacks()
    sim.join(STARTUP)
    deisa.close()


def test_without_a_simulation_the_constructor_returns_or_times_out(
    cluster: tuple[str, Client],
) -> None:
    scheduler_file, client = cluster
    deisa = Deisa(client=client, wait_for_go=False)
    assert deisa.arrays_metadata == {} and deisa.client is client
    deisa.close()
    assert client.status == "running"  # not ours to close
    with pytest.raises(TimeoutError, match="go_timeout"):
        Deisa(scheduler_file=scheduler_file, go_timeout=0.3)
