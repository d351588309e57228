"""The Bridge's side of contracts, no cluster: the book that spreads each contract version to
every rank once, and the ledger that counts ranks outside the region as sent with no bytes."""

from __future__ import annotations

from deisa.bridge.contracts import ContractBook
from deisa.contract import FULL, Contract

CHUNKS = ((4, 4), (3, 3))
BLOCKS = ((0, 0), (0, 1), (1, 0), (1, 1))


def test_contract_book_spreads_each_version_once() -> None:
    root, other = ContractBook(), ContractBook()
    assert root.to_spread() is None
    c = Contract.build((slice(0, 4), slice(0, 6))).resolved((8, 6)).with_version(1)
    root.served("u", {"version": 1, "contract": c.to_wire()})
    root.served("u", {"version": 0, "contract": None})  # an older answer is ignored
    changes = root.to_spread()
    assert changes == {"u": {"version": 1, "contract": c.to_wire()}}
    for book in (root, other):  # what the exchange does on every rank
        book.receive(changes)
    assert root.to_spread() is None
    assert root.plan("u", 0, CHUNKS, BLOCKS) == other.plan("u", 0, CHUNKS, BLOCKS)
    assert other.plan("u", 0, CHUNKS, BLOCKS).ranks == (0, 1)
    root.served("u", {"version": 2, "contract": None})  # dropped
    other.receive(root.to_spread() or {})
    assert other.plan("u", 0, CHUNKS, BLOCKS) is FULL


def test_ledger_counts_ranks_outside_the_region_as_sent_with_no_bytes() -> None:
    from deisa.bridge._publisher import Ledger, RankReport, RootReport

    ledger = Ledger(3)
    entry = ledger.add("u", 4, 0, senders=(1,), plan="p")
    assert (entry.senders, entry.plan) == ((1,), "p")
    root = RankReport(root=RootReport())
    assert ledger.absorb([root, RankReport(), RankReport()]).ready == []  # rank 1 not done
    ready = ledger.absorb([root, RankReport(sent=((0, 96, "tcp://w"),)), RankReport()]).ready
    assert ready == [(entry, [(0, ""), (96, "tcp://w"), (0, "")])]
