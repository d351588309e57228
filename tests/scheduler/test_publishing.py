"""A moving step's layout on the scheduler (:mod:`deisa.scheduler.publishing`): ``deisa_publish``
keeps it with the step, ``deisa_get`` hands it over, a malformed one is refused, and nothing of it
is kept once the step is taken, replaced or dropped (issue 56: the scheduler's memory does not
grow with the steps). A real scheduler and two real workers; rank 0 driven as the Bridge does
(:mod:`stream_driver`)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from distributed import Client
from distributed.utils_test import gen_cluster
from stream_driver import WAIT, Rank0, get, install, take, until_released

from deisa.scheduler._streams import Step
from deisa.wire import Status, is_ok, ok, status
from deisa.wire.layout import Box, StepLayout


def layout(step: int) -> dict[str, Any]:
    """Step ``step``'s layout: a 1-D array of ``2 * (step + 1)`` rows of 3, one box a rank."""
    n = step + 1
    return StepLayout((2 * n, 3), (Box((0, 0), (n, 3)), Box((n, 0), (n, 3))), (1, 1)).to_wire()


class MovingRank0(Rank0):
    """Rank 0 publishing each step with a layout."""

    async def publish(self, step: int, timeout: float | None = WAIT, **kwargs: Any) -> Any:
        blocks = await self.send(step)
        return await self.c.scheduler.deisa_publish(
            name=self.name,
            run=self.run,
            step=step,
            blocks=blocks,
            timeout=timeout,
            layout=kwargs.get("layout", layout(step)),
        )


def records(ext: Any) -> list[weakref.ref[Step]]:
    """Weak references to the step records the extension holds now."""
    return [weakref.ref(step) for step in ext.streams["t"].pending.values()]


def alive(refs: list[weakref.ref[Step]]) -> list[int]:
    gc.collect()
    return sorted({step.step for ref in refs if (step := ref()) is not None})


