"""The analytics of ``deisa-run``: a PCA of every published step, and the run's report.

:func:`analyze_stream` is the in situ client of the paper's experiments: it takes the steps of
one array from an :class:`~deisa.adapter.Adapter` as they are published, fits a
:class:`~deisa.pca.IncrementalPCA` on each (rows are samples, columns features) and records
the explained variance. :func:`step_table`, :func:`format_table`, :func:`plot_explained_variance`
and :func:`write_results` turn what it measured, plus the simulation's own per-step timings,
into the table, the PNG and the JSON that ``deisa-run`` leaves in its output directory.

Examples
--------
>>> with Client(scheduler_file="scheduler.json") as client:  # doctest: +SKIP
...     steps = analyze_stream(client, "gtemp", n_components=4)
>>> print(format_table(step_table(steps, read_timings("timings.json"))))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from distributed import Client

from .adapter import Adapter, EndOfStreamError, StepNotAvailableError

logger = logging.getLogger(__name__)


class PipelineError(RuntimeError):
    """The simulation or the analytics of a pipeline failed; the message says which and why."""


@dataclass(frozen=True)
class StepAnalytics:
    """What the analytics did with one step.

    Attributes
    ----------
    step
        Published step number.
    wait_s
        Seconds between the end of the previous step's analytics and this step's arrival.
    analytics_s
        Seconds of the PCA fit of this step (tasks on the workers included).
    nbytes
        Bytes of the step's global array.
    explained_variance, explained_variance_ratio
        The fitted PCA's attributes of the same name, one value per component.
    """

    step: int
    wait_s: float
    analytics_s: float
    nbytes: int
    explained_variance: list[float]
    explained_variance_ratio: list[float]


def analyze_stream(
    client: Client,
    array: str = "gtemp",
    *,
    n_components: int = 4,
    poll_s: float = 1.0,
    stall_timeout: float | None = 120.0,
    check: Callable[[], None] | None = None,
    on_step: Callable[[StepAnalytics], None] | None = None,
) -> list[StepAnalytics]:
    """Fit a PCA on every step of ``array`` until the simulation closes the stream.

    Parameters
    ----------
    client
        Connected client of the cluster the simulation publishes to.
    array
        Name of the published array (2D: rows are samples, columns features).
    n_components
        Components kept, capped at the array's smaller dimension.
    poll_s
        Seconds of each wait on the scheduler; ``check`` runs between two waits.
    stall_timeout
        Seconds without a new step before giving up with :class:`PipelineError`.
        ``None``: wait forever.
    check
        Called while waiting; raises (e.g. :class:`PipelineError`) to abort, typically when
        the simulation process has died.
    on_step
        Called after each step's fit, e.g. to advance a progress bar.

    Returns
    -------
    list of StepAnalytics
        One entry per step, in order.

    Raises
    ------
    PipelineError
        The stream stalled, or the PCA of a step failed.
    """
    from .pca import IncrementalPCA

    stream = Adapter(client, timeout=poll_s)[array]
    results: list[StepAnalytics] = []
    step = 0
    waiting_since = last_progress = time.perf_counter()
    while True:
        try:
            field = stream[step]
        except TimeoutError:
            if check is not None:
                check()
            stalled = time.perf_counter() - last_progress
            if stall_timeout is not None and stalled > stall_timeout:
                raise PipelineError(
                    f"analytics: no step of {array!r} for {stalled:.0f} s (waiting for step "
                    f"{step}); the simulation seems stuck"
                ) from None
            continue
        except EndOfStreamError:
            break
        except StepNotAvailableError:  # not published (filtered out by the simulation)
            step += 1
            continue
        arrived = time.perf_counter()
        k = min(n_components, *field.shape)
        nbytes = field.nbytes
        try:
            pca = IncrementalPCA(n_components=k, client=client).fit(field)
        except Exception as exc:
            raise PipelineError(
                f"analytics: PCA of step {step} of {array!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        del field  # releases the step's blocks on the workers
        done = time.perf_counter()
        result = StepAnalytics(
            step=step,
            wait_s=arrived - waiting_since,
            analytics_s=done - arrived,
            nbytes=int(nbytes),
            explained_variance=[float(v) for v in pca.explained_variance_],
            explained_variance_ratio=[float(v) for v in pca.explained_variance_ratio_],
        )
        logger.debug("deisa pipeline: step %d analysed in %.3f s", step, result.analytics_s)
        results.append(result)
        if on_step is not None:
            on_step(result)
        step += 1
        waiting_since = last_progress = done
    logger.info("deisa pipeline: end of %r after %d steps", array, len(results))
    return results


def read_timings(path: str | Path) -> list[list[dict[str, Any]]]:
    """Per-rank, per-step timings written by ``deisa_simulation.heat --timings``.

    Returns an empty list when the file is absent (e.g. the C solver writes none).
    """
    path = Path(path)
    if not path.exists():
        return []
    ranks: list[list[dict[str, Any]]] = json.loads(path.read_text())["ranks"]
    return ranks


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
        ``send_s`` (the block transfer alone) of the slowest rank; ``analytics_s``; ``nbytes``
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
            "send_s": max((e["send_s"] for e in entries), default=None),
            "analytics_s": done[step].analytics_s if step in done else None,
            "nbytes": (
                sum(e["nbytes"] for e in entries)
                if entries
                else done[step].nbytes
                if step in done
                else None
            ),
        }
        send = row["send_s"]
        row["bandwidth_Bps"] = row["nbytes"] / send if entries and send else None
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A plain-text table of :func:`step_table` rows, with a total line."""
    header = (
        f"{'step':>5} {'compute s':>10} {'publish s':>10} {'send s':>8} {'analytics s':>12} "
        f"{'MiB':>9} {'MiB/s':>9}"
    )

    def cell(value: float | None, width: int, fmt: str) -> str:
        return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"

    def line(label: str, row: dict[str, Any]) -> str:
        mib = None if row["nbytes"] is None else row["nbytes"] / 2**20
        bw = None if row["bandwidth_Bps"] is None else row["bandwidth_Bps"] / 2**20
        return (
            f"{label:>5} {cell(row['compute_s'], 10, '.4f')} {cell(row['publish_s'], 10, '.4f')} "
            f"{cell(row['send_s'], 8, '.4f')} {cell(row['analytics_s'], 12, '.4f')} "
            f"{cell(mib, 9, '.2f')} {cell(bw, 9, '.1f')}"
        )

    lines = [header, "-" * len(header)]
    lines += [line(str(row["step"]), row) for row in rows]

    def total(key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return sum(values) if values else None

    totals: dict[str, Any] = {
        k: total(k) for k in ("compute_s", "publish_s", "send_s", "analytics_s", "nbytes")
    }
    totals["bandwidth_Bps"] = (
        totals["nbytes"] / totals["send_s"]
        if totals["nbytes"] is not None and totals["send_s"]
        else None
    )
    lines += ["-" * len(header), line("total", totals)]
    lines.append(
        "compute, publish (flow-control waits included), send: slowest rank; "
        "MiB: all ranks; MiB/s: MiB / send s"
    )
    return "\n".join(lines)


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
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def write_results(
    path: str | Path,
    analytics: Sequence[StepAnalytics],
    rows: Sequence[dict[str, Any]],
    settings: dict[str, Any],
) -> Path:
    """Write the run's settings, per-step PCA results and per-step table as JSON."""
    path = Path(path)
    path.write_text(
        json.dumps(
            {"settings": settings, "steps": [asdict(a) for a in analytics], "table": list(rows)},
            indent=1,
        )
    )
    return path
