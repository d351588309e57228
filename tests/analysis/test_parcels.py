"""Moving arrays read live (issue 56): each step built from its parcels and layout
(:mod:`deisa.analysis._parcels`, :class:`~deisa.analysis.adapter.ArrayDescriptor`).

A real scheduler and two real workers (``gen_cluster``); each step's parcels are sent to the
workers and the step registered through ``deisa_publish`` with its layout exactly as rank 0 of a
Bridge does (``stream_driver.MovingRank0``); a synchronous Adapter reads them in a thread, and
every step must equal the numpy truth bitwise.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from distributed import Client, futures_of, wait
from distributed.utils_test import gen_cluster
from stream_driver import META, WAIT, MovingRank0, Rank0, block, install, moving_meta

from deisa import Adapter, split
from deisa.analysis import NoFixedShapeError, StepShapesDifferError
from deisa.analysis.moving import MissingRegionError
from deisa.contract import ContractError


def in_thread(fn: Any) -> Any:
    """Run the synchronous analytics ``fn`` beside the cluster's loop."""
    return asyncio.get_running_loop().run_in_executor(None, fn)


def particles(step: int, counts: list[int]) -> list[np.ndarray]:
    """Each rank's particles of ``step``: distinct values, so a misplaced one shows."""
    out, first = [], 0
    for n in counts:
        out.append(step * 1000.0 + np.arange(first, first + n) + 0.5)
        first += n
    return out


# a rank with none at every step, none at all at step 3
COUNTS = {0: [3, 0, 5], 1: [4, 2, 0], 2: [0, 0, 6], 3: [0, 0, 0]}


