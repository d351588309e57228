"""What one test leaves for the next: conftest checks it after every test.

A client closed after another one that it outlived leaves dask's configuration naming the
distributed scheduler with no client running (distributed's ``Client.close`` restores the value
the other client had set); a later computation without a client of its own (a replay, a PCA)
then fails with "no Client active", far from the test at fault. The replay tests used to name
the local scheduler explicitly for that reason; conftest now fails the test that leaves it.
"""

from __future__ import annotations

from pathlib import Path

import dask
import pytest
from conftest import stale_dask_scheduler
from distributed import Client, LocalCluster

pytest_plugins = ["pytester"]

LEAKING = """
from distributed import Client, LocalCluster


def test_leaks():
    with LocalCluster(n_workers=0, processes=False, dashboard_address="127.0.0.1:0") as cluster:
        first, second = Client(cluster), Client(cluster)
        first.close()  # the second outlives it, then puts back the first one's setting
        second.close()


def test_next():
    pass
"""


def test_two_clients_closed_out_of_order_leave_a_stale_scheduler() -> None:
    assert stale_dask_scheduler() is None
    try:
        with LocalCluster(n_workers=0, processes=False, dashboard_address="127.0.0.1:0") as cluster:
            first, second = Client(cluster), Client(cluster)
            first.close()
            assert stale_dask_scheduler() is None  # the second one runs: it is the default
            second.close()
        assert stale_dask_scheduler() == (
            "dask's configuration with scheduler='dask.distributed' and no client"
        )
    finally:
        dask.config.config.pop("scheduler", None)


def test_the_test_that_leaves_it_fails_at_its_teardown(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_leaking=LEAKING)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)  # test_next runs clean: the setting went
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaks*",
            "*test_leaking.py::test_leaks left dask's configuration with "
            "scheduler='dask.distributed' and no client*",
        ]
    )
    assert stale_dask_scheduler() is None
