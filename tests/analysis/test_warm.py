"""deisa.analysis.warm: the workers' preload that imports and runs the PCA's kernels."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import STARTUP, DaskProcesses, start_dask
from distributed.utils_test import poll_for

from deisa.analysis import warm as _warm


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    """A scheduler and one worker process started with the warm-up preload."""
    procs = start_dask(tmp_path, n_workers=1, extra_worker_args=["--preload", _warm.__name__])
    yield procs
    procs.stop()


def test_preload_warms_a_worker_up_in_the_background(cluster: DaskProcesses) -> None:
    def _warmed() -> bool:  # defined here: shipped to the worker by value
        import sys
        import threading

        running = any(t.name == "deisa-warm-up" for t in threading.enumerate())
        return not running and "deisa.analysis._pca_kernels" in sys.modules

    with cluster.client() as client:
        poll_for(lambda: all(client.run(_warmed).values()), STARTUP, period=0.2)
        assert all(client.run(lambda: "scipy.linalg" in sys.modules).values())
        log = (cluster.log_dir / "worker-0.log").read_text()  # type: ignore[operator]
        assert "deisa warm-up failed" not in log


def test_warm_up_runs_the_kernels() -> None:
    assert _warm.warm_up() >= 0.0
    assert "deisa.analysis._pca_kernels" in sys.modules


def test_a_failing_warm_up_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> float:
        raise ImportError("no scipy here")

    monkeypatch.setattr(_warm, "warm_up", broken)
    with caplog.at_level(logging.WARNING, logger=_warm.__name__):
        _warm._run()
    assert "deisa warm-up failed" in caplog.text and "no scipy here" in caplog.text
