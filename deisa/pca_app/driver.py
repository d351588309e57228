"""The built-in analytics' driver: a PCA of every step of one array, then the report.

:func:`drive` is the one driver of the built-in PCA, for ``deisa-run`` (in its own process,
beside the simulation it started: :mod:`deisa.launcher.local`) and for ``deisa-run analytics``
(the Slurm job's client, or a replay: :mod:`deisa.launcher.cli`). It warms the PCA up while
the ranks start, fits every step as it arrives (:func:`~deisa.pca_app.pipeline.analyze_stream`,
as many at once as the stream may queue), optionally with a progress bar, waits for what
follows the stream's end, asks the scheduler how long flow control held the simulation, and
writes the table, ``results.json`` and the plot (:func:`~deisa.pca_app.report.report`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..wire import Route
from .pipeline import Hooks, PCASettings, StepAnalytics, analyze_stream, start_warm_up_fit
from .report import Measured, report
from .stall import StepWatch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Analysis:
    """What the built-in PCA analyses, and how long it waits.

    Attributes
    ----------
    array
        The array's name.
    n_components
        Components kept per step.
    output
        Where ``results.json`` and the plot go.
    timeout
        ``--timeout``: what a fit may take without finishing a task.
    buffer_nb
        Steps the stream may queue (``None``: unbounded): as many fits at once (2 when
        unbounded), so that flow control holds the simulation only when the analytics really
        is slower.
    stop_when_converged
        ``--stop-when-converged``, or ``None``.
    replay
        Files to replay instead of the live stream (``deisa-run analytics --replay``).
    settings
        The settings recorded in ``results.json``.
    steps
        The steps expected (a warning when fewer came without a stop), if known.
    """

    array: str
    n_components: int
    output: Path
    timeout: float
    buffer_nb: int | None = None
    stop_when_converged: float | None = None
    replay: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None

    def pca_settings(self) -> PCASettings:
        """What :func:`~deisa.pca_app.pipeline.analyze_stream` is given: as many fits at once
        as the stream may queue steps (2 when it is unbounded)."""
        return PCASettings(
            array=self.array,
            n_components=self.n_components,
            stall_timeout=self.timeout,
            max_in_flight=self.buffer_nb or 2,
            stop_when_converged=self.stop_when_converged,
            replay=self.replay,
        )


def drive(
    client: Any,
    analysis: Analysis,
    watch: StepWatch,
    *,
    check: Callable[[], None],
    on_step: Callable[[], None],
    after_stream: Callable[[], Path | None],
    out: IO[str] = sys.stdout,
    progress: bool = False,
) -> list[StepAnalytics]:
    """The PCA of every step of ``analysis.array``, then the report on ``out``.

    Parameters
    ----------
    client
        A client of the run's scheduler.
    analysis
        What to analyse and how.
    watch
        Tells a slow simulation from a gone one (:class:`~deisa.pca_app.stall.StepWatch`).
    check
        Runs while waiting (raises on a signal, or when a part of the run failed).
    on_step
        Runs after each step's fit (e.g. the signals' check).
    after_stream
        Runs once the stream has ended (waits for the simulation, or its timings file); it
        returns the simulation's timings for the table, if any.
    out
        Where the table goes.
    progress
        Show a progress bar on stderr, and the time to the first step in the table.

    Returns
    -------
    list of StepAnalytics
        One per step analysed.
    """
    # the first fit's start-up, paid on a small array while the ranks start (live only)
    warm = start_warm_up_fit(client, analysis.n_components) if analysis.replay is None else None
    analytics, first_step_s = _fit_every_step(client, analysis, watch, check, on_step, progress)
    timings = after_stream()
    # once the stream has ended, the scheduler knows how long flow control held the ranks,
    # and how they sent their blocks
    totals = array_totals(client, analysis.array) if analysis.replay is None else {}
    steps = analysis.steps
    if steps is not None and len(analytics) != steps and not any(a.stop_reason for a in analytics):
        logger.warning("analysed %d steps of %d", len(analytics), steps)
    measured = Measured(
        first_step_s=first_step_s if progress else None,
        flow_control=hold(totals),
        transports=ways(totals),
        shm_pool=pool(totals),
    )
    report(analytics, timings, analysis.output, analysis.settings, analysis.array, out, measured)
    del warm  # held until here: dropping the warm-up fit earlier would release its tasks
    return analytics


def _fit_every_step(
    client: Any,
    analysis: Analysis,
    watch: StepWatch,
    check: Callable[[], None],
    on_step: Callable[[], None],
    progress: bool,
) -> tuple[list[StepAnalytics], float | None]:
    """:func:`~deisa.pca_app.pipeline.analyze_stream` with the progress bar when ``progress``;
    the steps analysed, and the seconds from this call to the first step's fit (``None``
    without a step)."""
    launched = time.perf_counter()
    first_step_s: list[float] = []
    with _progress(analysis.steps if progress else None, progress) as (on_start, done):

        def started(step: int) -> None:
            if not first_step_s:
                first_step_s.append(time.perf_counter() - launched)
            on_start(step)

        def stepped(step: StepAnalytics) -> None:
            done(step)
            on_step()

        analytics = analyze_stream(
            client,
            analysis.pca_settings(),
            watch=watch,
            hooks=Hooks(check=check, on_start=started if progress else None, on_step=stepped),
        )
    return analytics, first_step_s[0] if first_step_s else None


@contextmanager
def _progress(
    total: int | None, shown: bool
) -> Iterator[tuple[Callable[[int], None], Callable[[StepAnalytics], None]]]:
    """``(on_start, on_done)`` of a progress bar of ``total`` steps on stderr, naming the steps
    being analysed; callbacks that do nothing when not ``shown``."""
    if not shown:
        yield (lambda step: None), (lambda done: None)
        return
    from tqdm import tqdm

    with tqdm(total=total, desc="in situ PCA", unit="step", file=sys.stderr) as bar:
        analysing: list[int] = []

        def on_start(step: int) -> None:
            analysing.append(step)
            bar.set_postfix_str(f"analysing step {', '.join(map(str, analysing))}")

        def on_done(done: StepAnalytics) -> None:
            analysing.remove(done.step)
            bar.set_postfix_str(
                f"analysing step {', '.join(map(str, analysing))}" if analysing else ""
            )
            bar.update()

        yield on_start, on_done


def stream_stats(client: Any) -> dict[str, Any]:
    """The scheduler extension's ``deisa_stats`` (:data:`deisa.wire.Route.STATS`)."""
    stats: dict[str, Any] = client.sync(getattr(client.scheduler, Route.STATS))
    return stats


