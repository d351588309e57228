"""A fit of :class:`~deisa.analysis.pca.IncrementalPCA` submitted to the cluster: its handle.

:class:`PendingFit` (importable from :mod:`deisa.analysis.pca`, as before) follows the tasks of
one fit (local reductions, merges, refinement) and merges the top-level states on the client.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from distributed import Client, Future, wait

from ._pca_kernels import PartialPCA, merge, state_variance_along

__all__ = ["PendingFit"]


class Estimator(Protocol):
    """What a :class:`PendingFit` needs of its estimator: its client, and how it takes a state."""

    def _client(self) -> Client: ...

    def _finish(
        self, state: PartialPCA, n_components: int, variance: np.ndarray | None = None
    ) -> Any: ...


E = TypeVar("E", bound=Estimator)


class PendingFit(Generic[E]):
    """A fit that :meth:`~deisa.analysis.pca.IncrementalPCA.submit_fit` started, not finished.

    The local reductions and the merges run on the workers; :meth:`result` gathers the few
    top-level states and merges them on the client (bounded rank: the root state, merged on a
    worker, and the refinement's sums) and returns the fitted estimator.
    :meth:`progress` says which phase the fit is in, for progress displays and stall reports.
    """

    def __init__(
        self,
        estimator: E,
        n_components: int,
        rank: int | None,
        partitions: list[Future],
        merges: list[Future],
        level: list[Future],
        refinements: Sequence[Future] = (),
        previous: PartialPCA | None = None,
    ) -> None:
        self.estimator = estimator
        self.submitted = time.perf_counter()
        #: When the last task on the workers finished (``time.perf_counter()``), else ``None``.
        self.tasks_done_at: float | None = None
        #: Seconds of the client's final merge, once :meth:`result` ran.
        self.client_merge_s = 0.0
        self._n_components = n_components
        self._rank = rank
        self._partitions = partitions
        self._merges = merges
        self._level = level
        self._refinements = list(refinements)
        self._previous = previous
        self._last = self._refinements or self._level
        self._remaining = len(self._last)
        self._lock = threading.Lock()
        for future in self._last:
            future.add_done_callback(self._task_done)

    def _task_done(self, future: Future) -> None:
        with self._lock:
            self._remaining -= 1
            if self._remaining == 0:
                self.tasks_done_at = time.perf_counter()

    def done(self) -> bool:
        """Whether every task of the fit has finished (:meth:`result` then returns at once)."""
        return all(f.done() for f in self._last)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the tasks; whether they all finished."""
        try:
            wait(self._last, timeout=timeout)
        except (TimeoutError, asyncio.TimeoutError):  # the same class from Python 3.11
            return False
        return True

    def progress(self) -> tuple[str, int, int]:
        """``(phase, done, total)``: the phase in progress and how many of its tasks finished.

        Phases: ``"local reductions"`` (one task per partition), ``"merges"`` (merge tasks on
        the workers), ``"refinement"`` (bounded rank: the variance along the final components,
        one task per partition), ``"client merge"`` (everything finished on the workers).
        """
        for phase, futures in (
            ("local reductions", self._partitions),
            ("merges", self._merges),
            ("refinement", self._refinements),
        ):
            finished = sum(f.done() for f in futures)
            if finished < len(futures):
                return phase, finished, len(futures)
        return "client merge", 0, 1

    def result(self, timeout: float | None = None) -> E:
        """Wait for the fit, merge the top-level states here and return the fitted estimator.

        Raises whatever a task raised, or ``TimeoutError`` after ``timeout`` seconds.
        """
        if timeout is not None and not self.wait(timeout):
            raise TimeoutError(f"the fit did not finish within {timeout} s")
        client = self.estimator._client()
        gathered = client.gather([*self._level, *self._refinements])  # one round trip
        states, sums = gathered[: len(self._level)], gathered[len(self._level) :]
        start = time.perf_counter()
        variance = None
        if self._refinements:  # the root merge ran on a worker, earlier state included
            (state,) = states
            k = self._n_components
            previous = state_variance_along(self._previous, state.mean, state.components[:k])
            variance = sum(sums) + previous
        else:
            state = merge([self._previous, *states], self._rank)
        assert state is not None
        fitted: E = self.estimator._finish(state, self._n_components, variance)
        self.client_merge_s = time.perf_counter() - start
        return fitted
