"""bench.adios2_endstep runs end to end at a toy size: every lane this machine has (the deisa
engine and BP5 where ADIOS2 with MPI and the engine are built, SST where the adios2 wheel has
it), each skipped lane named with its reason (its numbers are not checked here: the targets
live in the benchmark's own output)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, test_env

from bench.adios2_endstep import build_writer, find_engine, sst_available


@pytest.mark.timeout(900)
def test_adios2_endstep_runs_every_lane_here_and_names_the_others(tmp_path: Path) -> None:
    writer, _ = build_writer()
    expected = {"SST"} if sst_available() is None else set()
    if writer is not None:
        expected |= {"BP5"} | ({"deisa"} if find_engine() is not None else set())
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = ["--sizes", "1", "--steps", "4", "--out", str(tmp_path)]
    proc = subprocess.run([sys.executable, "-m", "bench.adios2_endstep", *args], cwd=REPO,
                          env={**test_env(), "TMPDIR": str(tmp)}, capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target missed, as printed
    result = json.loads((tmp_path / "adios2_endstep.json").read_text())
    # the engine is another component: a crash of its lane is reported, not the bench's failure
    failed = {lane for lane, why in result["skipped"].items() if why.startswith("failed at")}
    assert failed <= {"deisa"}, result["skipped"]
    assert {r["lane"] for r in result["records"]} == expected - failed
    assert set(result["skipped"]) == {"deisa", "BP5", "SST"} - expected | failed
    for lane, why in result["skipped"].items():
        assert f"lane {lane} {'' if lane in failed else 'skipped: '}" in proc.stdout
        assert why.split(": ", 1)[-1] in proc.stdout
    for record in result["records"]:
        assert record["step_s"] > 0 and record["memcpy_s"] > 0, record
        if record["lane"] != "BP5":  # a reader saw every step
            assert record["steps_seen"] == [4], record
    assert len(result["targets"]) == 2
    measured = [t["passed"] is not None for t in result["targets"]]
    deisa = "deisa" in expected - failed
    assert measured == [deisa, deisa and "SST" in expected]
    assert not list(tmp.iterdir())
