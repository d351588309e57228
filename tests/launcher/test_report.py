"""deisa.launcher.report: the time to first step reaches deisa-run's table and results.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

from deisa.launcher import report
from deisa.launcher.pipeline import StepAnalytics


def _steps() -> list[StepAnalytics]:
    return [StepAnalytics(s, 0.0, 0.5, 8 * 2**20, [2.0, 1.0], [0.6, 0.3]) for s in range(2)]


def test_time_to_first_step_is_printed_and_written(tmp_path: Path) -> None:
    timings = [[{"step": s, "compute_s": 1.0, "publish_s": 0.01, "send_s": 0.004,
                 "nbytes": 2**20} for s in range(2)]]  # fmt: skip
    rows = report.step_table(_steps(), timings)
    text = report.format_table(rows, first_step_s=1.234)
    assert text.splitlines()[-1] == (
        "time to first step: the first step reached the analytics 1.23 s after the simulation "
        "started"
    )
    path = report.write_results(tmp_path / "r.json", _steps(), rows, {}, first_step_s=1.234)
    assert math.isclose(json.loads(path.read_text())["first_step_s"], 1.234)


def test_time_to_first_step_is_left_out_when_unknown(tmp_path: Path) -> None:
    rows = report.step_table(_steps())
    assert "time to first step" not in report.format_table(rows)
    path = report.write_results(tmp_path / "r.json", _steps(), rows, {})
    assert json.loads(path.read_text())["first_step_s"] is None


def test_c_solver_timings_fill_compute_and_publish(tmp_path: Path) -> None:
    """The C solver's HEAT_TIMINGS files (one per rank): the expose is the publish; the
    transfer and the bytes are unknown there, so their columns stay empty."""
    for rank, compute in ((1, 0.3), (0, 0.2)):
        (tmp_path / f"heat-timings.{rank}.json").write_text(json.dumps({
            "rank": rank, "epoch": 0.0, "pdi_init_s": 0.1, "first_output_s": 0.5,
            "finalize_s": 0.0, "wall_s": 1.0,
            "steps": [{"step": s, "compute_s": compute, "output_s": 0.01 * (rank + 1)}
                      for s in range(2)],
        }))  # fmt: skip
    timings = report.read_timings(tmp_path / "heat-timings")
    assert [[e["compute_s"] for e in rank] for rank in timings] == [[0.2, 0.2], [0.3, 0.3]]
    rows = report.step_table(_steps(), timings)
    assert [(r["compute_s"], r["publish_s"], r["send_s"], r["nbytes"]) for r in rows] == [
        (0.3, 0.02, None, 8 * 2**20)
    ] * 2
    assert "total" in report.format_table(rows)
    assert report.read_timings(tmp_path / "nosuch") == []
