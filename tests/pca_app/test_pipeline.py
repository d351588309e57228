"""deisa.pca_app.pipeline.analyze_stream on steps published by real MPI ranks
(tests/publish_blocks.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, DaskProcesses, deisa_run, mpirun, start_dask, test_env
from distributed import Client, Event
from sklearn.decomposition import PCA

from deisa.pca_app.failures import PipelineError
from deisa.pca_app.pipeline import (
    Hooks,
    PCASettings,
    StepAnalytics,
    analyze_stream,
    start_warm_up_fit,
)

PUBLISHER = REPO / "tests" / "publish_blocks.py"
sys.path.insert(0, str(PUBLISHER.parent))
from publish_blocks import expected  # noqa: E402


def publish(cluster: DaskProcesses, name: str, shape: tuple[int, int], nsteps: int) -> None:
    cmd = mpirun(
        4,
        sys.executable,
        str(PUBLISHER),
        str(cluster.scheduler_file),
        *("--name", name, "--shape", *map(str, shape), "--nsteps", str(nsteps)),
    )
    proc = subprocess.run(cmd, env=test_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


@contextmanager
def worker_busy(client: Client, name: str) -> Iterator[None]:
    """The only worker thread busy with a task until the end of the block."""
    release = Event(name, client=client)
    busy = client.submit(lambda: release.wait(), pure=False)
    try:
        yield
    finally:
        release.set()
        busy.result()


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    processes = start_dask(tmp_path_factory.mktemp("dask"), n_workers=1)
    yield processes
    processes.stop()


@pytest.mark.parametrize(("shape", "solver"), [((24, 40), "full"), ((24, 520), "randomized")])
def test_analyze_stream_fits_every_step_in_order(
    one_worker: DaskProcesses, shape: tuple[int, int], solver: str
) -> None:
    name = f"steps-{solver}"
    publish(one_worker, name, shape, nsteps=5)
    started: list[int] = []
    reported: list[StepAnalytics] = []
    with one_worker.client() as client:
        steps = analyze_stream(
            client,
            PCASettings(array=name, n_components=2, stall_timeout=None, max_in_flight=3),
            hooks=Hooks(on_start=started.append, on_step=reported.append),
        )
    assert [s.step for s in steps] == list(range(5)) == started
    assert reported == steps
    for s in steps:
        reference = PCA(n_components=2, svd_solver="full").fit(expected(s.step, shape))
        assert s.svd_solver == solver
        np.testing.assert_allclose(
            s.explained_variance, reference.explained_variance_, rtol=1e-9, atol=1e-6
        )
        assert s.nbytes == 8 * shape[0] * shape[1] and s.analytics_s > 0


def test_analyze_stream_names_the_step_and_phase_of_a_stalled_fit(
    one_worker: DaskProcesses,
) -> None:
    """The only worker thread is busy: the fit of step 0 cannot start its local reduction."""
    publish(one_worker, "stalled", (8, 6), nsteps=2)
    with one_worker.client() as client, worker_busy(client, "release-the-worker"):
        with pytest.raises(PipelineError) as failure:
            analyze_stream(client, PCASettings(array="stalled", stall_timeout=3, poll_s=0.5))
        stats = client.sync(client.scheduler.deisa_stats)["streams"]["stalled"]
    # the failed analytics detached: flow control no longer waits for it
    assert not stats["consumers"], stats
    message = str(failure.value)
    assert "the PCA of step 0 of 'stalled' made no progress for" in message
    assert "phase: local reductions, 0 of 1 task(s) done" in message


def test_settings_name_the_value_out_of_range() -> None:
    with pytest.raises(ValueError, match="max_in_flight=0"):
        PCASettings(array="unused", max_in_flight=0)
    with pytest.raises(ValueError, match="stop_when_converged=0"):
        PCASettings(stop_when_converged=0)
    with pytest.raises(ValueError, match="not with replay"):
        PCASettings(stop_when_converged=0.1, replay="out.h5")
    with pytest.raises(TypeError):
        PCASettings("gtemp")  # type: ignore[misc]  # keyword-only


def test_deisa_run_analytics_exits_non_zero_naming_a_stalled_fit(
    one_worker: DaskProcesses, tmp_path: Path
) -> None:
    """The launcher turns a fit without progress into exit status 1 and one clear line."""
    publish(one_worker, "stalled-run", (8, 6), nsteps=1)
    with one_worker.client() as client, worker_busy(client, "release-the-worker-again"):
        proc = deisa_run(
            "analytics", "--scheduler-file", str(one_worker.scheduler_file),
            "--array", "stalled-run", "--timeout", "20", "--output", str(tmp_path), timeout=600,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "the PCA of step 0 of 'stalled-run' made no progress" in proc.stderr
    assert "phase: local reductions" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_warm_up_fits_a_small_array_on_the_cluster(one_worker: DaskProcesses) -> None:
    with one_worker.client() as client:
        pending = start_warm_up_fit(client, n_components=4, block=8)
        assert pending is not None
        pca = pending.result()
    assert pca.components_.shape == (4, 16) and pca.svd_solver_ == "full"
    assert pca.n_samples_seen_ == 16
