"""When the analytics stops waiting for a step (deisa.pca_app.stall), in process.

The rules alone (:func:`verdict`, :class:`StepWatch` on a fake clock and fake scheduler answers),
then :func:`analyze_stream` on a real scheduler and two workers (``gen_cluster``) fed as rank 0 of
a Bridge feeds it (``stream_driver.Rank0``). The real processes (``deisa-run`` with a slow user
simulation, one that dies, one that leaves without closing) are in ``test_local.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import STARTUP
from distributed import Client
from distributed.utils_test import async_poll_for, gen_cluster
from stream_driver import Rank0, install

from deisa.pca_app import stall
from deisa.pca_app.failures import PipelineError
from deisa.pca_app.pipeline import PCASettings, analyze_stream
from deisa.pca_app.stall import SILENT_AFTER, StepWatch, StreamSnapshot, verdict
from deisa.wire import is_ok

OPEN = StreamSnapshot(opened=True, published=3, silent_s=1.0)


# -- the rules --------------------------------------------------------------------------------


@pytest.mark.parametrize("waited_s", [0.0, 120.0, 86400.0])
def test_verdict_waits_as_long_as_the_simulation_lives(waited_s: float) -> None:
    # what deisa-run used to declare stuck after 120 s: a simulation seen running, or heard
    assert verdict("gtemp", 3, waited_s, OPEN, visible=True) is None
    assert verdict("gtemp", 3, waited_s, OPEN) is None
    assert verdict("gtemp", 0, waited_s, StreamSnapshot()) is None  # no run opened the array yet
    assert verdict("gtemp", 0, waited_s, None) is None  # the scheduler did not answer


def test_verdict_ends_the_wait_when_the_simulation_exited_without_closing() -> None:
    reason = verdict("gtemp", 3, 2.0, OPEN, exit_status=0, visible=True)
    assert reason == (
        "the simulation exited (status 0) without closing 'gtemp', after publishing 3 step(s) "
        "(waiting for step 3)"
    )
    never = StreamSnapshot(others=("temp",))
    reason = verdict("gtemp", 0, 2.0, never, exit_status=0, visible=True)
    assert reason is not None
    assert "exited (status 0) without opening 'gtemp'; it published 'temp' (--array" in reason
    closed = StreamSnapshot(opened=True, closed=True, published=3, silent_s=500.0)
    assert verdict("gtemp", 3, 2.0, closed, exit_status=0, visible=True) is None  # end queued


def test_verdict_of_an_unseen_simulation_is_rank0s_heartbeat() -> None:
    silent = StreamSnapshot(opened=True, published=2, silent_s=SILENT_AFTER + 1)
    reason = verdict("gtemp", 2, 10.0, silent)
    assert reason is not None and reason.startswith(
        f"rank 0 of the simulation has not been heard for {SILENT_AFTER + 1:.0f} s while "
        "'gtemp' is open (waiting for step 2"
    )
    assert verdict("gtemp", 2, 10.0, StreamSnapshot(opened=True, silent_s=SILENT_AFTER)) is None
    # seen running, its exit status says whether it lives, not its (silent) Bridge
    assert verdict("gtemp", 2, 10.0, silent, visible=True) is None
    assert verdict("gtemp", 2, 10.0, StreamSnapshot(closed=True, silent_s=500.0)) is None


def test_verdict_honours_a_step_timeout_set_explicitly() -> None:
    assert verdict("gtemp", 1, 5.0, OPEN, visible=True, step_timeout=5.0) is None
    reason = verdict("gtemp", 1, 5.5, OPEN, visible=True, step_timeout=5.0)
    assert reason == "no step of 'gtemp' for 6 s (waiting for step 1; --step-timeout 5)"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_step_watch_asks_the_scheduler_only_when_it_matters(tmp_path: Path) -> None:
    clock, asked = Clock(), []
    running: list[int | None] = [None]

    def state() -> StreamSnapshot:
        asked.append(clock.now)
        return StreamSnapshot(opened=True, published=1, silent_s=clock.now)

    log = tmp_path / "simulation.log"
    log.write_text("my simulation: leaving early\n")
    seen = StepWatch("u", exit_status=lambda: running[0], log=log, state=state, clock=clock)
    for clock.now in range(0, 600, 7):  # running: its exit status is enough
        assert seen.check(1) is None
    assert asked == []
    running[0] = 0
    reason = seen.check(1)
    assert asked == [clock.now]
    assert reason is not None
    assert reason.startswith("the simulation exited (status 0) without closing 'u'")
    assert f"; log {log}:\n" in reason and "my simulation: leaving early" in reason

    clock.now, asked[:] = 0.0, []
    unseen = StepWatch("u", state=state, clock=clock)
    for clock.now in (0.0, 1.0, stall.ASK_EVERY, stall.ASK_EVERY + 1, 2 * stall.ASK_EVERY):
        assert unseen.check(1) is None
    assert asked == [0.0, stall.ASK_EVERY, 2 * stall.ASK_EVERY]
    clock.now = 100 * stall.ASK_EVERY  # silent_s is the clock here
    assert (unseen.check(1) or "").startswith("rank 0 of the simulation has not been heard")


def test_step_watch_counts_the_step_timeout_from_the_last_arrival() -> None:
    clock = Clock()
    watch = StepWatch(
        "u", exit_status=lambda: None, step_timeout=10, state=StreamSnapshot, clock=clock
    )
    clock.now = 9.0
    watch.arrived()
    clock.now = 18.0
    assert watch.check(2) is None
    clock.now = 19.5
    assert watch.check(2) == "no step of 'u' for 10 s (waiting for step 2; --step-timeout 10)"


def test_stream_state_reads_deisa_stats() -> None:
    stats = {
        "streams": {"u": {"run": "r1", "published": 4, "closed": False}},
        "contracts": {"silent_s": {"u": 2.5, "v": 9.0}},
        "totals": {"u": {}, "v": {}},
    }
    assert StreamSnapshot.from_stats(stats, "u") == StreamSnapshot(True, False, 4, 2.5, ("v",))
    assert StreamSnapshot.from_stats(stats, "w") == StreamSnapshot(others=("u", "v"))


# -- analyze_stream on a real scheduler ---------------------------------------------------------


def in_thread(fn: Any) -> Any:
    """Run the synchronous analytics ``fn`` beside the cluster's loop."""
    return asyncio.get_running_loop().run_in_executor(None, fn)


