"""Incremental PCA over distributed dask arrays, reduced partition by partition where the data is.

Each worker-local partition (see :mod:`deisa.analysis.splitter`) is reduced by one task on its own
worker to a small partial state: sample count ``n``, ``mean``, per-feature sum of squared
deviations, and the leading singular values and right singular vectors ``S, V`` of its centred
rows. Any number of partial states merge by the SVD of their stacked matrix::

    [ S_1 V_1                   ]
    [   ...                     ]
    [ S_k V_k                   ]
    [ sqrt(n_1) (mean_1 - mean) ]
    [   ...                     ]
    [ sqrt(n_k) (mean_k - mean) ]

where ``mean`` is the pooled mean. The merges form a tree: first the partitions of each worker,
on that worker (nothing moves); then groups of up to ``_MERGE_FAN_IN`` worker states; the client
merges the last few. ``partial_fit`` merges the new data's state into the one kept from earlier
calls (time steps), so the model follows a stream of arrays.
The states and their merges are :mod:`deisa.analysis._pca_kernels`'s; this module builds the
task graph and holds the estimator.

Two regimes, chosen by ``svd_solver`` (``"auto"`` picks by the problem's size, as scikit-learn's
PCA does):

* **exact** (``"full"``): states keep every component, ``min(n_seen, n_features)`` of them; the
  result equals exact PCA to rounding. A local reduction is a thin SVD of the partition's rows,
  ``O(n f min(n, f))``, and a state holds ``8 f min(n_seen, f)`` bytes.
* **bounded rank** (``"randomized"``): states keep ``n_components + 10`` components. A local
  reduction is a randomized SVD (Halko et al. 2011) computed on the blocks where they lie, with
  the centring applied implicitly: no copy of the partition is made, and it costs
  ``2 + 2 q`` passes over the partition's bytes (``q`` power iterations) plus
  ``O(n f (n_components + 10))`` flops. A merge is an exact SVD of the stacked states,
  truncated back to ``n_components + 10``: ``O(k (n_components + 11)^2 f)``. Truncating
  states biases the singular values (each partition drops the noise it held along the leading
  components), so once the root merge has fixed the components, one more pass per partition
  measures the variance along each of them: the explained variance is then exact for the
  components found, whatever the number of partitions.
"""

# scikit-learn's API names the data ``X``; keep it for drop-in compatibility.
# ruff: noqa: N803, N806

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import dask
import dask.array as da
import numpy as np
from distributed import Client, Future, get_client
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.extmath import svd_flip

from ._pca_kernels import (
    PartialPCA,
    merge,
    reduce_partition,
    reduce_rows,
    state_variance_along,
    variance_along,
)
from ._pending_fit import PendingFit
from .splitter import PartitionPolicy, split

__all__ = ["IncrementalPCA", "PendingFit"]

logger = logging.getLogger(__name__)

_SVD_SOLVERS = ("auto", "full", "tsqr", "randomized")
# Extra components kept by the bounded-rank solver in every state: they absorb most of the
# error that truncating each partial state would otherwise add to the leading components.
_RANDOMIZED_EXTRA_COMPONENTS = 10
# "auto" keeps exact states while they are small: up to this many features (a state is then at
# most 500 x 500 float64, 1.9 MiB), or when the bounded rank would save little (see _merge_rank).
_EXACT_MAX_FEATURES = 500
# Power iterations of the bounded-rank solver for iterated_power="auto" (each adds 2 passes).
# With 10 extra components and the refinement pass, 1 iteration already kept the explained
# variance of the heat and modes-plus-noise fields within 1e-8 of exact PCA; 2 iterations also
# hold a spectrum with no gap (singular values 1/i) near 1e-6 (bench.analytics, tests/test_pca).
_AUTO_POWER_ITERATIONS = 2
# States merged by one task. A wider tree means fewer task round trips, each merge an SVD of
# fan-in times a state's rows; the root runs on the client, where no task is needed.
_MERGE_FAN_IN = 16


