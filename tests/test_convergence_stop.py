"""The convergence stop, in process: its criterion, its report line and its launcher option.

The real-process runs (the Python and the C solver stopped by the analytics) are in
test_steering_mpi.py.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from deisa.launcher import defaults, options, parse, slurm
from deisa.launcher.defaults import UsageError
from deisa.launcher.options import RUN
from deisa.launcher.plan import make_plan
from deisa.pca_app import report
from deisa.pca_app.pipeline import StepAnalytics, _relative_change, stop_summary


def step(n: int, ratio: list[float], **fields: object) -> StepAnalytics:
    return StepAnalytics(n, 0.0, 0.1, 64, [1.0] * len(ratio), ratio, **fields)  # type: ignore[arg-type]


def test_relative_change_is_that_of_the_explained_variance_ratio() -> None:
    assert _relative_change(step(0, [0.6, 0.8]), step(1, [0.6, 0.8])) == 0.0
    assert _relative_change(step(0, [0.6, 0.8]), step(1, [0.6, 0.9])) == pytest.approx(0.1)
    assert _relative_change(step(0, [0.0]), step(1, [0.5])) == float("inf")


def test_stop_summary_names_the_step_the_reason_and_the_last_step() -> None:
    reason = "the PCA converged: relative change 0.004 < 0.01 since step 2"
    steps = [step(0, [0.5]), step(1, [0.6]), step(2, [0.61]), step(3, [0.61], stop_reason=reason)]
    steps.append(step(4, [0.61]))
    assert stop_summary(steps[:3]) is None
    assert stop_summary(steps, 40) == (
        f"stopped early: after step 3 the analytics asked the simulation to stop ({reason}); "
        "it published 5 step(s) of 40 planned, the last being step 4"
    )
    assert "5 step(s), the last" in str(stop_summary(steps))


def test_report_says_why_the_run_stopped(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    reason = "the PCA converged: relative change 0.004 < 0.01 since step 0"
    steps = [step(0, [0.5]), step(1, [0.5], relative_change=0.004, stop_reason=reason)]
    out = io.StringIO()
    settings = {"simulation": {"steps": 10}, "stop_when_converged": 0.01}
    report.report(steps, None, tmp_path, settings, "gtemp", out)
    assert "stopped early: after step 1 the analytics asked the simulation to stop" in (
        out.getvalue()
    )
    assert "of 10 planned, the last being step 1" in out.getvalue()
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["steps"][1]["stop_reason"] == reason
    assert results["steps"][1]["relative_change"] == 0.004
    assert results["settings"]["stop_when_converged"] == 0.01
    out = io.StringIO()
    report.report(steps[:1], None, tmp_path, settings, "gtemp", out)
    assert "stopped early" not in out.getvalue()


def test_stop_when_converged_option_of_the_three_commands(tmp_path: Path) -> None:
    settings = parse.run_settings(RUN, ["--solver", "python", "--stop-when-converged", "1e-3"])
    assert settings.stop_when_converged == 1e-3
    assert settings.summary()["stop_when_converged"] == 1e-3
    assert (
        parse.run_settings(RUN, ["--solver", "python"]).summary()["stop_when_converged"] is None
    )  # the packaged default: never
    for bad in ("0", "-1"):
        with pytest.raises(UsageError, match=f"--stop-when-converged={float(bad)!r} must be"):
            parse.run_settings(RUN, ["--solver", "python", "--stop-when-converged", bad])
    user = tmp_path / "defaults.yml"
    user.write_text("run: {stop_when_converged: yes}\n")
    with pytest.raises(UsageError, match=r"run\.stop_when_converged=True must be a positive"):
        parse.run_settings(RUN, ["--solver", "python", "--defaults", str(user)])
    analytics = parse.analytics_settings(
        ["--scheduler-file", "s.json", "--stop-when-converged", "0.5"]
    )
    assert analytics.stop_when_converged == 0.5
    help_text = options.build_parser(RUN, defaults.load_defaults()).format_help().replace("\n", " ")
    assert "--stop-when-converged EPS" in help_text
    assert "stop the simulation once the explained variance ratio" in " ".join(help_text.split())


def test_slurm_job_passes_stop_when_converged_to_the_client() -> None:
    def script(*argv: str) -> str:
        return slurm.job_script(
            make_plan(parse.run_settings("slurm", ["--solver", "python", *argv]))
        )

    with_stop = script("--stop-when-converged", "0.01")
    client = next(line for line in with_stop.splitlines() if "--timeout" in line)
    assert "--stop-when-converged 0.01 --shutdown" in client
    assert "--stop-when-converged" not in script()