def hold(totals: dict[str, Any]) -> dict[str, float] | None:
    """How long flow control held the simulation on one array (``held_s`` of ``open_s``), as
    its Bridge (rank 0) counted it, from the array's ``deisa_stats`` totals once the stream is
    closed; ``None`` before."""
    if not totals.get("open_ms"):
        return None
    return {"held_s": totals.get("held_ms", 0) / 1000, "open_s": totals["open_ms"] / 1000}


def ways(totals: dict[str, Any]) -> dict[str, int] | None:
    """How many ranks sent the array's blocks by each way (``"shared memory"``, ``"tcp"``,
    both), as the Bridge reported it at the end of the stream; ``None`` before."""
    found = {
        key.removeprefix("ranks by "): int(n)
        for key, n in sorted(totals.items())
        if key.startswith("ranks by ") and n
    }
    return found or None


def pool(totals: dict[str, Any]) -> dict[str, int] | None:
    """The ranks' warm pools of shared memory (``peak KiB``, ``budget KiB``, ``ranks``...), as
    the Bridge reported them at the end of the stream; ``None`` before, or without a pool."""
    found = {
        k.removeprefix("pool "): int(n) for k, n in sorted(totals.items()) if k.startswith("pool ")
    }
    return found or None


def array_totals(client: Any, array: str) -> dict[str, Any]:
    """``array``'s totals in the scheduler's ``deisa_stats`` (for :func:`hold` and
    :func:`ways`), asked once; empty when the scheduler does not answer them."""
    try:
        totals: dict[str, Any] = stream_stats(client)["totals"].get(array) or {}
    except Exception:  # the report goes on without them
        logger.debug("no deisa_stats", exc_info=True)
        return {}
    return totals
