"""deisa.pca_app.report: the time to first step reaches deisa-run's table and results.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

from deisa.pca_app import report
from deisa.pca_app.pipeline import StepAnalytics


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
    measured = report.Measured(first_step_s=1.234)
    path = report.write_results(tmp_path / "r.json", _steps(), rows, {}, measured)
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


def _stream(analytics_s: list[float], arrived_s: list[float]) -> list[StepAnalytics]:
    return [
        StepAnalytics(s, 0.0, a, 2**20, [2.0, 1.0], [0.6, 0.3], arrived_s=t)
        for s, (a, t) in enumerate(zip(analytics_s, arrived_s, strict=True))
    ]


def _timings(compute_s: float, publish_s: list[float]) -> list[list[dict[str, object]]]:
    return [[{"step": s, "compute_s": compute_s, "publish_s": p, "send_s": None, "nbytes": None}
             for s, p in enumerate(publish_s)]]  # fmt: skip


def test_warm_up_is_the_first_step_and_those_that_queued_behind_it() -> None:
    # step 0 ends at 1.0 s: step 1 (arrived at 0.5 s) queued behind it, step 2 did not
    analytics = _stream([1.0, 0.6, 0.2, 0.2, 0.3], [0.0, 0.5, 1.2, 1.7, 2.2])
    rows = report.step_table(analytics, _timings(0.5, [0.3, 0.2, 0.01, 0.01, 0.01]))
    summary = report.phases(analytics, rows)
    assert (summary["warm_up"], summary["steady"]) == ([0, 1], [2, 3, 4])
    assert math.isclose(summary["steady_analytics_s"], 0.2)
    assert math.isclose(summary["held"]["warm_up"], 0.5)
    assert math.isclose(summary["held"]["steady"], 0.03)
    assert math.isclose(summary["wall"]["steady"], 1.53)
    text = report.format_phases(summary)
    assert "warm-up (steps 0-1" in text and "step 0's PCA took 1.00 s, 5.0x a steady step's" in text
    assert "steady state (steps 2-4): PCA 0.20 s per step (median) against 0.50 s" in text
    assert "(2.0 %): the analytics keeps up" in text


def test_steady_state_held_by_a_slower_analytics_says_so() -> None:
    analytics = _stream([1.0, 0.9, 0.9, 0.9], [0.0, 0.5, 1.5, 2.4])
    rows = report.step_table(analytics, _timings(0.1, [0.1, 0.1, 0.8, 0.8]))
    text = report.format_phases(report.phases(analytics, rows))
    assert "the analytics is slower than the simulation, so flow control holds" in text
    fast = _stream([1.0, 0.9, 0.05, 0.05], [0.0, 0.5, 1.5, 2.4])
    rows = report.step_table(fast, _timings(0.1, [0.1, 0.1, 0.8, 0.8]))
    assert "not flow control alone" in report.format_phases(report.phases(fast, rows))


def test_measured_flow_control_decides_over_the_medians() -> None:
    """A PCA slower than a compute step may still keep up (fits run side by side): where the
    Bridge measured how long flow control held the simulation, the report says that, not what
    the medians suggest (deisa-run, idle, 2026-11-23: "flow control holds the simulation"
    above a closing line of "held by flow control 0.00 s")."""
    analytics = _stream([1.0, 0.9, 0.9, 0.9], [0.0, 0.5, 1.5, 2.4])
    rows = report.step_table(analytics, _timings(0.1, [0.1, 0.1, 0.8, 0.8]))
    idle = report.phases(analytics, rows, {"held_s": 0.01, "open_s": 3.0})
    text = report.format_phases(idle)
    assert (
        "flow control held the simulation 0.01 s of the 3.00 s its stream was open (0.3 %), so "
        "the analytics keeps up: the rest is the publish itself" in text
    )
    assert "slower" not in text
    held = report.format_phases(report.phases(analytics, rows, {"held_s": 1.5, "open_s": 3.0}))
    assert (
        "flow control held the simulation 1.50 s of the 3.00 s its stream was open (50.0 %): the "
        "analytics is slower than the simulation" in held
    )
    assert idle["flow_control"] == {"held_s": 0.01, "open_s": 3.0}


def test_phases_without_timings_or_steady_steps() -> None:
    analytics = _stream([1.0, 0.5], [0.0, 0.2])
    summary = report.phases(analytics, report.step_table(analytics))
    assert summary["steady"] == [] and summary["held"] is None
    assert report.format_phases(summary).startswith("warm-up (steps 0-1")
    assert report.phases([], [])["warm_up"] == []


def test_results_json_carries_the_phases(tmp_path: Path) -> None:
    analytics = _stream([1.0, 0.2, 0.2], [0.0, 1.5, 2.0])
    rows = report.step_table(analytics)
    phases = json.loads(report.write_results(tmp_path / "r.json", analytics, rows, {}).read_text())
    assert phases["phases"]["warm_up"] == [0] and phases["phases"]["steady"] == [1, 2]


def test_the_ways_the_ranks_sent_are_one_line_and_in_results_json(tmp_path: Path) -> None:
    import io

    from deisa.pca_app.driver import ways

    totals = {"published": 3, "ranks by shared memory": 3, "ranks by tcp": 1, "bytes": 8}
    found = ways(totals)
    assert found == {"shared memory": 3, "tcp": 1}
    assert ways({"published": 3}) is None  # before the stream's end
    out = io.StringIO()
    report.report(_steps(), None, tmp_path, {}, "field", out, report.Measured(transports=found))
    assert "blocks sent by shared memory (3 ranks), by tcp (1 rank)" in out.getvalue().splitlines()
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["transports"] == {"shared memory": 3, "tcp": 1}


def test_the_ranks_warm_pools_are_on_the_transport_line_and_in_results_json(
    tmp_path: Path,
) -> None:
    import io

    from deisa.bridge.shm.pool import SMALL, THP, pool_totals
    from deisa.pca_app.driver import pool

    summaries = [  # Bridge.shm_pool of 3 ranks
        {"budget_mib": 80.0, "peak_mib": 80.0, "pages": [THP], "shrunk": None},
        {"budget_mib": 80.0, "peak_mib": 64.4, "pages": [SMALL, THP], "shrunk": "memory short"},
        {"budget_mib": 80.0, "peak_mib": 80.0, "pages": [THP], "shrunk": None},
    ]
    sent = pool_totals(summaries)  # what rank 0 sends with the end of the stream
    totals = {"ranks by shared memory": 3, **{f"pool {k}": v for k, v in sent.items()}}
    found = pool(totals)
    assert found == {"peak KiB": 229786, "budget KiB": 245760, "ranks": 3, "ranks shrunk": 1,
                     f"ranks with {SMALL}": 1, f"ranks with {THP}": 3}  # fmt: skip
    assert pool({"ranks by tcp": 2}) is None and pool_totals([{"budget_mib": 0}]) == {}
    out = io.StringIO()
    measured = report.Measured(transports={"shared memory": 3}, shm_pool=found)
    report.report(_steps(), None, tmp_path, {}, "field", out, measured)
    assert (
        "blocks sent by shared memory (3 ranks); warm pool 224 MiB of 240 MiB in 3 ranks "
        f"({SMALL}, {THP}), shrunk under memory pressure on 1"
    ) in out.getvalue().splitlines()
    assert json.loads((tmp_path / "results.json").read_text())["shm_pool"] == found


def test_blocks_sent_by_tcp_for_want_of_a_slot_are_said() -> None:
    """Issue 56 item 9: a fallback is reported, with a pool or without one."""
    from deisa.bridge.shm.pool import THP, pool_totals
    from deisa.pca_app.driver import pool

    summaries = [{"budget_mib": 8.0, "peak_mib": 8.0, "pages": [THP], "shrunk": None,
                  "fallbacks": 3}]  # fmt: skip
    found = pool({f"pool {k}": v for k, v in pool_totals(summaries).items()})
    assert found is not None and found["fallbacks"] == 3
    assert report.pool_in_words(found).endswith("; 3 blocks by TCP for want of a slot")
    assert report.pool_in_words({"fallbacks": 1}) == "1 block by TCP for want of a slot"
