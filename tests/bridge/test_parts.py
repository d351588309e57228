"""deisa.bridge._parts and the parts it holds (_arrays, _steps, _workers.Detachment, _loop): each
part owns its fields and changes them through its methods; the holder rebinds none (pure: no
MPI, no Dask)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading

import pytest
from conftest import STARTUP

from deisa.bridge._loop import LoopThread
from deisa.bridge._parts import BridgeParts
from deisa.bridge._publisher import PublishTiming
from deisa.bridge._steps import StepBook, Timings
from deisa.bridge.arrays.declared import Arrays
from deisa.bridge.arrays.decomposition import ArraySpec
from deisa.bridge.link.workers import Detachment
from deisa.bridge.options import BridgeOptions


class _Comm:
    """The one call the parts make of a communicator at their construction."""

    def Get_rank(self) -> int:  # noqa: N802 (mpi4py's name)
        return 1


def test_the_parts_cannot_be_rebound_and_start_empty() -> None:
    parts = BridgeParts.new(_Comm(), BridgeOptions(mode="sync"))
    try:
        assert parts.rank == 1 and not parts.asynchronous
        assert parts.arrays.decompositions == {} and parts.timings.all == []
        assert not parts.detached
        with pytest.raises(dataclasses.FrozenInstanceError):
            parts.routing = parts.routing  # type: ignore[misc]
    finally:
        parts.loop.stop()


def test_arrays_declare_the_global_array_of_every_rank_s_block() -> None:
    specs = [ArraySpec("f8", (2, 4), (0, 2 * r), (2, 2)) for r in range(2)]
    arrays = Arrays()
    arrays.declare({"t": specs[1]}, [{"t": spec} for spec in specs])
    assert arrays.specs == {"t": specs[1]}
    assert arrays.decompositions["t"].chunks == ((2,), (2, 2))
    assert arrays.decompositions["t"].block_index == ((0, 0), (0, 1))


def test_the_step_book_counts_revisions_and_steps_queued() -> None:
    steps = StepBook()
    assert steps.last() == ("", -1)
    assert [steps.publication("t", 3), steps.publication("t", 3), steps.publication("u", 0)] == [
        0,
        1,
        0,
    ]
    assert steps.last() == ("u", 0)
    steps.queued("t")
    steps.queued("t")
    counted = steps.queued_steps()
    counted["t"] = 99  # a copy: the book keeps its own
    assert steps.queued_steps() == {"t": 2}


def test_timings_sum_what_flow_control_held_per_array() -> None:
    timings = Timings()
    timings.add(PublishTiming("t", 0, 8, 0.1, 0.5, wait_s=0.25, mode="async"))
    timings.add(PublishTiming("t", 1, 8, 0.1, 0.75))  # sync: the whole round
    timings.add(PublishTiming("u", 0, 8, 0.1, 2.0))
    assert timings.held_s("t") == pytest.approx(1.0)
    assert [t.step for t in timings.all] == [0, 1, 0]


def test_a_detachment_keeps_its_first_reason() -> None:
    detachment = Detachment()
    assert detachment.reason is None
    detachment.detach("scheduler lost")
    detachment.detach("another")
    assert detachment.reason == "scheduler lost"


def test_the_loop_cancels_the_coroutines_it_keeps() -> None:
    loop, started = LoopThread("test-keep"), threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    try:
        kept = loop.spawn(forever())
        loop.keep(kept)
        assert started.wait(STARTUP)
        loop.cancel_kept()
        with pytest.raises(concurrent.futures.CancelledError):
            kept.result(timeout=STARTUP)
    finally:
        loop.stop()
