"""The report of a run: the per-step table, the explained-variance plot and ``results.json``.

:func:`step_table`, :func:`format_table`, :func:`plot_explained_variance` and
:func:`write_results` turn what :func:`deisa.pca_app.pipeline.analyze_stream` measured, plus the
simulation's own per-step timings (:func:`read_timings`), into the table, the PNG and the JSON
that ``deisa-run`` leaves in its output directory. matplotlib is imported here only, when a
plot is drawn. They read the fields of :class:`~deisa.pca_app.pipeline.StepAnalytics` by name, so
fields added to it later reach ``results.json`` and leave the table as it is.

Examples
--------
>>> with Client(scheduler_file="scheduler.json") as client:  # doctest: +SKIP
...     steps = analyze_stream(client, PCASettings(array="gtemp", n_components=4))
>>> print(format_table(step_table(steps, read_timings("timings.json"))))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from .failures import naming_path
from .pipeline import StepAnalytics, stop_summary


def read_timings(path: str | Path) -> list[list[dict[str, Any]]]:
    """Per-rank, per-step timings of the simulation.

    ``path`` is the file written by ``deisa_simulation.heat --timings``, or the prefix the C
    solver was given in ``HEAT_TIMINGS`` (its ``PREFIX.<rank>.json`` files: the ``iter``
    expose is the publish; the transfer and the bytes are not known there, so ``send_s`` and
    ``nbytes`` are ``None``). Returns an empty list when there is neither.
    """
    path = Path(path)
    if path.is_file():
        ranks: list[list[dict[str, Any]]] = json.loads(path.read_text())["ranks"]
        return ranks
    files = sorted(path.parent.glob(f"{path.name}.*.json"), key=lambda p: p.name)
    per_rank = [json.loads(f.read_text()) for f in files]
    return [
        [{"step": s["step"], "compute_s": s["compute_s"], "publish_s": s["output_s"],
          "send_s": None, "nbytes": None} for s in rank["steps"]]
        for rank in sorted(per_rank, key=lambda r: int(r["rank"]))
    ]  # fmt: skip


def step_table(
    analytics: Sequence[StepAnalytics], timings: Sequence[Sequence[dict[str, Any]]] = ()
) -> list[dict[str, Any]]:
    """One row per step: compute, publish and analytics seconds, bytes and bandwidth.

    Parameters
    ----------
    analytics
        From :func:`analyze_stream`.
    timings
        From :func:`read_timings`: per rank, per step ``compute_s``, ``publish_s``,
        ``send_s``, ``nbytes``.

    Returns
    -------
    list of dict
        Keys ``step``; ``compute_s``, ``publish_s`` (flow-control waits included) and
        ``send_s`` (the block transfer alone) of the slowest rank; ``wait_s``, the most any
        rank's ``publish`` spent beyond its transfer (registration, and waiting for the
        analytics when flow control holds the simulation); ``analytics_s``; ``nbytes``
        (all ranks, or the analysed array's size without timings) and ``bandwidth_Bps``
        (``nbytes`` over the slowest rank's ``send_s``).
        Values the simulation did not report are ``None``.
    """
    per_step: dict[int, list[dict[str, Any]]] = {}
    for rank in timings:
        for entry in rank:
            per_step.setdefault(int(entry["step"]), []).append(entry)
    rows = []
    done = {a.step: a for a in analytics}
    for step in sorted(set(per_step) | set(done)):
        entries = per_step.get(step, [])
        row: dict[str, Any] = {
            "step": step,
            "compute_s": max((e["compute_s"] for e in entries), default=None),
            "publish_s": max((e["publish_s"] for e in entries), default=None),
            "send_s": max((e["send_s"] for e in entries if e["send_s"] is not None), default=None),
            "wait_s": max(
                (e["publish_s"] - e["send_s"] for e in entries if e["send_s"] is not None),
                default=None,
            ),
            "analytics_s": done[step].analytics_s if step in done else None,
            "nbytes": (
                sum(e["nbytes"] for e in entries)
                if entries and all(e["nbytes"] is not None for e in entries)
                else done[step].nbytes
                if step in done
                else None
            ),
        }
        send = row["send_s"]
        row["bandwidth_Bps"] = row["nbytes"] / send if entries and send and row["nbytes"] else None
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict[str, Any]], first_step_s: float | None = None) -> str:
    """A plain-text table of :func:`step_table` rows, with a total line.

    ``first_step_s``, when known, is printed after it: seconds from the simulation's start
    (its launch) to the first step reaching the analytics, the start-up the simulation's
    interpreter, imports and connection cost before the analytics can begin.
    """
    header = (
        f"{'step':>5} {'compute s':>10} {'publish s':>10} {'send s':>8} {'sim wait s':>10} "
        f"{'analytics s':>12} {'MiB':>9} {'MiB/s':>9}"
    )

    def cell(value: float | None, width: int, fmt: str) -> str:
        return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"

    def line(label: str, row: dict[str, Any]) -> str:
        mib = None if row["nbytes"] is None else row["nbytes"] / 2**20
        bw = None if row["bandwidth_Bps"] is None else row["bandwidth_Bps"] / 2**20
        return (
            f"{label:>5} {cell(row['compute_s'], 10, '.4f')} {cell(row['publish_s'], 10, '.4f')} "
            f"{cell(row['send_s'], 8, '.4f')} {cell(row['wait_s'], 10, '.4f')} "
            f"{cell(row['analytics_s'], 12, '.4f')} "
            f"{cell(mib, 9, '.2f')} {cell(bw, 9, '.1f')}"
        )

    lines = [header, "-" * len(header)]
    lines += [line(str(row["step"]), row) for row in rows]

    def total(key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return sum(values) if values else None

    totals: dict[str, Any] = {
        k: total(k) for k in ("compute_s", "publish_s", "send_s", "wait_s", "analytics_s", "nbytes")
    }
    totals["bandwidth_Bps"] = (
        totals["nbytes"] / totals["send_s"]
        if totals["nbytes"] is not None and totals["send_s"]
        else None
    )
    lines += ["-" * len(header), line("total", totals)]
    lines.append(
        "compute, publish (flow-control waits included), send: slowest rank; sim wait: publish "
        "beyond the transfer; MiB: all ranks; MiB/s: MiB / send s"
    )
    if first_step_s is not None:
        lines.append(
            f"time to first step: the first step reached the analytics {first_step_s:.2f} s "
            "after the simulation started"
        )
    return "\n".join(lines)


#: the share of the simulation's time in publish under which the analytics keeps up
KEEPS_UP = 0.10


def phases(
    analytics: Sequence[StepAnalytics],
    rows: Sequence[dict[str, Any]],
    flow_control: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The run's warm-up told apart from its steady state.

    The warm-up is the first step and the steps that arrived while its PCA ran: they wait
    behind the first fit, which pays the start-up of the analytics (the first graph, the
    first transfers between workers, whatever the workers had not imported or run yet). The
    steady state is every later step.

    Parameters
    ----------
    analytics
        From :func:`~deisa.pca_app.pipeline.analyze_stream`.
    rows
        From :func:`step_table`.
    flow_control
        How long flow control held the simulation, as its Bridge counted it (``held_s`` of
        the ``open_s`` the stream was open; ``deisa-run`` reads it from the scheduler once the
        stream is closed); ``None`` when unknown. Where known, it decides the diagnosis
        rather than the medians: fits run side by side, so a PCA slower than a compute
        step may still keep up.

    Returns
    -------
    dict
        ``warm_up`` and ``steady`` (lists of steps); ``first_analytics_s`` (the first step's
        PCA), ``steady_analytics_s`` and ``steady_compute_s`` (medians per step, ``None``
        without steady steps or timings); ``held`` (``{"warm_up": s, "steady": s}``: the
        simulation's seconds in publish, or beyond its transfers where the simulation
        reports them: flow control, the exchange between ranks, the copy) and ``wall``
        (the same phases' compute plus publish), both ``None`` without timings;
        ``flow_control`` as given.
    """
    done = sorted(analytics, key=lambda a: a.step)
    if not done:
        return {"warm_up": [], "steady": [], "first_analytics_s": None,
                "steady_analytics_s": None, "steady_compute_s": None, "held": None,
                "wall": None, "flow_control": flow_control}  # fmt: skip
    first_end = done[0].arrived_s + done[0].analytics_s
    warm_up = [a.step for a in done if a is done[0] or a.arrived_s < first_end]
    steady = [a.step for a in done if a.step not in warm_up]

    def median(values: list[float]) -> float | None:
        return float(np.median(values)) if values else None

    by_step = {r["step"]: r for r in rows}
    held, wall = _time_in_publish(rows, max(warm_up))
    return {
        "warm_up": warm_up,
        "steady": steady,
        "first_analytics_s": done[0].analytics_s,
        "steady_analytics_s": median([a.analytics_s for a in done if a.step in steady]),
        "steady_compute_s": median(
            [
                by_step[s]["compute_s"]
                for s in steady
                if s in by_step and by_step[s]["compute_s"] is not None
            ]
        ),
        "held": held,
        "wall": wall,
        "flow_control": flow_control,
    }


def _time_in_publish(
    rows: Sequence[dict[str, Any]], last_warm: int
) -> tuple[dict[str, float] | None, dict[str, float] | None]:
    """``held`` and ``wall`` of :func:`phases`: the simulation's seconds in publish, and in
    compute plus publish, in the warm-up (up to step ``last_warm``) and in the steady state;
    ``None, None`` without the simulation's timings."""
    timed = [r for r in rows if r["compute_s"] is not None and r["publish_s"] is not None]
    if not timed:
        return None, None

    def in_publish(row: dict[str, Any]) -> float:
        return float(row["wait_s"] if row["wait_s"] is not None else row["publish_s"])

    part = {"warm_up": [r for r in timed if r["step"] <= last_warm],
            "steady": [r for r in timed if r["step"] > last_warm]}  # fmt: skip
    held = {k: sum(map(in_publish, v)) for k, v in part.items()}
    wall = {k: sum(r["compute_s"] + r["publish_s"] for r in v) for k, v in part.items()}
    return held, wall


def format_phases(summary: dict[str, Any]) -> str:
    """What :func:`phases` found, in words: the warm-up, then the steady state."""

    def steps(s: list[int]) -> str:
        return f"step {s[0]}" if len(s) == 1 else f"steps {s[0]}-{s[-1]}"

    warm, steady = summary["warm_up"], summary["steady"]
    if not warm:
        return ""
    held, wall = summary["held"], summary["wall"]
    first, median = summary["first_analytics_s"], summary["steady_analytics_s"]
    ratio = f", {first / median:.1f}x a steady step's" if median else ""
    line = (
        f"warm-up ({steps(warm)}, the first PCA and the steps that queued behind it): "
        f"step {warm[0]}'s PCA took {first:.2f} s{ratio}"
    )
    if held is not None:
        line += f"; the simulation spent {held['warm_up']:.2f} s in publish"
    lines = [line]
    if steady:
        line = f"steady state ({steps(steady)}): PCA {median:.2f} s per step (median)"
        compute = summary["steady_compute_s"]
        if compute is not None:
            line += f" against {compute:.2f} s of compute per step"
        if held is not None and wall["steady"]:
            share = held["steady"] / wall["steady"]
            line += (
                f"; the simulation spent {held['steady']:.2f} s of {wall['steady']:.2f} s in "
                f"publish ({100 * share:.1f} %): "
            )
            line += _why_in_publish(share, summary.get("flow_control"), compute, median)
        lines.append(line)
    return "\n".join(lines)


def _why_in_publish(
    share: float,
    measured: dict[str, float] | None,
    compute: float | None,
    median: float | None,
) -> str:
    """Why the simulation spent ``share`` of its steady state in publish: the flow-control
    hold the Bridge measured decides where known, else the PCA's median against the
    compute's (see :func:`phases`)."""
    if share <= KEEPS_UP:
        return "the analytics keeps up, the simulation runs at its own pace"
    if measured is not None and measured["open_s"] > 0:
        held_share = measured["held_s"] / measured["open_s"]
        held = (
            f"flow control held the simulation {measured['held_s']:.2f} s of the "
            f"{measured['open_s']:.2f} s its stream was open ({100 * held_share:.1f} %)"
        )
        if held_share > KEEPS_UP:
            return held + (
                ": the analytics is slower than the simulation (more workers, or a "
                "longer --output-period, let it keep up)"
            )
        return held + (
            ", so the analytics keeps up: the rest is the publish itself, the "
            "ranks' exchange, copy and transfers waiting for CPU (more processes "
            "than cores, or other jobs on them)"
        )
    if compute is not None and median is not None and median > compute:
        return (
            "the analytics is slower than the simulation, so flow control holds the "
            "simulation until a step is taken (more workers, or a longer "
            "--output-period, let it keep up)"
        )
    return (
        "the PCA is faster than the compute, so this is not flow control alone: "
        "the ranks' exchange at each publish and their transfers waited for CPU "
        "(more processes than cores, or other jobs on them)"
    )


def plot_explained_variance(
    analytics: Sequence[StepAnalytics], path: str | Path, *, title: str = "gtemp"
) -> Path:
    """Write a PNG of the explained variance ratio of each component over the steps.

    Uses matplotlib's non-interactive Agg backend; returns ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    try:
        steps = [a.step for a in analytics]
        n = max((len(a.explained_variance_ratio) for a in analytics), default=0)
        for c in range(n):
            ratios = [
                a.explained_variance_ratio[c] if c < len(a.explained_variance_ratio) else np.nan
                for a in analytics
            ]
            ax.plot(steps, ratios, marker="o", label=f"component {c + 1}")
        ax.set_xlabel("step")
        ax.set_ylabel("explained variance ratio")
        ax.set_ylim(0.0, 1.0)
        ax.set_title(f"In situ PCA of {title!r}")
        if n:
            ax.legend()
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        with naming_path(path):
            fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What the run measured besides the fits, for the report; ``None``: unknown.

    Parameters
    ----------
    first_step_s
        Seconds from the simulation's launch to the first step taken by the analytics, when
        the caller started both (``deisa-run``); goes under the key of the same name.
    flow_control
        How long flow control held the simulation (see :func:`phases`); under ``phases``.
    transports
        How many ranks sent their blocks by each way (:func:`~deisa.pca_app.driver.ways`):
        one line of the report, and under its name.
    shm_pool
        The ranks' warm pools of shared memory (:func:`~deisa.pca_app.driver.pool`): on the
        same line, and under its name.
    """

    first_step_s: float | None = None
    flow_control: dict[str, float] | None = None
    transports: dict[str, int] | None = None
    shm_pool: dict[str, int] | None = None


def write_results(
    path: str | Path,
    analytics: Sequence[StepAnalytics],
    rows: Sequence[dict[str, Any]],
    settings: dict[str, Any],
    measured: Measured | None = None,
) -> Path:
    """Write the run's settings, per-step PCA results and per-step table as JSON, with what
    the run ``measured`` besides."""
    measured = measured if measured is not None else Measured()
    path = Path(path)
    text = json.dumps(
        {
            "settings": settings,
            "first_step_s": measured.first_step_s,
            "transports": measured.transports,
            "shm_pool": measured.shm_pool,
            "phases": phases(analytics, rows, measured.flow_control),
            "steps": [asdict(a) for a in analytics],
            "table": list(rows),
        },
        indent=1,
    )
    with naming_path(path):
        path.write_text(text)
    return path


def ways_in_words(ways: dict[str, int]) -> str:
    """How many ranks sent their blocks by each way, in words: ``"by shared memory (3 ranks),
    by tcp (1 rank)"``."""
    return ", ".join(f"by {way} ({n} rank{'s' if n != 1 else ''})" for way, n in ways.items())


def pool_in_words(totals: dict[str, int]) -> str:
    """The ranks' warm pools (``deisa.bridge.shm.pool.pool_totals``) in words, for the run's
    transport line: ``"warm pool 160 MiB of 160 MiB in 4 ranks (4 KiB pages)"``, and the
    blocks that went by TCP for want of a shared-memory slot, if any; empty without either."""
    fallbacks = totals.get("fallbacks", 0)
    fell = f"{fallbacks} block{'s' if fallbacks != 1 else ''} by TCP for want of a slot"
    if not totals.get("ranks"):
        return fell if fallbacks else ""
    pages = [k.removeprefix("ranks with ") for k in sorted(totals) if k.startswith("ranks with")]
    text = (
        f"warm pool {totals.get('peak KiB', 0) / 1024:.0f} MiB of "
        f"{totals.get('budget KiB', 0) / 1024:.0f} MiB in "
        f"{totals['ranks']} rank{'s' if totals['ranks'] != 1 else ''} "
        f"({', '.join(pages) or 'not populated'})"
    )
    shrunk = totals.get("ranks shrunk", 0)
    text += f", shrunk under memory pressure on {shrunk}" if shrunk else ""
    return text + (f"; {fell}" if fallbacks else "")


def report(
    analytics: Sequence[StepAnalytics],
    timings: Path | None,
    output: Path,
    settings: dict[str, Any],
    array: str,
    out: IO[str],
    measured: Measured | None = None,
) -> None:
    """Print the per-step table and write results.json and explained_variance.png, with what
    the run ``measured`` besides the fits (:class:`Measured`)."""
    measured = measured if measured is not None else Measured()
    rows = step_table(analytics, read_timings(timings) if timings is not None else [])
    results = write_results(output / "results.json", analytics, rows, settings, measured)
    plot = plot_explained_variance(analytics, output / "explained_variance.png", title=array)
    print(format_table(rows, measured.first_step_s), file=out)
    if measured.transports:
        pool = pool_in_words(measured.shm_pool or {})
        print(f"blocks sent {ways_in_words(measured.transports)}{'; ' if pool else ''}{pool}",
              file=out)  # fmt: skip
    summary = phases(analytics, rows, measured.flow_control)
    if summary["warm_up"]:
        print(format_phases(summary), file=out)
    stopped = stop_summary(analytics, (settings.get("simulation") or {}).get("steps"))
    if stopped:  # --stop-when-converged: when and why the analytics stopped the simulation
        print(stopped, file=out)
    print(f"PCA results: {results}\nExplained variance plot: {plot}", file=out)
