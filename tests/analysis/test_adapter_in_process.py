"""The Adapter against a real scheduler and two workers in process (``gen_cluster``): the steps
are published as rank 0 of a Bridge does (``stream_driver.Rank0``) and read by a synchronous
Adapter in a thread. The Adapter's selections on real MPI runs are in ``test_adapter.py``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Client
from distributed.utils_test import async_poll_for, gen_cluster
from stream_driver import WAIT, Rank0, block, install, until_released

from deisa import Adapter, StepLostError, StepNotAvailableError
from deisa.wire import SCHEDULER_FILE_ENV


def in_thread(fn: Any) -> Any:
    """Run the synchronous analytics ``fn`` beside the cluster's loop."""
    return asyncio.get_running_loop().run_in_executor(None, fn)


# -- Adapter.from_env -------------------------------------------------------------------------


def test_from_env_names_the_variable_when_unset_or_the_file_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(SCHEDULER_FILE_ENV, raising=False)
    with pytest.raises(RuntimeError, match="DEISA_SCHEDULER_FILE is not set"):
        Adapter.from_env()
    missing = tmp_path / "nowhere.json"
    monkeypatch.setenv(SCHEDULER_FILE_ENV, str(missing))
    with pytest.raises(FileNotFoundError, match=f"DEISA_SCHEDULER_FILE='{missing}' names no file"):
        Adapter.from_env()


def test_from_env_reads_the_stream_and_closes_the_client_it_owns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    @gen_cluster(client=True)
    async def run(c, s, a, b) -> None:
        await install(c, s)
        scheduler_file = tmp_path / "scheduler.json"
        scheduler_file.write_text(json.dumps({"address": s.address}))
        monkeypatch.setenv(SCHEDULER_FILE_ENV, str(scheduler_file))
        rank0 = Rank0(c, [a, b], "t", "r1")
        await rank0.open()
        await rank0.publish(0)
        await rank0.close(1)

        def analytics() -> tuple[list[int], Any, str, str]:
            with Adapter.from_env(timeout=WAIT) as adapter:
                got = [(step, x.compute()) for step, x in adapter["t"].items()]
                assert adapter.client.status == "running"
            return [step for step, _ in got], got[0][1], adapter.client.status, adapter.client.id

        steps, field, status, client_id = await in_thread(analytics)
        assert steps == [0] and status == "closed"
        np.testing.assert_array_equal(field, np.vstack([block(0, 0), block(0, 1)]))
        # it left the scheduler too
        await async_poll_for(lambda: client_id not in s.clients, WAIT, period=0.01)

    run()


# -- steps lost with a worker (issue 25) --------------------------------------------------------


def test_lost_steps_are_named_skipped_or_raised_and_leave_no_key() -> None:
    @gen_cluster(client=True)
    async def run(c, s, a, b) -> None:
        await install(c, s)
        for name in ("t", "u"):  # steps 0 and 1 on both workers, queued for the first reader
            rank0 = Rank0(c, [a, b], name, "r1")
            await rank0.open()
            await rank0.publish(0)
            await rank0.publish(1)
        departed = b.address
        await b.close()
        for name in ("t", "u"):  # the simulation goes on, on the worker left
            rank0 = Rank0(c, [a, a], name, "r1")
            await rank0.publish(2)
            await rank0.close(3)

        def analytics() -> None:
            with Client(s.address, timeout=WAIT) as client:
                with Adapter(client, timeout=WAIT) as warned:
                    with pytest.raises(StepLostError, match=f"step 0 of 't' was lost.*{departed}"):
                        warned["t"][0]
                    with pytest.warns(RuntimeWarning, match=f"step 1 of 't' was lost.*{departed}"):
                        got = [(step, x.compute()) for step, x in warned["t"].items()]
                    assert [step for step, _ in got] == [2]
                    np.testing.assert_array_equal(got[0][1], np.vstack([block(2, 0), block(2, 1)]))
                    assert warned.stats()["lost"] == {"t": [(0, departed), (1, departed)]}
                    del got
                with Adapter(client, timeout=WAIT, on_lost="raise") as raising:
                    steps = iter(raising["u"].items())
                    with pytest.raises(StepLostError, match="step 0 of 'u'") as caught:
                        next(steps)
                    assert isinstance(caught.value, StepNotAvailableError)
                    with pytest.raises(StepLostError, match="step 1 of 'u'"):
                        next(iter(raising["u"].items()))  # iterating again goes on after it
                    assert [step for step, _ in raising["u"].items()] == [2]

        await in_thread(analytics)
        await until_released(s, [a], "r1")  # no key of either array is left

    run()