def _current_client() -> Client | None:
    try:
        return get_client()
    except ValueError:  # no client in this process
        return None


class IncrementalPCA(TransformerMixin, BaseEstimator):
    """Incremental principal component analysis of dask or numpy arrays (rows are samples).

    Scikit-learn API, and a drop-in for dask-ml's ``IncrementalPCA``: ``fit`` on a dask array
    runs one task per worker-local partition (:func:`deisa.analysis.splitter.split` with whole row
    bands), each reducing its blocks where they are, then merges the partial states in a tree.
    ``partial_fit`` keeps the state across calls, e.g. one call per simulation time step.

    Parameters
    ----------
    n_components : int, optional
        Components to keep. Defaults to ``min(n_samples, n_features)`` of the first call.
        Must be ≤ ``n_features`` and ≤ the number of samples seen.
    whiten : bool
        Scale the output of :meth:`transform` to unit variance per component.
    copy : bool
        Accepted for compatibility and ignored: inputs are never modified in place.
    batch_size : int, optional
        Rows per local reduction for numpy input (``None``: all rows at once). Ignored for dask
        arrays, whose partitions are the batches.
    svd_solver : {"auto", "full", "tsqr", "randomized"}
        ``"full"`` and ``"tsqr"`` (the same here) keep every component during merges and
        truncate only at the end: the result equals exact PCA (to rounding), at a cost that
        grows with ``n_features**2`` (see Notes). ``"randomized"`` keeps ``n_components + 10``
        components in every state (bounded rank: cost and memory linear in ``n_features``).
        ``"auto"`` is exact while a state is small, ``n_features <= 500`` (an exact state is
        then at most 1.9 MiB), or when ``n_components + 10`` is at least 80 % of
        ``min(n_samples_seen, n_features)``; bounded rank otherwise. The choice made is
        ``svd_solver_``.
    iterated_power : int or "auto"
        Power iterations of the bounded-rank solver; ``"auto"`` (or 0, dask-ml's default) is 2.
    random_state : int, RandomState or None
        Seeds the randomized solver.
    partition_policy : str or PartitionPolicy
        Partition sizing passed to :func:`deisa.split` (default one per worker thread).
    client : Client, optional
        Client for dask arrays; defaults to the current one. With none (no client in the
        process, e.g. on a :class:`~deisa.Replay` of files), ``fit`` and ``partial_fit`` of a
        dask array compute its blocks with dask's local scheduler and reduce them in this
        process, as one partition: the result is the same as on one worker of one thread.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
    explained_variance_ : ndarray of shape (n_components,)
        Variance along each component (``ddof=1``).
    explained_variance_ratio_ : ndarray of shape (n_components,)
    singular_values_ : ndarray of shape (n_components,)
    mean_ : ndarray of shape (n_features,)
    var_ : ndarray of shape (n_features,)
        Per-feature variance (``ddof=0``, as scikit-learn's IncrementalPCA).
    noise_variance_ : float
        Mean variance of the discarded components (from the total variance).
    n_components_ : int
    n_features_in_ : int
    n_samples_seen_ : int
    svd_solver_ : {"full", "randomized"}
        The regime used: exact states, or states of ``n_components + 10`` components.
    bytes_moved_ : int
        Bytes fetched across workers by the last ``partial_fit``'s local phase: nonzero only
        when a row band's blocks were spread over several workers.

    Notes
    -----
    Cost, with ``n`` rows and ``f`` features per partition, ``k`` components and ``r = k + 10``:

    ============  ===============================  ==================  =====================
    regime        local reduction (per partition)  state (bytes)       merge of ``m`` states
    ============  ===============================  ==================  =====================
    exact         thin SVD ``O(n f min(n, f))``,   ``8 f min(n_seen,   SVD of ``m min(n_seen,
                  one copy of the rows             f)``                f) x f``
    bounded rank  ``3 + 2 q`` passes over the      ``8 r f``           SVD of ``m (r + 1) x
                  blocks in place, ``O(n f r)``                        f``, ``O(m r^2 f)``
    ============  ===============================  ==================  =====================

    A worker's partitions merge on that worker, then up to 16 states per merge task; the client
    merges the last level (at most 16 states) and holds the model's state. float32 data is read
    in place and multiplied in float32 (no float64 copy); states are float64. Accuracy of the
    bounded rank regime against exact PCA is measured in ``docs/benchmarks.md``.

    Examples
    --------
    >>> x = client.persist(da.random.random((10_000, 32), chunks=(1_000, 16)))  # doctest: +SKIP
    >>> pca = IncrementalPCA(n_components=2, copy=False, svd_solver="randomized")  # doctest: +SKIP
    >>> pca.partial_fit(x).explained_variance_ratio_  # doctest: +SKIP
    """

    def __init__(
        self,
        n_components: int | None = None,
        *,
        whiten: bool = False,
        copy: bool = True,
        batch_size: int | None = None,
        svd_solver: str = "auto",
        iterated_power: int | str = "auto",
        random_state: Any = None,
        partition_policy: str | PartitionPolicy = "static",
        client: Client | None = None,
    ) -> None:
        self.n_components = n_components
        self.whiten = whiten
        self.copy = copy
        self.batch_size = batch_size
        self.svd_solver = svd_solver
        self.iterated_power = iterated_power
        self.random_state = random_state
        self.partition_policy = partition_policy
        self.client = client

    # ------------------------------------------------------------------ fitting

    def fit(self, X: Any, y: Any = None) -> IncrementalPCA:
        """Fit the model on ``X`` from scratch.

        Parameters
        ----------
        X : dask.array.Array or array-like of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self
        """
        self._state: PartialPCA | None = None
        return self.partial_fit(X)

    def partial_fit(self, X: Any, y: Any = None, check_input: bool = True) -> IncrementalPCA:
        """Update the model with the rows of ``X``.

        Parameters
        ----------
        X : dask.array.Array or array-like of shape (n_samples, n_features)
        y : ignored
        check_input : bool
            Accepted for scikit-learn compatibility.

        Returns
        -------
        self
        """
        if not isinstance(X, da.Array):
            X = np.asarray(X)  # float32 stays float32 (no copy), as scikit-learn's PCA keeps it
            if X.dtype not in (np.float32, np.float64):
                X = X.astype(np.float64)
            n_components, rank, seeds, n_iter = self._prepare(X)
            previous = self._previous
            state = merge([previous, self._reduce_numpy(X, rank, seeds, n_iter)], rank)
            assert state is not None
            self.bytes_moved_ = 0
            variance = None
            if rank is not None:
                variance = variance_along([X], [(0, 0)], state, n_components)
                variance += state_variance_along(
                    previous, state.mean, state.components[:n_components]
                )
            return self._finish(state, n_components, variance)
        if self.client is None and _current_client() is None:
            return self._fit_here(X)
        return self._submit(X).result()

    def submit_fit(self, X: da.Array) -> PendingFit[IncrementalPCA]:
        """Start fitting the model on the dask array ``X`` from scratch, and return at once.

        The local reductions and merges run on the workers while the caller goes on (e.g.
        takes the next time step); ``submit_fit(X).result()`` is ``fit(X)``.

        Parameters
        ----------
        X : dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        PendingFit
            Its ``result()`` is this estimator, fitted; ``progress()`` the phase in progress.
        """
        self._state = None
        return self._submit(X)

    @property
    def _previous(self) -> PartialPCA | None:
        return getattr(self, "_state", None)

    def _client(self) -> Client:
        return self.client if self.client is not None else get_client()

    def _prepare(self, X: Any) -> tuple[int, int | None, np.random.RandomState, int]:
        if X.ndim != 2:
            raise ValueError(f"X must be 2D (samples, features), got shape {X.shape}")
        previous = self._previous
        n_samples, n_features = X.shape
        if previous is not None and previous.mean.shape[0] != n_features:
            raise ValueError(
                f"X has n_features={n_features}, the model was fitted with "
                f"n_features={previous.mean.shape[0]}"
            )
        n_seen = (previous.n_samples if previous is not None else 0) + n_samples
        n_components = self._check_params(n_seen, n_features)
        rank = self._merge_rank(n_components, n_seen, n_features)
        self.svd_solver_ = "full" if rank is None else "randomized"
        seeds = check_random_state(self.random_state)
        n_iter = self.iterated_power
        if n_iter in (0, "auto"):
            n_iter = _AUTO_POWER_ITERATIONS
        elif not isinstance(n_iter, (int, np.integer)) or n_iter < 0:
            raise ValueError(f"iterated_power={n_iter!r} must be an integer ≥ 0 or 'auto'")
        return n_components, rank, seeds, int(n_iter)

    def _check_params(self, n_samples_seen: int, n_features: int) -> int:
        if self.svd_solver not in _SVD_SOLVERS:
            raise ValueError(f"svd_solver={self.svd_solver!r} must be one of {_SVD_SOLVERS}")
        n_components = self.n_components
        if n_components is None:
            fitted = getattr(self, "n_components_", None)
            return fitted if fitted is not None else min(n_samples_seen, n_features)
        if not isinstance(n_components, (int, np.integer)) or n_components < 1:
            raise ValueError(f"n_components={n_components!r} must be an integer ≥ 1")
        if n_components > n_features:
            raise ValueError(f"n_components={n_components} must be ≤ n_features={n_features}")
        if n_components > n_samples_seen:
            raise ValueError(
                f"n_components={n_components} must be ≤ n_samples_seen={n_samples_seen}"
            )
        return int(n_components)

    def _merge_rank(self, n_components: int, n_seen: int, n_features: int) -> int | None:
        """Components kept per state: ``None`` keeps them all (exact)."""
        rank = n_components + _RANDOMIZED_EXTRA_COMPONENTS
        if self.svd_solver == "randomized":
            return rank
        if self.svd_solver in ("full", "tsqr"):
            return None
        small = n_features <= _EXACT_MAX_FEATURES
        return None if small or rank >= 0.8 * min(n_seen, n_features) else rank

    def _reduce_numpy(
        self, X: np.ndarray, rank: int | None, seeds: np.random.RandomState, n_iter: int
    ) -> PartialPCA | None:
        batch = self.batch_size or len(X)
        state = None
        for start in range(0, len(X), batch):
            part = reduce_rows(X[start : start + batch], rank, int(seeds.randint(2**31)), n_iter)
            state = merge([state, part], rank)
        return state

    def _fit_here(self, X: da.Array) -> IncrementalPCA:
        """``partial_fit`` of a dask array with no client: its blocks computed by dask's local
        scheduler and reduced here as one partition, as one worker of one thread would."""
        n_components, rank, seeds, n_iter = self._prepare(X)
        blocks = list(dask.compute(*X.to_delayed().ravel()))
        indexes = list(np.ndindex(*X.numblocks))
        previous = self._previous
        local = reduce_partition(blocks, indexes, rank, int(seeds.randint(2**31)), n_iter)
        state = merge([previous, local], rank)
        assert state is not None
        self.bytes_moved_ = 0
        variance = None
        if rank is not None:
            variance = variance_along(blocks, indexes, state, n_components)
            variance += state_variance_along(previous, state.mean, state.components[:n_components])
        return self._finish(state, n_components, variance)

    def _submit(self, X: da.Array) -> PendingFit[IncrementalPCA]:
        n_components, rank, seeds, n_iter = self._prepare(X)
        client = self._client()
        partitions = split(
            X, self.partition_policy, keep_rows_whole=True, client=client, persist=True
        )
        if partitions.bytes_to_move:
            logger.info(
                "IncrementalPCA: %d bytes cross workers to gather whole row bands of %s",
                partitions.bytes_to_move,
                X.name,
            )
        self.bytes_moved_ = partitions.bytes_to_move
        partials = [
            (
                part.worker,
                part.submit(
                    reduce_partition, part.get_indexes(), rank, int(seeds.randint(2**31)), n_iter
                ),
            )
            for part in partitions
        ]
        merges: list[Future] = []

        def merge_task(states: list[Future], **pin: Any) -> Future:
            merges.append(client.submit(merge, states, rank, pure=False, **pin))
            return merges[-1]

        # A worker's partitions merge on that worker, so the first level moves nothing.
        by_worker: dict[str, list[Future]] = defaultdict(list)
        for worker, future in partials:
            by_worker[worker].append(future)
        level = [
            futures[0] if len(futures) == 1 else merge_task(futures, workers=[worker])
            for worker, futures in by_worker.items()
        ]
        while len(level) > _MERGE_FAN_IN:
            groups = [level[i : i + _MERGE_FAN_IN] for i in range(0, len(level), _MERGE_FAN_IN)]
            level = [group[0] if len(group) == 1 else merge_task(group) for group in groups]
        previous = self._previous
        refinements: list[Future] = []
        if rank is not None:
            # Bounded rank: merge the root on a worker, then measure the variance along its
            # components on every partition (one more pass, where the blocks are).
            root = client.submit(merge, [previous, *level], rank, pure=False)
            level = [root]
            refinements = [
                part.submit(variance_along, part.get_indexes(), root, n_components)
                for part in partitions
            ]
        return PendingFit(
            self,
            n_components,
            rank,
            [f for _, f in partials],
            merges,
            level,
            refinements,
            previous,
        )

    def _finish(
        self, state: PartialPCA, n_components: int, variance: np.ndarray | None = None
    ) -> IncrementalPCA:
        self._state = state
        self._set_attributes(state, n_components, variance)
        return self

    def _set_attributes(
        self, state: PartialPCA, n_components: int, variance: np.ndarray | None
    ) -> None:
        """``variance``: sums of squares along the components, measured on the data (bounded
        rank), which then give the explained variance instead of the state's singular values."""
        n = state.n_samples
        n_features = state.mean.shape[0]
        _, components = svd_flip(None, state.components.copy(), u_based_decision=False)
        singular = state.singular_values[:n_components]
        if variance is not None:
            singular = np.sqrt(variance[:n_components])
        explained = singular**2 / (n - 1)
        total_variance = state.squared_deviations.sum() / (n - 1)
        self.n_samples_seen_ = n
        self.n_features_in_ = n_features
        self.n_components_ = n_components
        self.mean_ = state.mean
        self.var_ = state.squared_deviations / n
        self.components_ = components[:n_components]
        self.singular_values_ = singular
        self.explained_variance_ = explained
        self.explained_variance_ratio_ = explained / total_variance
        max_rank = min(n, n_features)
        self.noise_variance_ = (
            float((total_variance - explained.sum()) / (max_rank - n_components))
            if n_components < max_rank
            else 0.0
        )

    # ------------------------------------------------------------------ projecting

    def transform(self, X: Any) -> Any:
        """Project ``X`` on the components (lazily for a dask array).

        Parameters
        ----------
        X : dask.array.Array or array-like of shape (n_samples, n_features)

        Returns
        -------
        array of shape (n_samples, n_components), dask if ``X`` is.
        """
        if not isinstance(X, da.Array):
            X = np.asarray(X, dtype=np.float64)
        projected = (X - self.mean_) @ self.components_.T
        if self.whiten:
            projected = projected / np.sqrt(self.explained_variance_)
        return projected

    def inverse_transform(self, X: Any) -> Any:
        """Map projected rows back to feature space.

        Parameters
        ----------
        X : array of shape (n_samples, n_components)

        Returns
        -------
        array of shape (n_samples, n_features)
        """
        if self.whiten:
            X = X * np.sqrt(self.explained_variance_)
        return X @ self.components_ + self.mean_
