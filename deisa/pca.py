"""Incremental PCA over distributed dask arrays, reduced partition by partition where the data is.

Each worker-local partition (see :mod:`deisa.splitter`) is reduced by one task on its own
worker to a small partial state: sample count ``n``, ``mean``, per-feature sum of squared
deviations, and the SVD ``S, V`` of its centred rows. Any number of partial states merge
exactly by the SVD of their stacked matrix::

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
"""

# scikit-learn's API names the data ``X``; keep it for drop-in compatibility.
# ruff: noqa: N803, N806

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from dask.core import flatten
from distributed import Client, Future, futures_of, get_client
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.extmath import randomized_svd, svd_flip

from deisa.splitter import PartitionPolicy, split

__all__ = ["IncrementalPCA"]

logger = logging.getLogger(__name__)

_SVD_SOLVERS = ("auto", "full", "tsqr", "randomized")
# Extra components kept by the randomized solver at every merge: they absorb most of the
# error that truncating each partial state would otherwise add to the leading components.
_RANDOMIZED_EXTRA_COMPONENTS = 10
# States merged by one task. A wider tree means fewer task round trips, each merge an SVD of
# fan-in times a state's rows; the root runs on the client, where no task is needed.
_MERGE_FAN_IN = 16


@dataclass
class _PartialPCA:
    """PCA state of a set of rows: enough to merge with another set exactly (untruncated)."""

    n_samples: int
    mean: np.ndarray  # (n_features,)
    squared_deviations: np.ndarray  # (n_features,), sum over rows of (x - mean) ** 2
    singular_values: np.ndarray  # (rank,)
    components: np.ndarray  # (rank, n_features)

    def __sizeof__(self) -> int:  # dask's memory and transfer accounting reads this
        arrays = (self.mean, self.squared_deviations, self.singular_values, self.components)
        return object.__sizeof__(self) + sum(a.nbytes for a in arrays)


def _svd(matrix: np.ndarray, rank: int | None, seed: int, n_iter: int | str) -> tuple[Any, Any]:
    if rank is None or rank >= min(matrix.shape):
        _, s, vt = np.linalg.svd(matrix, full_matrices=False)
        return s, vt
    _, s, vt = randomized_svd(
        matrix,
        rank,
        n_oversamples=_RANDOMIZED_EXTRA_COMPONENTS,
        n_iter=n_iter,
        random_state=seed,
    )
    return s, vt


def _reduce_rows(
    rows: np.ndarray, rank: int | None, seed: int, n_iter: int | str, owned: bool = False
) -> _PartialPCA:
    """Partial state of ``rows``; ``owned`` rows (a private copy) are centred in place."""
    rows = np.asarray(rows, dtype=np.float64)
    mean = rows.mean(axis=0)
    if owned:
        rows -= mean  # saves a copy of the partition's rows
        centred = rows
    else:
        centred = rows - mean
    s, vt = _svd(centred, rank, seed, n_iter)
    return _PartialPCA(len(rows), mean, (centred**2).sum(axis=0), s, vt)


def _reduce_partition(
    blocks: list[np.ndarray],
    block_indexes: list[tuple[int, int]],
    rank: int | None,
    seed: int,
    n_iter: int | str,
) -> _PartialPCA:
    # The splitter keeps every row band in one partition: np.block reassembles the rows in a
    # single copy, which the reduction then owns and centres in place.
    bands: dict[int, list[tuple[int, np.ndarray]]] = defaultdict(list)
    for (row, column), block in zip(block_indexes, blocks, strict=True):
        bands[row].append((column, block))
    rows = np.block([[b for _, b in sorted(bands[r], key=lambda cb: cb[0])] for r in sorted(bands)])
    return _reduce_rows(rows, rank, seed, n_iter, owned=True)


def _merge(
    states: list[_PartialPCA | None], rank: int | None, seed: int, n_iter: int | str
) -> _PartialPCA | None:
    """Exact merge of any number of partial states (``None`` and empty states are skipped)."""
    present = [s for s in states if s is not None and s.n_samples > 0]
    if len(present) <= 1:
        return present[0] if present else None
    counts = np.array([s.n_samples for s in present], dtype=np.float64)
    n = int(counts.sum())
    means = np.stack([s.mean for s in present])
    mean = counts @ means / n
    deltas = means - mean
    stacked = np.vstack(
        [s.singular_values[:, None] * s.components for s in present]
        + [np.sqrt(counts)[:, None] * deltas]
    )
    singular_values, components = _svd(stacked, rank, seed, n_iter)
    squared_deviations = sum(s.squared_deviations for s in present) + counts @ deltas**2
    return _PartialPCA(n, mean, squared_deviations, singular_values, components)