def test_workers_paused_for_memory_are_named_when_a_step_is_taken_and_at_a_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Workers limited to 100 MB pause at once (this process uses more): the analytics is told
    why its computations wait (issue #54), the steps themselves still come."""

    @gen_cluster(client=True, worker_kwargs={"memory_limit": "100 MB"}, timeout=120)
    async def run(c, s, a, b) -> None:
        await async_poll_for(
            lambda: all(w.status.name == "paused" for w in s.workers.values()), WAIT
        )
        await install(c, s)
        rank0 = Rank0(c, [a, b], "t", "r1")
        await rank0.open()
        await rank0.publish(0)

        def analytics() -> None:
            with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=0.5) as adapter:
                with caplog.at_level("WARNING", logger="deisa.analysis._stream_array"):
                    assert adapter["t"][0] is not None  # step 0 taken: its record names them
                assert f"worker {a.address} is paused for memory" in caplog.text
                assert "of its memory limit of 95 MiB" in caplog.text
                with pytest.raises(
                    TimeoutError, match=f"; worker {b.address} is paused for memory"
                ):
                    adapter["t"][1]
                assert adapter.stats()["memory"]

        await in_thread(analytics)

    run()


# -- zip: one read a step (issue 56 item 9) ---------------------------------------------------


def test_zip_reads_a_steps_arrays_together_and_a_failed_read_keeps_the_others_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``zip`` asks for the next step of every array that advances in one round trip (no
    ``deisa_get`` of its own per array and step); an array whose read fails (here, it never
    comes) raises, and the step the others' reads took meanwhile stays readable."""

    @gen_cluster(client=True)
    async def run(c, s, a, b) -> None:
        ext = await install(c, s)
        for name in ("t", "u", "v"):
            rank0 = Rank0(c, [a, b], name, "r1")
            await rank0.open()
            for step in range(2):
                await rank0.publish(step)
            await rank0.close(2)
        lone = Rank0(c, [a, b], "w", "r1")  # its step waits for the second Adapter
        await lone.open()
        await lone.publish(0)

        def analytics() -> None:
            with (
                Client(s.address, timeout=WAIT) as client,
                Adapter(client, timeout=WAIT) as adapter,
            ):
                own_gets: list[str] = []
                request = adapter._request

                def counted(route: Any, **kwargs: Any) -> Any:
                    if route.value == "deisa_get":
                        own_gets.append(kwargs["name"])
                    return request(route, **kwargs)

                monkeypatch.setattr(adapter, "_request", counted)
                got = [
                    (t, [f.compute() for f in fields]) for t, fields in adapter.zip("t", "u", "v")
                ]
                assert [t for t, _ in got] == [0, 1] and not own_gets
                for t, fields in got:
                    for field in fields:
                        np.testing.assert_array_equal(field, np.vstack([block(t, 0), block(t, 1)]))
                assert ext.calls["get"] == 9  # 2 steps and the end, of 3 arrays
            with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=0.5) as adapter:
                with pytest.raises(TimeoutError, match="'never'"):
                    next(adapter.zip("w", "never"))
                step0 = adapter["w"][0].compute()  # taken with the failed read, not lost
                np.testing.assert_array_equal(step0, np.vstack([block(0, 0), block(0, 1)]))

        await in_thread(analytics)

    run()