@gen_cluster(client=True, timeout=120)
async def test_joined_particles_per_step_with_a_rank_that_has_none(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    sim = MovingRank0(c, [a, b], "x", moving_meta(1, joined_axis=0))
    await sim.open()
    for step, counts in COUNTS.items():
        ranks = [[((0,), p)] if p.size else [] for p in particles(step, counts)]
        assert await sim.publish(step, ranks) == {"status": "OK"}
    await sim.close(len(COUNTS))

    def analytics() -> None:
        with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as adapter:
            x = adapter["x"]
            assert x.moving and x.ndim == 1 and x.dtype == np.float64
            with pytest.raises(NoFixedShapeError, match=r"'x' is a moving array.*shape_of"):
                _ = x.shape
            with pytest.raises(NoFixedShapeError, match=r"its chunks change.*\[step\].chunks"):
                _ = x.chunks
            assert x.shape_of(1) == (6,) and x.shape_of(0) == (8,)
            with pytest.raises(IndexError, match="index 8 is out of bounds for axis 1 of 'x'"):
                x[0, 8]
            with pytest.raises(
                StepShapesDifferError, match=r"steps 0 and 1 of 'x'.*\(8,\) and \(6,\)"
            ):
                x[0:2]
            seen = []
            for step, array in x.items():
                truth = np.concatenate(particles(step, COUNTS[step]))
                assert array.chunks == (tuple(n for n in COUNTS[step] if n) or (0,),)
                got = array.compute()
                assert got.dtype == truth.dtype and got.tobytes() == truth.tobytes()
                histogram, _ = np.histogram(got, bins=4, range=(0, 3000))
                assert histogram.sum() == sum(COUNTS[step])
                seen.append(step)
            assert seen == [0, 1, 2, 3] and x.shape_of(-1) == (0,)

    await in_thread(analytics)


def field(step: int, shape: tuple[int, int] = (6, 8)) -> np.ndarray:
    return step * 1e6 + np.arange(np.prod(shape), dtype=np.float64).reshape(shape)


# four boxes of a (6, 8) field, two a rank; at step 1 they move between the ranks
QUARTERS = [((0, 0), (3, 4)), ((0, 4), (3, 4)), ((3, 0), (3, 4)), ((3, 4), (3, 4))]
OWNERS = {0: [[0, 1], [2, 3]], 1: [[2, 0], [3, 1]]}  # rank -> its boxes, in its order


def boxes_of(step: int, owned: list[int]) -> list[tuple[tuple[int, ...], np.ndarray]]:
    full = field(step)
    return [
        (start, full[start[0] : start[0] + n[0], start[1] : start[1] + n[1]].copy())
        for start, n in (QUARTERS[k] for k in owned)
    ]


@gen_cluster(client=True, timeout=120)
async def test_two_boxes_a_rank_moving_between_ranks_are_views_on_their_parcels_workers(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    sim = MovingRank0(c, [a, b], "rho", moving_meta(2))
    await sim.open()
    for step, owners in OWNERS.items():
        ranks = [boxes_of(step, owned) for owned in owners]
        assert await sim.publish(step, ranks, shape=(6, 8)) == {"status": "OK"}
    await sim.close(2)

    def analytics() -> None:
        with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as adapter:
            rho = adapter["rho"]
            layout = rho.layout(1)
            assert layout is not None and layout.shape == (6, 8) and layout.parcels == (2, 2)
            blocks = rho.blocks(1)
            assert [(blk.start, blk.count) for blk in blocks] == [
                (QUARTERS[k][0], QUARTERS[k][1]) for owned in OWNERS[1] for k in owned
            ]
            start, count, array = blocks[1]  # rank 0's second box
            assert (start, count) == ((0, 0), (3, 4))
            assert np.asarray(array.compute()).tobytes() == field(1)[0:3, 0:4].tobytes()
            # each box's view runs where its parcel lies (rank i's on workers[i]), before
            # anything moved the parcels
            views = [futures_of(v)[0] for v in client.persist([blk.array for blk in blocks])]
            wait(views)
            holders = client.who_has(views)
            workers = [holders[v.key] for v in views]
            assert workers == [(a.address,), (a.address,), (b.address,), (b.address,)]
            # the splitter finds a step's blocks where its parcels lie: nothing to move
            zero = rho[0]
            parts = split(zero, persist=True)
            assert parts.bytes_to_move == 0 and {p.worker for p in parts} == {a.address, b.address}
            sums = client.gather(parts.map(lambda blocks: sum(float(x.sum()) for x in blocks)))
            assert sum(sums) == field(0).sum()
            both = rho[0:2]  # same shapes: stacked
            assert both.shape == (2, 6, 8)
            np.testing.assert_array_equal(both.compute(), np.stack([field(0), field(1)]))
            assert rho[1].chunks == ((3, 3), (4, 4))

    await in_thread(analytics)


LEVEL = [((0, 0), (4, 4)), ((4, 4), (4, 4))]  # a refined level over half of an 8 x 8 domain


@gen_cluster(client=True, timeout=120)
async def test_a_level_with_missing_regions_names_them_and_reads_by_blocks_or_filled(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    sim = MovingRank0(c, [a, b], "level1", moving_meta(2))
    await sim.open()
    truth = {}
    for step in range(3):
        full = field(step, (8, 8))
        truth[step] = np.zeros((8, 8))
        ranks = []
        for (r, q), (h, w) in LEVEL:
            truth[step][r : r + h, q : q + w] = full[r : r + h, q : q + w]
            ranks.append([((r, q), full[r : r + h, q : q + w].copy())])
        await sim.publish(step, ranks, shape=(8, 8))
    await sim.close(3)

    def analytics() -> None:
        with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as adapter:
            level = adapter["level1"]
            with pytest.raises(MissingRegionError, match=r"step 0 of 'level1'.*\[0:4, 4:8\]"):
                level[0]
            # the step is still there: by blocks, or filled (while its blocks are kept)
            boxes = level.blocks(0)
            total = sum(blk.array.sum() for blk in boxes).compute()
            assert total == truth[0].sum()
            filled = level.step(0, fill=0.0).compute()
            assert filled.tobytes() == truth[0].tobytes()
            nan = level.step(0, fill=np.nan).compute()
            assert np.isnan(nan[0:4, 4:8]).all() and not np.isnan(nan[0:4, 0:4]).any()
            level.fill = 0.0  # every step from now on
            got = {step: x.compute() for step, x in level.items()}
            assert sorted(got) == [1, 2]
            assert all(got[t].tobytes() == truth[t].tobytes() for t in got)
            with pytest.raises(ValueError, match="must be a scalar"):
                level.fill = [0.0]

    await in_thread(analytics)


@gen_cluster(client=True, timeout=120)
async def test_a_fixed_array_whose_step_moved_and_zip_and_xarray_per_step(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    """A fixed array (declared shape and blocks) whose step 1 moved: its blocks are boxes
    other than the declaration; zip pairs it with a moving array, xarray labels each step."""
    await install(c, s)
    fixed = Rank0(c, [a, b], "t", "r1")
    await fixed.open()
    await fixed.publish(0)  # today's path: (4, 3) in two blocks of (2, 3)
    moved = MovingRank0(c, [a, b], "t", {**META, "run": "r1"})
    rows = np.vstack([block(1, 0), block(1, 1)])
    await moved.publish(1, [[((0, 0), rows[:1].copy())], [((1, 0), rows[1:].copy())]], (4, 3))
    await fixed.close(2)
    parts = MovingRank0(c, [a, b], "p", {**moving_meta(1, 0), "dims": ["particle"]})
    await parts.open()
    for step, counts in COUNTS.items():
        ranks = [[((0,), p)] if p.size else [] for p in particles(step, counts)]
        await parts.publish(step, ranks)
    await parts.close(3)

    def analytics() -> None:
        with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as adapter:
            pairs = list(adapter.zip("t", "p", as_xarray=True))
            assert [step for step, _ in pairs] == [0, 1]
            (t0, p0), (t1, p1) = (arrays for _, arrays in pairs)
            assert t1.shape == (4, 3) and t1.data.chunks == ((1, 3), (3,))
            np.testing.assert_array_equal(t0.values, np.vstack([block(0, 0), block(0, 1)]))
            np.testing.assert_array_equal(t1.values, rows)
            assert p0.dims == ("particle",) and int(p0["step"]) == 0 and p0.shape == (8,)
            assert p1.shape == (6,) and int(p1["step"]) == 1
            assert adapter["t"].shape_of(1) == (4, 3) == adapter["t"].shape
            assert adapter["t"].layout(0) is None and adapter["t"].layout(1).parcels == (1, 1)
            with pytest.raises(StepShapesDifferError, match=r"steps 0 and 1 of .p."):
                adapter["p"].to_xarray([0, 1])

    await in_thread(analytics)


@gen_cluster(client=True, timeout=120)
async def test_a_contracts_region_on_a_moving_array_is_refused_steps_only_is_kept(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    sim = MovingRank0(c, [a, b], "x", moving_meta(1, joined_axis=0))
    await sim.open()

    def analytics() -> None:
        with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as adapter:
            x = adapter["x"]
            with pytest.raises(ContractError, match=r"'x' is moving.*region is not supported"):
                x.require(region=(slice(0, 10),))
            assert x.require(steps=2).stride == 2

    await in_thread(analytics)


@gen_cluster(client=True, timeout=120)
async def test_the_layouts_of_released_steps_are_forgotten(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    sim = MovingRank0(c, [a, b], "x", moving_meta(1, joined_axis=0))
    await sim.open()
    for step in range(20):
        await sim.publish(step, [[((0,), np.arange(step + 1.0))], []])
    await sim.close(20)

    def analytics() -> None:
        with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as adapter:
            x = adapter["x"]
            for step, array in x.items():
                assert array.sum().compute() == step * (step + 1) / 2
                del array
            assert len(x._layouts) <= 1

    await in_thread(analytics)


@gen_cluster(client=True, timeout=120)
async def test_windows_of_a_moving_array_stack_while_the_shapes_agree(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    sim = MovingRank0(c, [a, b], "x", moving_meta(1, joined_axis=0))
    await sim.open()
    lengths = [4, 4, 4, 7]  # the particle count changes at step 3
    for step, n in enumerate(lengths):
        half = step * 100.0 + np.arange(n, dtype=np.float64)
        await sim.publish(step, [[((0,), half[: n // 2])], [((0,), half[n // 2 :])]])
    await sim.close(len(lengths))

    def analytics() -> None:
        with Client(s.address, timeout=WAIT) as client, Adapter(client, timeout=WAIT) as adapter:
            windows = adapter["x"].windows(2)
            for first in (0, 1):
                steps, window = next(windows)
                assert steps == [first, first + 1] and window.shape == (2, 4)
                expected = np.stack([t * 100.0 + np.arange(4.0) for t in steps])
                assert window.compute().tobytes() == expected.tobytes()
            with pytest.raises(
                StepShapesDifferError, match=r"steps 2 and 3 of 'x'.*\(4,\) and \(7,\)"
            ):
                next(windows)

    await in_thread(analytics)