@gen_cluster(client=True, timeout=2 * STARTUP)
async def test_analytics_waits_past_its_stall_timeout_while_the_simulation_runs(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    rank0 = Rank0(c, [a, b], "t", "r1")
    checks: list[int] = []

    def running() -> None:
        checks.append(1)

    def analytics() -> Any:
        with Client(s.address, timeout=STARTUP) as client:
            watch = StepWatch("t", client, exit_status=running)
            # 0.2 s was the wait for a step before (stall_timeout): now only a fit's
            settings = PCASettings(array="t", poll_s=0.1, stall_timeout=0.2)
            return analyze_stream(client, settings, watch=watch)

    task = in_thread(analytics)
    assert is_ok(await rank0.open())
    await async_poll_for(lambda: len(checks) >= 10, STARTUP)  # 10 polls of 0.1 s: 5 x 0.2 s
    await rank0.close(0)
    assert await task == []


# the fit's futures run their callbacks in distributed's callback thread, which stays
@gen_cluster(client=True, timeout=2 * STARTUP, clean_kwargs={"threads": False})
async def test_analytics_fails_at_once_when_the_simulation_leaves_without_closing(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    rank0 = Rank0(c, [a, b], "t", "r1")
    exited: list[int | None] = [None]

    def analytics() -> Any:
        with Client(s.address, timeout=STARTUP) as client:
            watch = StepWatch("t", client, exit_status=lambda: exited[0])
            return analyze_stream(client, PCASettings(array="t", poll_s=0.1), watch=watch)

    task = in_thread(analytics)
    await rank0.open()
    await rank0.publish(0)
    await async_poll_for(lambda: ext.stats()["streams"]["t"]["taken"] == 1, STARTUP)
    exited[0] = 0  # as mpirun, once every rank has finalized without closing the Bridge
    with pytest.raises(PipelineError) as failure:
        await task
    assert str(failure.value) == (
        "analytics: the simulation exited (status 0) without closing 't', after publishing 1 "
        "step(s) (waiting for step 1)"
    )


@gen_cluster(client=True, timeout=2 * STARTUP)
async def test_unseen_simulation_whose_rank0_falls_silent_fails_the_analytics(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    rank0 = Rank0(c, [a, b], "t", "r1")

    def analytics() -> Any:
        with Client(s.address, timeout=STARTUP) as client:
            settings = PCASettings(array="t", poll_s=0.1)
            return analyze_stream(client, settings, watch=StepWatch("t", client))

    with pytest.MonkeyPatch.context() as patch:  # what is meant to expire, shortened
        patch.setattr(stall, "SILENT_AFTER", 0.5)
        patch.setattr(stall, "ASK_EVERY", 0.1)
        await rank0.open()  # heard once, then never (no deisa_watch_contracts)
        with pytest.raises(PipelineError, match="rank 0 of the simulation has not been heard"):
            await in_thread(analytics)
