"""The block locations a streamed step's array carries to the splitter
(deisa.analysis._block_locations), in process: a real scheduler and two workers, the step
published as rank 0 of a Bridge does, read by a synchronous Adapter in a thread."""

from __future__ import annotations

import asyncio

import dask.array as da
from distributed import Client
from distributed.utils_test import gen_cluster
from stream_driver import WAIT, Rank0, install

from deisa import Adapter
from deisa.analysis import _block_locations
from deisa.analysis.splitter import split


@gen_cluster(client=True)
async def test_streamed_step_carries_its_block_locations_to_the_splitter(c, s, a, b) -> None:
    """The splitter takes the holders the Bridge reported, from the step's array itself: it
    asks the scheduler nothing for them; an array derived under new keys asks as before."""
    await install(c, s)
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    await rank0.publish(0)
    await rank0.close(1)
    where = {key: w.address for key, w in zip(rank0.keys(0), (a, b), strict=True)}

    def analytics() -> None:
        with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as ad:
            field = ad["t"][0]
            for same in (field, field[:, :], field[...]):  # dask's full slices keep the array
                known = _block_locations.of(same)
                assert known is not None and known.workers == where
            assert known.nthreads == {a.address: a.state.nthreads, b.address: b.state.nthreads}
            assert _block_locations.of(field[1:]) is None  # new keys: not the step's
            assert _block_locations.of(da.stack([field])) is None

            def no_query(*args: object, **kwargs: object) -> None:
                raise AssertionError("the splitter asked the scheduler again")

            asked = client.who_has, client.nthreads
            client.who_has = client.nthreads = no_query  # type: ignore[method-assign]
            partitions = split(field, client=client)
            assert {p.worker: p.get_indexes() for p in partitions} == {
                a.address: [(0, 0)],
                b.address: [(1, 0)],
            }
            assert split(field[:, :], client=client).bytes_to_move == 0
            client.who_has, client.nthreads = asked  # type: ignore[method-assign]
            derived = split(field + 1, client=client, persist=True)  # asks, as for any array
            assert sorted(i for p in derived for i in p.get_indexes()) == [(0, 0), (1, 0)]

    await asyncio.get_running_loop().run_in_executor(None, analytics)
