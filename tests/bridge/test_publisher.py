"""deisa.bridge._publisher: the exchange's bookkeeping, fed by hand with what ranks would gather."""

from __future__ import annotations

from deisa.bridge._publisher import Connection, Ledger, RankReport, RootReport

W = "tcp://w0"
CONNECTION = Connection("tcp://127.0.0.1:8786", "run0", ("tcp://w0", "tcp://w1"))


def root(**kwargs: object) -> RootReport:
    return RootReport(**kwargs)  # type: ignore[arg-type]


def test_ledger_hands_a_step_to_rank_0_once_every_rank_sent_it_in_order() -> None:
    ledger = Ledger(3)
    first = ledger.add("t", 0, 0)
    second = ledger.add("t", 1, 0)
    assert ledger.in_flight("t") == 2 and ledger.in_flight("other") == 0
    # step 1 complete everywhere, step 0 not yet on rank 2: nothing is ready (order kept)
    out = ledger.absorb(
        [
            RankReport(sent=((0, 10, W), (1, 10, W)), root=root(connection=CONNECTION)),
            RankReport(sent=((0, 11, W), (1, 11, W))),
            RankReport(sent=((1, 12, W),)),
        ]
    )
    assert out.connection == CONNECTION and ledger.connection == CONNECTION
    assert out.ready == [] and out.problem is None
    out = ledger.absorb([RankReport(root=root()), RankReport(), RankReport(sent=((0, 12, W),))])
    assert out.connection is None  # announced once
    sent = [(10, W), (11, W), (12, W)]
    assert out.ready == [(first, sent), (second, sent)]
    assert not ledger.flushed
    # rank 0 registered both: they leave the ledger
    out = ledger.absorb([RankReport(root=root(registered=2)), RankReport(), RankReport()])
    assert out.ready == [] and ledger.in_flight("t") == 0 and ledger.flushed


def test_ledger_first_failure_is_the_same_on_every_rank_and_stays() -> None:
    ledger = Ledger(3)
    ledger.add("t", 0, 0)
    ledger.add("t", 1, 0)
    reports = [
        RankReport(root=root(connection=CONNECTION, error="step 7 was not delivered")),
        RankReport(failed=((1, "sending step 1 failed"),)),
        RankReport(failed=((0, "sending step 0 failed"),), sent=((1, 4, W),)),
    ]
    out = ledger.absorb(reports)
    assert ledger.failure == "rank 2: sending step 0 failed"  # the earliest step, then rank
    assert out.ready == []  # nothing is registered after a failure
    ledger.absorb([RankReport(root=root(error="later")), RankReport(), RankReport()])
    assert ledger.failure == "rank 2: sending step 0 failed"


def test_ledger_connection_failure_is_raised_before_anything_else() -> None:
    ledger = Ledger(2)
    ledger.absorb(
        [
            RankReport(root=root(connect_error="BridgeError: no Dask scheduler answered at x")),
            RankReport(failed=((0, "boom"),)),
        ]
    )
    assert ledger.failure == "BridgeError: no Dask scheduler answered at x"


def test_ledger_names_the_rank_whose_call_differs_or_is_wrong_and_stops() -> None:
    ledger = Ledger(3)
    out = ledger.absorb(
        [
            RankReport(call=("t", 2), root=root()),
            RankReport(call=("t", 2), problem="block of 't' has dtype float32, declared float64"),
            RankReport(call=("t", 3)),
        ]
    )
    mismatch = "rank 2: called publish('t', step=3) while rank 0 called publish('t', step=2)"
    assert out.problem == mismatch
    assert ledger.failure == mismatch  # the call lagged: its publish returned; the Bridge stops
    ledger = Ledger(3)
    ledger.add("t", 2, 0)
    out = ledger.absorb(
        [
            RankReport(call=("t", 2), sent=((0, 8, W),), root=root(connection=CONNECTION)),
            RankReport(call=("t", 2), problem="block of 't' has dtype float32, declared float64"),
            RankReport(call=("t", 2), sent=((0, 8, W),)),
        ]
    )
    assert out.problem == (
        "rank 1: publish('t', step=2) refused: block of 't' has dtype float32, declared float64"
    )
    assert ledger.failure == out.problem and out.ready == []  # nothing registered after it
    ledger = Ledger(3)
    out = ledger.absorb([RankReport(call=("t", 2), root=root()), RankReport(), RankReport()])
    assert out.problem == "rank 1 called publish() while rank 0 was in another collective call"


def test_ledger_in_flight_counts_each_array_and_root_fields_reach_every_rank() -> None:
    ledger = Ledger(1)
    for step in range(3):
        ledger.add("a", step, 0)
    ledger.add("b", 0, 0)
    out = ledger.absorb(
        [
            RankReport(
                sent=((0, 1, W), (1, 1, W), (2, 1, W), (3, 1, W)),
                root=root(connection=CONNECTION, registered=2, fields={"contract": {"x": 1}}),
            )
        ]
    )
    assert (ledger.in_flight("a"), ledger.in_flight("b")) == (1, 1)
    assert [entry.seq for entry, _ in out.ready] == [2, 3]
    assert out.fields == {"contract": {"x": 1}}


def test_registration_outcomes_are_read_the_same_in_both_modes(caplog) -> None:
    from deisa.bridge._publisher import registration

    def read(reply: dict, on_worker_loss: str = "continue") -> tuple[str, str | None]:
        return registration(reply, "gtemp", 3, on_worker_loss)

    assert read({"status": "OK"}) == ("queued", None)
    assert read({"status": "OK", "replaced": True}) == ("replaced", None)
    with caplog.at_level("WARNING", logger="deisa.bridge._publisher"):
        assert read({"status": "dropped", "message": "step 3 passed"}) == ("dropped", None)
        lost = {"status": "lost", "message": "its blocks died", "workers": ["tcp://w:1"]}
        assert read(lost) == ("lost", None)
    assert "step 3 passed" in caplog.text
    assert "step 3 of 'gtemp' lost with worker(s) tcp://w:1: its blocks died" in caplog.text
    assert read(lost, "fail") == ("error", "its blocks died")
    assert read({"status": "timeout", "message": "flow control"}) == ("error", "flow control")
