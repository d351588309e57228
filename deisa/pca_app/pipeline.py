"""The analytics of ``deisa-run``: a PCA of every published step.

:func:`analyze_stream` is the in situ client of the paper's experiments: it takes the steps of
one array from an :class:`~deisa.Adapter` as they are published, fits a
:class:`~deisa.IncrementalPCA` on each (rows are samples, columns features) and records
the explained variance; what it analyses and how long it waits is one keyword-only
:class:`PCASettings`. With ``stop_when_converged`` it stops the simulation once the PCA has
converged, through the steering value ``"stop"`` (:meth:`deisa.Adapter.set`), and keeps reading
until the end of the stream. The run's report (table, plot, ``results.json``) is
:mod:`deisa.pca_app.report`'s; :func:`stop_summary` says why and when the run stopped.

Examples
--------
>>> with Client(scheduler_file="scheduler.json") as client:  # doctest: +SKIP
...     steps = analyze_stream(client, PCASettings(array="gtemp", n_components=4))
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from distributed import Client

from .._dask_internals import workers_of
from ..analysis import StepArray
from ..analysis.adapter import Adapter, EndOfStreamError, StepNotAvailableError
from ..analysis.pca import IncrementalPCA, PendingFit
from ..analysis.replay import Replay
from .failures import PipelineError

if TYPE_CHECKING:
    from .stall import StepWatch

#: what :class:`deisa.Replay` reads: a file, a Zarr store, a per-step pattern or a list of files
ReplaySource = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepAnalytics:
    """What the analytics did with one step.

    Attributes
    ----------
    step
        Published step number.
    wait_s
        Seconds the analytics waited for this step to arrive (0 when it was already queued).
    analytics_s
        Seconds from the step's arrival to the end of its PCA fit (tasks on the workers and
        the client's final merge included; steps in flight overlap).
    nbytes
        Bytes of the step's global array.
    explained_variance, explained_variance_ratio
        The fitted PCA's attributes of the same name, one value per component.
    svd_solver
        The PCA regime used (``svd_solver_``: ``"full"`` or ``"randomized"``).
    relative_change
        ``|r_t - r_prev| / |r_prev|`` (Euclidean norms) of the explained variance ratios
        ``r`` of this step and the step analysed before it (``None`` for the first), the
        convergence criterion of ``stop_when_converged``.
    stop_reason
        Set on the step after whose analysis the analytics asked the simulation to stop: why.
    arrived_s
        Seconds from the start of :func:`analyze_stream` to the step's arrival; with
        ``analytics_s``, when its fit ended (the report tells the warm-up's steps by it).
    """

    step: int
    wait_s: float
    analytics_s: float
    nbytes: int
    explained_variance: list[float]
    explained_variance_ratio: list[float]
    svd_solver: str = "full"
    relative_change: float | None = None
    stop_reason: str | None = None
    arrived_s: float = 0.0


@dataclass
class _InFlight:
    """A step whose PCA runs on the workers."""

    step: int
    arrived: float
    wait_s: float
    nbytes: int
    pending: PendingFit
    progress: tuple[str, int, int] = ("", -1, 0)
    progress_at: float = 0.0

    def moved(self, now: float) -> bool:
        """Whether the fit progressed since the last call (and note when it did)."""
        progress = self.pending.progress()
        if progress != self.progress:
            self.progress, self.progress_at = progress, now
            return True
        return False

    def describe(self, array: str, now: float) -> str:
        phase, done, total = self.progress
        return (
            f"analytics: the PCA of step {self.step} of {array!r} made no progress for "
            f"{now - self.progress_at:.0f} s (phase: {phase}, {done} of {total} task(s) done; "
            f"{now - self.arrived:.0f} s since the step arrived)"
        )


@dataclass(frozen=True, kw_only=True)
class PCASettings:
    """What :func:`analyze_stream` analyses, and how long it waits: keyword-only, checked once.

    Parameters
    ----------
    array
        Name of the published array (2D: rows are samples, columns features).
    n_components
        Components kept, capped at the array's smaller dimension.
    poll_s
        Seconds of each wait on the scheduler or on the fits; the hooks' ``check`` runs
        between two.
    stall_timeout
        Seconds a running fit may go without progress (no task of it finishing, no step
        arriving) before giving up with :class:`PipelineError` naming the step, the phase and
        how long. ``None``: forever. Not the wait for a step, which the ``watch`` ends.
    max_in_flight
        Steps analysed at once. Each holds its blocks in worker memory until its fit ends, on
        top of the ``buffer_nb`` steps the stream may queue.
    stop_when_converged
        ``EPS > 0``: once the relative change of the explained variance ratio between two
        consecutive steps falls below ``EPS`` (:attr:`StepAnalytics.relative_change`), set the
        steering value ``stop_value`` to ``True``, so that the simulation (reading it with
        :meth:`deisa.Bridge.get`, or a ``read: [stop]`` section of its PDI YAML) ends its loop
        and closes the stream normally; the steps it publishes meanwhile are analysed too.
        ``stop_value`` is cleared when the analysis starts. ``None``: never stop the simulation.
        The ratio rather than the variance itself: a diffusing field loses variance at a
        steady rate, so the variance's relative change tends to a constant, while the ratio
        converges as the components settle.
    stop_value
        Name of the steering value that ``stop_when_converged`` sets.
    replay
        Saved output to read instead of the live stream (a :class:`deisa.Replay` source: an
        HDF5 file, a Zarr store, a per-step pattern): the same fits on the client's cluster,
        one per saved step. Not with ``stop_when_converged`` (nothing to steer).

    Raises
    ------
    ValueError
        A value out of its range, naming it.
    """

    array: str = "gtemp"
    n_components: int = 4
    poll_s: float = 1.0
    stall_timeout: float | None = 120.0
    max_in_flight: int = 2
    stop_when_converged: float | None = None
    stop_value: str = "stop"
    replay: ReplaySource | None = None

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight={self.max_in_flight} must be ≥ 1")
        if self.stop_when_converged is not None and not self.stop_when_converged > 0:
            raise ValueError(f"stop_when_converged={self.stop_when_converged} must be > 0")
        if self.replay is not None and self.stop_when_converged is not None:
            raise ValueError("stop_when_converged steers a running simulation: not with replay")


@dataclass(frozen=True, kw_only=True)
class Hooks:
    """What :func:`analyze_stream` calls back.

    Parameters
    ----------
    check
        Called while waiting; raises (e.g. :class:`PipelineError`) to abort, typically when
        the simulation process has died.
    on_start
        Called with the step number when a step's fit is submitted.
    on_step
        Called after each step's fit, in step order, e.g. to advance a progress bar.
    """

    check: Callable[[], None] | None = None
    on_start: Callable[[int], None] | None = None
    on_step: Callable[[StepAnalytics], None] | None = None

    def checked(self) -> None:
        if self.check is not None:
            self.check()


def analyze_stream(
    client: Client,
    settings: PCASettings | None = None,
    *,
    watch: StepWatch | None = None,
    hooks: Hooks | None = None,
) -> list[StepAnalytics]:
    """Fit a PCA on every step of ``settings.array`` until the simulation closes the stream.

    Steps are pipelined: the fit of a step is submitted to the workers
    (:meth:`~deisa.IncrementalPCA.submit_fit`) and the next step is taken while it runs,
    up to ``settings.max_in_flight`` fits at once; results are reported in step order.

    Parameters
    ----------
    client
        Connected client of the cluster the simulation publishes to.
    settings
        What to analyse and how long to wait (default: :class:`PCASettings`'s defaults).
    watch
        Ends the wait for a step when the simulation is gone, or after its ``step_timeout``
        (:class:`~deisa.pca_app.stall.StepWatch`): the reason, after ``"analytics: "``, is
        the :class:`PipelineError`'s message. ``None``: wait as long as it takes.
    hooks
        The callbacks (:class:`Hooks`).

    Returns
    -------
    list of StepAnalytics
        One entry per step, in order.

    Raises
    ------
    PipelineError
        A fit stalled, ``watch`` ended the wait for a step, or the PCA of a step failed.
    """
    settings = settings if settings is not None else PCASettings()
    replay = settings.replay
    # closed at the end: a consumer left attached would hold back the array's next run
    source = Adapter(client, timeout=settings.poll_s) if replay is None else Replay(replay, client)
    with source as adapter:
        pipeline = _Pipeline(
            adapter=adapter,
            client=client,
            settings=settings,
            watch=watch,
            hooks=hooks if hooks is not None else Hooks(),
        )
        return pipeline.run()


@dataclass(kw_only=True)
class _Pipeline:
    """One run of :func:`analyze_stream`: its settings, the fits in flight and the results.

    :meth:`run` alternates between taking the next step (:meth:`_take`, which submits its fit)
    and, once ``max_in_flight`` fits run or the stream has ended, waiting on the oldest fit
    (:meth:`_wait_for_fits`); each turn first collects the fits done, in step order
    (:meth:`_collect`), and asks the simulation to stop once the PCA converged (:meth:`_stop`).
    """

    adapter: Adapter | Replay
    client: Client
    settings: PCASettings
    watch: StepWatch | None
    hooks: Hooks
    results: list[StepAnalytics] = field(default_factory=list)
    in_flight: deque[_InFlight] = field(default_factory=deque)
    step: int = 0  # the next step to take
    ended: bool = False
    stop_sent: bool = False
    # perf_counter() times: the start, since when the next step is awaited, the last progress
    began: float = 0.0
    waiting_since: float = 0.0
    last_progress: float = 0.0

    @property
    def array(self) -> str:
        return self.settings.array

    def run(self) -> list[StepAnalytics]:
        stream = self.adapter[self.array]
        if self.settings.stop_when_converged is not None:  # a value left by an earlier run
            _steered(self.adapter).set(self.settings.stop_value, None)  # would stop this one
        self.began = self.waiting_since = self.last_progress = time.perf_counter()
        while not self.ended or self.in_flight:
            now = time.perf_counter()
            if any([f.moved(now) for f in self.in_flight]):
                self.last_progress = now
            self._collect()
            if self.ended or len(self.in_flight) >= self.settings.max_in_flight:
                self._wait_for_fits()
            else:
                self._take(stream)
        logger.info("deisa pipeline: end of %r after %d steps", self.array, len(self.results))
        return self.results

    def _collect(self) -> None:
        """Record the fits done at the head of the queue, in step order."""
        while self.in_flight and self.in_flight[0].pending.done():
            done = _finish(self.in_flight.popleft(), self.array, self.began)
            if self.results:
                done = replace(done, relative_change=_relative_change(self.results[-1], done))
            self.results.append(self._stop_if_converged(done))
            self.last_progress = time.perf_counter()
            if self.hooks.on_step is not None:
                self.hooks.on_step(self.results[-1])

    def _stop_if_converged(self, done: StepAnalytics) -> StepAnalytics:
        """``done``, with its ``stop_reason`` if it is the step the PCA converged at: the
        simulation is then asked to stop, once."""
        change, eps = done.relative_change, self.settings.stop_when_converged
        if eps is None or self.stop_sent or change is None or change >= eps:
            return done
        reason = (
            f"the PCA converged: relative change of the explained variance ratio "
            f"{change:.3g} < {eps:g} since step {self.results[-1].step}"
        )
        _steered(self.adapter).set(self.settings.stop_value, True)
        self.stop_sent = True
        logger.info("deisa pipeline: stop asked after step %d: %s", done.step, reason)
        return replace(done, stop_reason=reason)

    def _wait_for_fits(self) -> None:
        """Wait up to ``poll_s`` on the oldest fit (none: the stream ended and all are in)."""
        if self.in_flight:
            self.in_flight[0].pending.wait(self.settings.poll_s)
        self.hooks.checked()
        self._stalled(time.perf_counter())

    def _take(self, stream: StepArray) -> None:
        """Wait up to ``poll_s`` for the next step; submit its fit when it comes."""
        try:
            step_field = stream[self.step]
        except TimeoutError:
            self.hooks.checked()
            gone = self.watch.check(self.step) if self.watch is not None else None
            if gone is not None:
                raise PipelineError(f"analytics: {gone}") from None
            self._stalled(time.perf_counter())
            return
        except EndOfStreamError:
            self.ended = True
            return
        except StepNotAvailableError:  # not published (filtered out by the simulation)
            self.step += 1
            return
        self._submit(step_field)
        self.step += 1
        self.waiting_since = time.perf_counter()

    def _submit(self, step_field: Any) -> None:
        """Submit the PCA of the step just taken; its blocks live as long as its tasks."""
        arrived = self.last_progress = time.perf_counter()
        if self.watch is not None:
            self.watch.arrived()
        k = min(self.settings.n_components, *step_field.shape)
        try:
            pending = IncrementalPCA(n_components=k, client=self.client).submit_fit(step_field)
        except Exception as exc:
            raise _failed(self.step, self.array, exc) from exc
        wait_s = arrived - self.waiting_since
        self.in_flight.append(
            _InFlight(self.step, arrived, wait_s, int(step_field.nbytes), pending)
        )
        self.in_flight[-1].moved(arrived)
        if self.hooks.on_start is not None:
            self.hooks.on_start(self.step)

    def _stalled(self, now: float) -> None:
        """Give up if the oldest fit made no progress for ``stall_timeout`` seconds."""
        stalled_s, timeout = now - self.last_progress, self.settings.stall_timeout
        if self.in_flight and timeout is not None and stalled_s > timeout:
            pressure = "".join(f"; {line}" for line in self._memory_pressure())
            raise PipelineError(self.in_flight[0].describe(self.array, now) + pressure)

    def _memory_pressure(self) -> list[str]:
        """The scheduler's lines on workers paused or spilling for memory (a live stream)."""
        try:
            return list(self.adapter.stats().get("memory") or [])  # type: ignore[union-attr]
        except Exception:  # a replay, or the scheduler gone too: the stall is what is known
            return []


def start_warm_up_fit(client: Client, n_components: int = 4, block: int = 16) -> PendingFit | None:
    """Start a PCA of a small random array through the analytics' own path; return at once.

    What the first step's fit would otherwise pay besides its arithmetic is paid here, before
    the simulation's first step exists: the client's first graph and split, the workers' first
    tasks, their first transfers to each other, the first merges. ``deisa-run`` (and its Slurm
    job's client) calls it as the simulation starts (its ranks take longer to start than this
    fit takes); the workers' preload (:mod:`deisa.analysis.warm`) has imported the kernels by
    then. The array is
    ``2 x 2`` blocks of ``block x block``, scattered (no task computes them: a busy worker
    does not hold this call back) so that each row band spans two workers, when there are
    two, and is gathered as the splitter gathers a real step's.

    Parameters
    ----------
    client
        Connected client of the cluster.
    n_components
        As the run's: the same regime of the PCA.
    block
        Rows and columns of each block.

    Returns
    -------
    PendingFit or None
        Keep it until the fit ends: dropping it releases the fit's tasks. ``None`` (and a
        warning) if the fit could not be submitted: the first step then pays the start-up.
    """
    import dask.array as da
    import numpy as np

    name = f"deisa-warm-up-{uuid.uuid4().hex}"
    rng = np.random.default_rng(0)
    try:
        workers = sorted(workers_of(client))
        futures = {}
        for n, (i, j) in enumerate(np.ndindex(2, 2)):  # (0, 0) and (0, 1) on different workers
            data = {(name, i, j): rng.standard_normal((block, block))}
            futures.update(client.scatter(data, workers=[workers[n % len(workers)]]))
        x = da.Array(futures, name, chunks=((block,) * 2,) * 2, dtype=np.float64)
        k = min(n_components, block)
        return IncrementalPCA(n_components=k, client=client).submit_fit(x)
    except Exception:
        logger.warning("the analytics' warm-up did not start", exc_info=True)
        return None


def _steered(source: Adapter | Replay) -> Adapter:
    if not isinstance(source, Adapter):  # analyze_stream refuses stop_when_converged then
        raise TypeError("a replay of saved steps cannot be steered")
    return source


def stop_summary(analytics: Sequence[StepAnalytics], steps: int | None = None) -> str | None:
    """One sentence saying at which step and why the analytics stopped the simulation.

    Parameters
    ----------
    analytics
        From :func:`analyze_stream`.
    steps
        Steps the simulation was configured for, if known.

    Returns
    -------
    str or None
        ``None`` if the analytics did not ask the simulation to stop.
    """
    asked = next((a for a in analytics if a.stop_reason is not None), None)
    if asked is None:
        return None
    last = analytics[-1].step
    planned = f" of {steps} planned" if steps is not None else ""
    return (
        f"stopped early: after step {asked.step} the analytics asked the simulation to stop "
        f"({asked.stop_reason}); it published {len(analytics)} step(s){planned}, the last "
        f"being step {last}"
    )


def _relative_change(before: StepAnalytics, after: StepAnalytics) -> float:
    a, b = before.explained_variance_ratio, after.explained_variance_ratio
    norm = math.sqrt(sum(x * x for x in a))
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=False)))
    return diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)


def _failed(step: int, array: str, exc: BaseException) -> PipelineError:
    return PipelineError(
        f"analytics: PCA of step {step} of {array!r} failed: {type(exc).__name__}: {exc}"
    )


def _finish(fit: _InFlight, array: str, began: float) -> StepAnalytics:
    try:
        pca = fit.pending.result()
    except Exception as exc:
        raise _failed(fit.step, array, exc) from exc
    result = StepAnalytics(
        step=fit.step,
        wait_s=fit.wait_s,
        analytics_s=(fit.pending.tasks_done_at or time.perf_counter())
        + fit.pending.client_merge_s
        - fit.arrived,
        nbytes=fit.nbytes,
        explained_variance=[float(v) for v in pca.explained_variance_],
        explained_variance_ratio=[float(v) for v in pca.explained_variance_ratio_],
        svd_solver=pca.svd_solver_,
        arrived_s=fit.arrived - began,
    )
    logger.debug("deisa pipeline: step %d analysed in %.3f s", fit.step, result.analytics_s)
    return result
