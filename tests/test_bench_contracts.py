"""The contracts benchmark runs end to end at a toy size; the bytes it reports are exact (what
each rank sent), so its byte target is checked, its time target is not (timings belong in
bench/, not in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, STARTUP, test_env

from bench.contracts import VARIANTS, check_targets


def test_contracts_bench_runs_and_writes_table_and_json(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench.contracts", "--ranks", "4", "--block", "16", "16",
           "--steps", "10", "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=3 * STARTUP
    )
    assert "| quarter/5 |" in proc.stdout, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "contracts.json").read_text())
    records = {r["variant"]: r for r in result["records"]}
    assert set(records) == set(VARIANTS)
    assert records["full"]["bytes_sent"] == 4 * 10 * 16 * 16 * 8
    assert records["quarter/5"]["bytes_sent"] == 1 * 2 * 16 * 16 * 8  # 1 rank, steps 0 and 5
    assert records["quarter/5"]["steps_received"] == 2
    assert result["targets"][0]["passed"] is True


def test_byte_target_counts_the_ranks_and_steps_of_the_quarter() -> None:
    base = {"ranks": 8, "steps": 20, "quarter_ranks": 2, "simulation_s": 1.0}
    full = {**base, "variant": "full", "bytes_sent": 8 * 20 * 100}
    quarter = {**base, "variant": "quarter/5", "bytes_sent": 2 * 4 * 100, "simulation_s": 0.5}
    assert [passed for _, passed, _ in check_targets([full, quarter])] == [True, True]
    quarter["bytes_sent"] += 100  # one block too many
    assert [passed for _, passed, _ in check_targets([full, quarter])] == [False, True]