class IncrementalPCA(TransformerMixin, BaseEstimator):
    """Incremental principal component analysis of dask or numpy arrays (rows are samples).

    Scikit-learn API, and a drop-in for dask-ml's ``IncrementalPCA``: ``fit`` on a dask array
    runs one task per worker-local partition (:func:`deisa.splitter.split` with whole row
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
        ``"auto"``, ``"full"`` and ``"tsqr"`` (all the same here) keep every component during
        merges and truncate only at the end: the result equals exact PCA (to rounding).
        ``"randomized"`` computes local and merge SVDs with randomized SVD and keeps
        ``n_components + 10`` components at every merge: much cheaper when
        ``n_components << n_features``, an approximation otherwise documented as such.
    iterated_power : int or "auto"
        Power iterations of the randomized solver (dask-ml's default 0 means "auto" here).
    random_state : int, RandomState or None
        Seeds the randomized solver.
    partition_policy : str or PartitionPolicy
        Partition sizing passed to :func:`deisa.splitter.split` (default one per worker thread).
    client : Client, optional
        Client for dask arrays; defaults to the current one.

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
    bytes_moved_ : int
        Bytes fetched across workers by the last ``partial_fit``'s local phase: nonzero only
        when a row band's blocks were spread over several workers.

    Notes
    -----
    Cost with exact merges (default), ``n`` rows and ``f`` features per partition: a local
    thin SVD in ``O(n f min(n, f))`` time; each state holds up to ``min(n_seen, f)`` components,
    so ``O(f**2)`` memory (``8 f**2`` bytes, 32 MiB for ``f=2048``). A merge of ``k`` states
    (a worker's partitions, then up to 16 states per merge task, the last ones on the client)
    is an SVD of a ``(k min(n_seen, f) + k) x f`` matrix, and the client holds up to 16 states
    at the root. With ``svd_solver="randomized"``, a state is ``(n_components + 10) x f`` and
    every SVD is ``O(rows f (n_components + 10))``. Each partition task also holds a copy of its
    rows (the blocks reassembled).

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
        self._state: _PartialPCA | None = None
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
            X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2D (samples, features), got shape {X.shape}")
        previous = getattr(self, "_state", None)
        n_samples, n_features = X.shape
        if previous is not None and previous.mean.shape[0] != n_features:
            raise ValueError(
                f"X has n_features={n_features}, the model was fitted with "
                f"n_features={previous.mean.shape[0]}"
            )
        n_seen = (previous.n_samples if previous is not None else 0) + n_samples
        n_components = self._check_params(n_seen, n_features)
        rank = self._merge_rank(n_components)
        seeds = check_random_state(self.random_state)
        n_iter = "auto" if self.iterated_power in (0, "auto") else self.iterated_power

        if isinstance(X, da.Array):
            new, self.bytes_moved_ = self._reduce_dask(X, rank, seeds, n_iter)
        else:
            new, self.bytes_moved_ = self._reduce_numpy(X, rank, seeds, n_iter), 0
        state = _merge([previous, new], rank, int(seeds.randint(2**31)), n_iter)
        assert state is not None
        self._state = state
        self._set_attributes(state, n_components)
        return self

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

    def _merge_rank(self, n_components: int) -> int | None:
        if self.svd_solver == "randomized":
            return n_components + _RANDOMIZED_EXTRA_COMPONENTS
        return None

    def _reduce_numpy(
        self, X: np.ndarray, rank: int | None, seeds: np.random.RandomState, n_iter: int | str
    ) -> _PartialPCA | None:
        batch = self.batch_size or len(X)
        state = None
        for start in range(0, len(X), batch):
            part = _reduce_rows(X[start : start + batch], rank, int(seeds.randint(2**31)), n_iter)
            state = _merge([state, part], rank, int(seeds.randint(2**31)), n_iter)
        return state

    def _reduce_dask(
        self, X: da.Array, rank: int | None, seeds: np.random.RandomState, n_iter: int | str
    ) -> tuple[_PartialPCA | None, int]:
        client = self.client if self.client is not None else get_client()
        held = {f.key for f in futures_of(X)}
        if not all(k in held for k in flatten(X.__dask_keys__())):
            logger.debug("IncrementalPCA: persisting %s, its blocks are not in memory", X.name)
            X = client.persist(X)
        partitions = split(X, self.partition_policy, keep_rows_whole=True, client=client)
        if partitions.bytes_to_move:
            logger.info(
                "IncrementalPCA: %d bytes cross workers to gather whole row bands of %s",
                partitions.bytes_to_move,
                X.name,
            )
        partials = [
            (
                part.worker,
                part.submit(
                    _reduce_partition, part.get_indexes(), rank, int(seeds.randint(2**31)), n_iter
                ),
            )
            for part in partitions
        ]
        return self._merge_tree(client, partials, rank, seeds, n_iter), partitions.bytes_to_move

    @staticmethod
    def _merge_tree(
        client: Client,
        partials: list[tuple[str, Future]],
        rank: int | None,
        seeds: np.random.RandomState,
        n_iter: int | str,
    ) -> _PartialPCA | None:
        def merge_task(states: list[Future], **pin: Any) -> Future:
            seed = int(seeds.randint(2**31))
            return client.submit(_merge, states, rank, seed, n_iter, pure=False, **pin)

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
        return _merge(client.gather(level), rank, int(seeds.randint(2**31)), n_iter)

    def _set_attributes(self, state: _PartialPCA, n_components: int) -> None:
        n = state.n_samples
        n_features = state.mean.shape[0]
        _, components = svd_flip(None, state.components.copy(), u_based_decision=False)
        singular = state.singular_values[:n_components]
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
