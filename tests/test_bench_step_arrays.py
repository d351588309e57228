"""bench.step_arrays (issue 56 item 9) runs every case end to end at a toy size: many arrays
of a step and one array of their bytes, a big array with ``zip`` and ``items()``, joined moving
particles and fixed arrays of theirs; its numbers are not checked here (performance targets
live in the benchmark's own output, never in timed tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, test_env

from bench.step_arrays import CASES


@pytest.mark.timeout(600)
def test_step_arrays_runs_every_case_side_by_side(tmp_path: Path) -> None:
    args = ["--steps", "3", "--repeat", "1", "--arrays", "3", "--array-kib", "16",
            "--big-mib", "1", "--particles", "1000", "--components", "3", "--compute-ms", "5",
            "--profile"]  # fmt: skip
    cmd = [sys.executable, "-m", "bench.step_arrays", *args, "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=test_env(), capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target missed, as printed
    assert "target:" in proc.stdout and "fallbacks" in proc.stdout, proc.stdout
    result = json.loads((tmp_path / "step_arrays.json").read_text())
    rows = {r["case"]: r for r in result["rows"]}
    assert sorted(rows) == sorted(CASES)
    arrays = {"many": 3, "one": 2, "big-zip": 2, "big-items": 1, "particles": 3,
              "particles-fixed": 3}  # fmt: skip
    for case, row in rows.items():
        assert row["arrays"] == arrays[case], row
        # every block of the 3 + 2 steps went somewhere, and by shared memory on this node
        assert row["by_shm"] + row["by_tcp"] == 5 * arrays[case], row
        assert row["fallbacks"] == 0 and row["by_tcp"] == 0, row
        assert row["publish_ms"] > 0 and row["memcpy_ms"] > 0, row
        assert row["registrations_per_step"] > 0, row  # rank 0's registrar's rounds, counted
    assert rows["particles"]["mib"] == rows["particles-fixed"]["mib"]
    assert set(result["profiles"]) == set(CASES)  # rank 0's cProfile of its publishes
    assert "_publish" in result["profiles"]["many"]