@gen_cluster(client=True)
async def test_a_steps_layout_is_handed_over_with_it_and_forgotten_once_taken(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    rank0 = MovingRank0(c, [a, b], "t", "r1")
    await rank0.open()
    for step in range(3):
        assert await rank0.publish(step) == ok()
    held = records(ext)
    assert alive(held) == [0, 1, 2]
    for step in range(3):
        record = await get(c, "t", run="r1")
        assert record["step"] == step
        assert StepLayout.from_wire(record["layout"]) == StepLayout.from_wire(layout(step))
        assert StepLayout.from_wire(record["layout"]).shape == (2 * (step + 1), 3)
        assert len(await take(c, record)) == 2
    assert alive(held) == []  # taken: the records, and their layouts, are gone
    assert not ext.streams["t"].pending and not ext.streams["t"].deferred
    await rank0.close(3)
    assert status(await get(c, "t", run="r1")) == Status.END
    await until_released(s, [a, b], "r1")


@gen_cluster(client=True)
async def test_a_step_without_layout_answers_none(c: Client, s: Any, a: Any, b: Any) -> None:
    await install(c, s)
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    assert await rank0.publish(0) == ok()
    record = await get(c, "t", run="r1")
    assert is_ok(record) and "layout" not in record
    await take(c, record)


@gen_cluster(client=True)
async def test_a_step_published_again_carries_the_new_layout(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    rank0 = MovingRank0(c, [a, b], "t", "r1")
    await rank0.open()
    assert await rank0.publish(0) == ok()
    rank0.revision = 1
    assert await rank0.publish(0, layout=layout(4)) == ok(replaced=True)
    record = await get(c, "t", run="r1")
    assert StepLayout.from_wire(record["layout"]) == StepLayout.from_wire(layout(4))
    await take(c, record)


@gen_cluster(client=True)
async def test_dropped_steps_leave_no_record(c: Client, s: Any, a: Any, b: Any) -> None:
    ext = await install(c, s)
    rank0 = MovingRank0(c, [a, b], "t", "r1")
    await rank0.open(buffer_nb=2, on_full="drop_oldest")
    refs = []
    for step in range(6):
        assert await rank0.publish(step) == ok()
        refs += records(ext)
    assert alive(refs) == [4, 5]
    await rank0.close(6)
    while is_ok(record := await get(c, "t", run="r1")):
        await take(c, record)
    assert alive(refs) == []
    await until_released(s, [a, b], "r1")


@gen_cluster(client=True)
async def test_a_malformed_layout_is_refused_and_its_blocks_freed(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    rank0 = MovingRank0(c, [a, b], "t", "r1")
    await rank0.open()
    bad = {"shape": [4, 3], "boxes": [[0, 0, 4, 3]], "parcels": [1]}  # 2 keys, 1 parcel count
    for wrong, words in (
        ("(4, 3)", "is not a step layout"),
        ({"shape": [4]}, "is not a step layout"),
        (bad, "do not name one box count per key (2)"),
    ):
        reply = await rank0.publish(0, layout=wrong)
        assert status(reply) == Status.ERROR
        assert "step 0 of 't'" in reply["message"] and words in reply["message"]
    assert not ext.streams["t"].pending and ext.streams["t"].published == 0
    await until_released(s, [a, b], "r1")  # what the ranks sent is freed
    assert await rank0.publish(0) == ok()  # the stream still takes good steps


# -- a step's attributes (issue 57) ------------------------------------------------------------


async def publish_with_attrs(rank0: Rank0, step: int, attrs: dict[str, Any] | None) -> Any:
    blocks = await rank0.send(step)
    return await rank0.c.scheduler.deisa_publish(
        name=rank0.name, run=rank0.run, step=step, blocks=blocks, timeout=WAIT, attrs=attrs
    )


@gen_cluster(client=True)
async def test_a_steps_attrs_are_handed_over_and_those_of_dropped_steps_come_with_the_next(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    await install(c, s)
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open(buffer_nb=2, on_full="drop_oldest")
    sent = {0: {"time": 0.0, "units": "K"}, 1: None, 2: {"time": 0.5}, 3: {"note": [1, 2]}}
    for step, attrs in sent.items():
        assert await publish_with_attrs(rank0, step, attrs) == ok()
    # steps 0 and 1 were dropped: step 2, the next one taken, brings what they set
    first = await get(c, "t", run="r1")
    assert first["step"] == 2 and first["attrs"] == {"time": 0.5, "units": "K"}
    await take(c, first)
    second = await get(c, "t", run="r1")
    assert second["step"] == 3 and second["attrs"] == {"note": (1, 2)}  # the wire's tuples
    await take(c, second)
    assert await publish_with_attrs(rank0, 4, None) == ok()
    third = await get(c, "t", run="r1")
    assert "attrs" not in third  # nothing changed: nothing sent
    await take(c, third)
    # a step published too late (the analytics passed it) hands its attrs to the next
    assert status(await publish_with_attrs(rank0, 1, {"late": True})) == Status.DROPPED
    assert await publish_with_attrs(rank0, 5, {"time": 1.0}) == ok()
    fourth = await get(c, "t", run="r1")
    assert fourth["attrs"] == {"late": True, "time": 1.0}
    await take(c, fourth)
    assert status(await publish_with_attrs(rank0, 6, ["not", "a", "dict"])) == Status.ERROR  # type: ignore[arg-type]
    await rank0.close(6)


# -- deisa_publish_many: a step's arrays in one message (issue 56 item 9) ---------------------


@gen_cluster(client=True)
async def test_publish_many_registers_each_publication_and_answers_each_in_order(
    c: Client, s: Any, a: Any, b: Any
) -> None:
    ext = await install(c, s)
    ranks = [Rank0(c, [a, b], name, "r1") for name in ("t", "u")]
    for rank0 in ranks:
        await rank0.open()
    publications = [
        {"name": r.name, "run": "r1", "step": 0, "blocks": await r.send(0), "timeout": WAIT}
        for r in ranks
    ]
    publications.append({"name": "t", "run": "r1", "step": 1, "blocks": [], "bogus": 1})
    publications.append(["not", "a", "mapping"])  # type: ignore[arg-type]
    reply = await c.scheduler.deisa_publish_many(publications=publications)
    assert is_ok(reply)
    first, second, unknown, wrong = reply["replies"]
    assert first == ok() and second == ok()  # each registered as its own deisa_publish
    assert status(unknown) is Status.ERROR and "unknown fields ['bogus']" in unknown["message"]
    assert status(wrong) is Status.ERROR and "a publication is a mapping" in wrong["message"]
    assert ext.calls["publish_many"] == 1 and ext.calls["publish"] == 2
    for name in ("t", "u"):
        got = await get(c, name)
        assert got["step"] == 0 and len(got["keys"]) == 2
    refused = await c.scheduler.deisa_publish_many(publications={"name": "t"})
    assert status(refused) is Status.ERROR and "must be a list" in refused["message"]
