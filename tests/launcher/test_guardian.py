"""Nothing of a local run outlives ``deisa-run`` (deisa.launcher.guardian), even SIGKILLed.

Real processes: ``deisa-run`` of a user simulation held by flow control (its analytics reads
nothing before a gate file that never comes), SIGKILLed once every part runs; the scheduler,
the workers, ``mpirun``, the ranks and the analytics, Open MPI's shared-memory segments, the
run's private temporary directory and its credentials must all go.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import STARTUP, left_behind, test_env
from distributed.utils_test import poll_for
from user_code import write_user_code

from deisa.launcher.guardian import SHM


def _tree(pid: int) -> list[Any]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def _segments(procs: list[Any]) -> set[str]:
    paths: set[str] = set()
    for proc in procs:
        try:
            paths.update(m.path for m in proc.memory_maps() if m.path.startswith(SHM + "/"))
        except psutil.Error:
            continue
    return paths


@pytest.mark.timeout(600)
def test_a_sigkilled_run_leaves_no_process_and_no_file(tmp_path: Path) -> None:
    simulation, analytics = write_user_code(tmp_path / "code")
    out, gate, tmpdir = tmp_path / "out", tmp_path / "gate", tmp_path / "tmp"
    tmpdir.mkdir(mode=0o700)
    proc = subprocess.Popen(
        [sys.executable, "-m", "deisa.launcher", "--ranks", "2", "--workers", "2",
         "--timeout", "240", "--output", str(out),
         "--analytics", f"{analytics} 100000 2 gate={gate}",
         "--", str(simulation), "100000", "-1", "1"],
        env={**test_env(), "TMPDIR": str(tmpdir)}, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        ranks: list[Any] = []

        def ranks_share_memory() -> bool:  # every part runs, the ranks hold their segments
            ranks[:] = [p for p in _tree(proc.pid) if p.cmdline()[1:3] == ["-P", str(simulation)]]
            return len(ranks) == 2 and len(_segments(ranks)) == 2

        poll_for(ranks_share_memory, 2 * STARTUP, period=0.5)
        run = _tree(proc.pid)
        segments = _segments(ranks)
        names = " ".join(" ".join(p.cmdline()) for p in run)
        for part in ("scheduler", "worker", "mpirun", "my_simulation", "my_analytics"):
            assert part in names, names
        assert (out / "tls" / "key.pem").exists()
        private = list(tmpdir.iterdir())
        assert [p.name[:6] for p in private] == ["deisa-"], private
        proc.kill()
        _, stderr = proc.communicate(timeout=2 * STARTUP)  # the guardian's end included
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    def gone() -> bool:
        return not any(p.is_running() for p in run) and not any(
            map(Path.exists, map(Path, segments))
        )

    poll_for(gone, STARTUP, period=0.5)
    assert left_behind(tmp_path) == []
    assert list(tmpdir.iterdir()) == []  # the run's private directory, Open MPI's session in it
    assert not (out / "tls").exists()
    said = [line for line in stderr.splitlines() if "exited without stopping" in line]
    assert len(said) == 1 and "its guardian stopped" in said[0], stderr[-3000:]
    for part in ("dask scheduler", "dask worker", "mpirun", "my_simulation.py", "my_analytics.py"):
        assert part in said[0], said[0]
