"""deisa.bridge._sync: rank 0's registration of a sync publish when the scheduler does not
answer, with a link that fails as a dead scheduler's connection does (pure: no MPI, no Dask).

As in ``mode="async"`` (tests/bridge/registration/test_registrar.py): a registration that fails
with an ``OSError`` is made again, under either ``on_scheduler_loss``, until the worker book
counts the scheduler lost after ``connect_timeout``; then the one message of a lost scheduler.
The run with a real scheduler SIGKILLed is ``tests/test_faults.py``.
"""

from __future__ import annotations

import pytest
from conftest import STARTUP
from failing_link import FailingLink, RankZeroComm

from deisa.bridge._parts import BridgeParts
from deisa.bridge._sync import SyncPublisher
from deisa.bridge.options import BridgeOptions
from deisa.contract import FULL
from deisa.wire import ok


def _publisher(policy: str, link: FailingLink, lost_after: float) -> SyncPublisher:
    options = BridgeOptions(mode="sync", on_scheduler_loss=policy, connect_timeout=lost_after)
    return SyncPublisher(BridgeParts.new(RankZeroComm(), options), link)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["continue", "fail"])
def test_a_reset_registration_is_made_again_and_the_answer_clears_it(policy: str) -> None:
    link = FailingLink([ConnectionResetError("reset by peer"), ConnectionRefusedError("refused")])
    publisher = _publisher(policy, link, STARTUP)
    try:
        reply = publisher._register("a", 0, [], FULL)
    finally:
        publisher.parts.loop.stop()
    book = publisher.parts.worker_book
    assert reply == ok() and link.calls == 3
    book.lost_after = 0.0
    assert book.scheduler_lost() is None  # the registration's answer counts as one


@pytest.mark.parametrize("policy", ["continue", "fail"])
def test_a_scheduler_whose_registrations_reset_is_lost_with_the_one_message(policy: str) -> None:
    """Whatever the policy: the message decides, at the same call on every rank, to fail or
    detach (``Losses``); not the first reset (``mode="sync"`` did so before)."""
    link = FailingLink([ConnectionResetError("reset by peer")] * 1000)
    publisher = _publisher(policy, link, 1.0)
    try:
        lost = publisher._register("a", 0, [], FULL)
    finally:
        publisher.parts.loop.stop()
    assert isinstance(lost, str) and lost.startswith("the scheduler has not answered for")
    assert "connect_timeout=1 s" in lost and "its connection closed" in lost  # a reset, in words
    assert link.calls >= 2  # asked again meanwhile


def test_a_registration_the_scheduler_refuses_fails_at_once_naming_the_step() -> None:
    """Not an OSError (what a scheduler without deisa's extension raises): no retry, and the
    error names the step, as in ``mode="async"`` (it raised the bare exception before)."""
    link = FailingLink([ValueError("no route deisa_publish")])
    publisher = _publisher("continue", link, STARTUP)
    try:
        reply = publisher._register("a", 3, [], FULL)
    finally:
        publisher.parts.loop.stop()
    assert isinstance(reply, dict) and reply["status"] == "error" and link.calls == 1
    why = "ValueError: no route deisa_publish"
    assert reply["message"] == f"registering step 3 of 'a' failed: {why}"
