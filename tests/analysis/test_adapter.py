"""Adapter selections on data published by real MPI ranks (tests/publish_blocks.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import REPO, DaskProcesses, mpirun, start_dask, test_env

from deisa import Adapter, EndOfStreamError, StepNotAvailableError

PUBLISHER = REPO / "tests" / "publish_blocks.py"
sys.path.insert(0, str(PUBLISHER.parent))
from publish_blocks import expected  # noqa: E402

SHAPE = (8, 6)


def publish(cluster: DaskProcesses, *args: str, nranks: int = 4) -> None:
    cmd = mpirun(nranks, sys.executable, str(PUBLISHER), str(cluster.scheduler_file), *args)
    proc = subprocess.run(cmd, env=test_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    processes = start_dask(tmp_path_factory.mktemp("dask"))
    yield processes
    processes.stop()


@pytest.fixture
def client(cluster: DaskProcesses):
    with cluster.client() as c:
        yield c


def test_descriptor_integer_step_has_no_tasks(cluster: DaskProcesses, client) -> None:
    publish(cluster, "--name", "a", "--steps", "0", "1", "2")
    field = Adapter(client, timeout=30)["a"]
    one = field[1, :, :]
    assert one.shape == SHAPE
    assert dict(one.dask) and all(type(v).__name__ == "Future" for v in one.dask.values())
    np.testing.assert_array_equal(one.compute(), expected(1, SHAPE))
    np.testing.assert_array_equal(field[2, 1:7, ::2].compute(), expected(2, SHAPE)[1:7, ::2])
    np.testing.assert_array_equal(field[0, ..., 3].compute(), expected(0, SHAPE)[:, 3])
    assert field.shape == SHAPE and field.dtype == np.float64


def test_descriptor_ranges_lists_and_negative_steps(cluster: DaskProcesses, client) -> None:
    publish(cluster, "--name", "b", "--steps", "0", "2", "4", "6")
    field = Adapter(client, timeout=30)["b"]
    pair = field[0:3]  # published step numbers 0 and 2
    np.testing.assert_array_equal(
        pair.compute(), np.stack([expected(0, SHAPE), expected(2, SHAPE)])
    )
    with pytest.raises(StepNotAvailableError, match="step 3 of 'b' was not published"):
        field[3]
    both = field[range(4, 7, 2), 0]
    np.testing.assert_array_equal(both.compute(), np.stack([expected(s, SHAPE)[0] for s in (4, 6)]))
    np.testing.assert_array_equal(field[-1].compute(), expected(6, SHAPE))
    assert field[[0, 6]].shape == (2, *SHAPE)
    assert field[...].shape == (4, *SHAPE)
    assert field.ended


def test_descriptor_errors_name_what_is_wrong(cluster: DaskProcesses, client) -> None:
    publish(cluster, "--name", "c", "--steps", "0")
    field = Adapter(client, timeout=30)["c"]
    with pytest.raises(IndexError, match="index 8 is out of bounds for axis 1 of 'c' with size 8"):
        field[0, 8, 0]
    with pytest.raises(IndexError, match="too many indices for 'c'"):
        field[0, 0, 0, 0]
    with pytest.raises(TypeError, match="cannot select steps of 'c'"):
        field["zero"]
    assert field[0].shape == SHAPE
    with pytest.raises(EndOfStreamError, match="step 1 is past the end of the stream of 'c'"):
        field[1]
    assert list(field) == []


def test_descriptor_times_out_saying_what_is_missing(client) -> None:
    field = Adapter(client, timeout=0.5)["never"]
    with pytest.raises(TimeoutError, match=r"no simulation has opened array 'never' within 0\.5 s"):
        field[0]


def test_descriptor_data_lives_as_long_as_the_array(cluster: DaskProcesses, client) -> None:
    publish(cluster, "--name", "d", "--steps", "0")
    field = Adapter(client, timeout=30)["d"]
    first = field[0]
    again = field[0]  # handed out before, still alive: the same keys
    assert again.name == first.name
    total = (first + again).sum()
    del first, again
    assert total.compute() == 2 * expected(0, SHAPE).sum()
    del total
    with pytest.raises(StepNotAvailableError, match="released"):
        field[0]


def test_descriptor_iterates_until_end_of_stream(cluster: DaskProcesses, client) -> None:
    publish(cluster, "--name", "e", "--steps", "3", "5", "--buffer-nb", "4")
    steps = [(s, f.compute()) for s, f in Adapter(client, timeout=30)["e"].items()]
    assert [s for s, _ in steps] == [3, 5]
    for s, values in steps:
        np.testing.assert_array_equal(values, expected(s, SHAPE))


def test_a_new_run_replaces_a_finished_one_whose_end_was_never_read(
    cluster: DaskProcesses, client
) -> None:
    publish(cluster, "--name", "r", "--steps", "0", "1")
    first_run = Adapter(client, timeout=30)["r"]
    assert first_run[1].compute().sum() == expected(1, SHAPE).sum()  # the end is never read
    # closed after: it would receive the next run too
    with (
        Adapter(client, timeout=0.5) as late,
        pytest.raises(TimeoutError, match="no simulation has opened array 'r'"),
    ):
        late["r"][0]  # a finished run is not served to a new reader

    publish(cluster, "--name", "r", "--shape", "10", "6", "--steps", "0", "1", "2")
    with pytest.raises(EndOfStreamError):
        first_run[2]  # its run was replaced: its stream ended
    second_run = Adapter(client, timeout=30)["r"]
    assert second_run.shape == (10, 6)
    steps = dict(second_run.items())
    assert list(steps) == [0, 1, 2]
    np.testing.assert_array_equal(steps[2].compute(), expected(2, (10, 6)))


def test_a_run_that_published_no_step_ends_for_a_new_reader(cluster: DaskProcesses, client) -> None:
    publish(cluster, "--name", "empty", "--nsteps", "0")
    field = Adapter(client, timeout=30)["empty"]
    assert list(field) == [] and field.ended
