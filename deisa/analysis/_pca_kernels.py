"""The numerical kernels of :mod:`deisa.analysis.pca`: partial PCA states and their merges.

A :class:`PartialPCA` is the state of a set of rows (count, mean, squared deviations, singular
values and right singular vectors of the centred rows); :func:`reduce_partition` computes it for
the blocks of one partition where they lie (:class:`Bands`: products with the centred matrix
block by block, no copy), :func:`merge` merges any number of them (exactly when untruncated),
:func:`variance_along` measures the variance along final components (the bounded-rank regime's
refinement pass). The estimator, the task graph and the regimes are in :mod:`deisa.analysis.pca`.
"""

# scikit-learn's API names the data ``X``; keep it for drop-in compatibility.

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

# Bytes of scratch per chunk when a pass converts or shifts a block: a few chunks fit in cache.
CHUNK_BYTES = 1 << 21


@dataclass
class PartialPCA:
    """PCA state of a set of rows: enough to merge with another set (exactly when untruncated)."""

    n_samples: int
    mean: np.ndarray  # (n_features,)
    squared_deviations: np.ndarray  # (n_features,), sum over rows of (x - mean) ** 2
    singular_values: np.ndarray  # (rank,)
    components: np.ndarray  # (rank, n_features)

    def __sizeof__(self) -> int:  # dask's memory and transfer accounting reads this
        arrays = (self.mean, self.squared_deviations, self.singular_values, self.components)
        return object.__sizeof__(self) + sum(a.nbytes for a in arrays)


def _compute_dtype(blocks: Sequence[np.ndarray]) -> np.dtype:
    """float32 when every block is float32 (products then stay in float32, as scikit-learn's
    PCA keeps float32 input in float32), float64 otherwise."""
    single = all(b.dtype == np.float32 for b in blocks)
    return np.dtype(np.float32 if single else np.float64)


class Bands:
    """Rows of a partition as a grid of blocks, read in place: ``bands[i][j]`` is the block of
    row band ``i`` and column block ``j``. Products with the centred matrix ``A = X - 1 mean``
    are computed block by block, so the partition is never copied.

    When every block is float64, blocks enter the products whole (one matrix product per
    block and pass, centred by a rank-one correction). Otherwise blocks are read in chunks of
    a few ``CHUNK_BYTES``, each shifted by the centre into a scratch buffer of the compute
    dtype (float32 for float32 data): a float32 partition is never converted to float64, and
    subtracting the centre before the product keeps a large offset from cancelling float32's
    few digits. The first pass (:meth:`column_stats`) always works on float64 chunks.
    """

    def __init__(self, bands: Sequence[Sequence[np.ndarray]]) -> None:
        self.bands = [[np.asarray(b) for b in band] for band in bands]
        self.dtype = _compute_dtype([b for band in self.bands for b in band])
        widths = [b.shape[1] for b in self.bands[0]]
        self.columns = np.concatenate([[0], np.cumsum(widths)]).astype(int)
        self.heights = [band[0].shape[0] for band in self.bands]
        self.rows = np.concatenate([[0], np.cumsum(self.heights)]).astype(int)
        self.shape = (int(self.rows[-1]), int(self.columns[-1]))
        self.mean = np.zeros(self.shape[1])
        # Whole float64 blocks go straight into the products; anything else is shifted.
        self._shifted = any(b.dtype != np.float64 for band in self.bands for b in band)
        self._scratch = np.empty(0, dtype=self.dtype)

    def _cols(self, j: int) -> slice:
        return slice(self.columns[j], self.columns[j + 1])

    def _pieces(self, centre: np.ndarray) -> Iterator[tuple[int, slice, np.ndarray]]:
        """``(first row, columns, X[rows, columns] - centre[columns])`` over the partition:
        whole blocks (``centre`` ignored) when they are all float64, else shifted chunks in
        the compute dtype, each valid until the next is yielded."""
        for i, band in enumerate(self.bands):
            for j, block in enumerate(band):
                cols = self._cols(j)
                if not self._shifted:
                    yield self.rows[i], cols, block
                    continue
                # Chunks of a few CHUNK_BYTES: large enough for efficient matrix products.
                size = 4 * CHUNK_BYTES // self.dtype.itemsize
                step = max(1, size // max(1, block.shape[1]))
                if self._scratch.size < step * block.shape[1]:
                    self._scratch = np.empty(step * block.shape[1], dtype=self.dtype)
                shift = centre[cols].astype(self.dtype)
                for r in range(0, block.shape[0], step):
                    rows = block[r : r + step]
                    piece = self._scratch[: rows.size].reshape(rows.shape)
                    np.subtract(rows, shift, out=piece, casting="unsafe")
                    yield self.rows[i] + r, cols, piece

    def column_stats(
        self, right: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Mean and sum of squared deviations per column, and ``A @ right``, in one pass.

        Deviations are accumulated from the first row (a shift close to the data), in float64
        chunks, so a large offset does not cancel the variance out as
        ``sum(x**2) - n mean**2`` would. The product (when ``right`` is given) is taken on the
        same shifted chunks while they are in cache, and centred once the mean is known.
        """
        n, f = self.shape
        # the first row only: concatenating the band would copy all of it
        shift = np.concatenate([b[0] for b in self.bands[0]]).astype(np.float64)
        total, squares = np.zeros(f), np.zeros(f)
        product = None if right is None else np.zeros((n, right.shape[1]))
        scratch = np.empty(max(CHUNK_BYTES // 8, f))  # reused: fresh buffers cost page faults
        for i, band in enumerate(self.bands):
            for j, block in enumerate(band):
                cols = self._cols(j)
                step = max(1, CHUNK_BYTES // (8 * max(1, block.shape[1])))
                for r in range(0, block.shape[0], step):
                    rows = block[r : r + step]
                    d = scratch[: rows.size].reshape(rows.shape)
                    np.subtract(rows, shift[cols], out=d)
                    if product is not None and right is not None:
                        start = self.rows[i] + r
                        product[start : start + len(rows)] += d @ right[cols]
                    total[cols] += d.sum(axis=0)
                    squares[cols] += np.einsum("ij,ij->j", d, d)
        offset = total / n
        self.mean = shift + offset
        if product is not None and right is not None:
            product -= offset @ right
        return self.mean, np.maximum(squares - n * offset**2, 0.0), product

    def _residual(self, centre: np.ndarray) -> np.ndarray:
        """What :meth:`_pieces` leaves to subtract: ``mean - centre`` as the pieces hold it."""
        if not self._shifted:
            return self.mean
        return self.mean - centre.astype(self.dtype).astype(np.float64)

    def matmul(self, right: np.ndarray) -> np.ndarray:
        """``A @ right`` for ``right`` of shape (n_features, r)."""
        out = np.zeros((self.shape[0], right.shape[1]))
        centre = self.mean
        cast = right.astype(self.dtype, copy=False)
        for start, cols, piece in self._pieces(centre):
            out[start : start + len(piece)] += piece @ cast[cols]
        out -= self._residual(centre) @ right
        return out

    def rmatmul(self, left: np.ndarray) -> np.ndarray:
        """``A.T @ left`` for ``left`` of shape (n_samples, r)."""
        out = np.zeros((self.shape[1], left.shape[1]))
        centre = self.mean
        # (left.T @ piece).T: the row-major product is faster than piece.T @ left in BLAS.
        cast = np.ascontiguousarray(left.T, dtype=self.dtype)
        for start, cols, piece in self._pieces(centre):
            out[cols] += (cast[:, start : start + len(piece)] @ piece).T
        out -= np.outer(self._residual(centre), left.sum(axis=0))
        return out

    def centred_copy(self) -> np.ndarray:
        """The centred rows as one float64 array (the exact solver's input), in one copy."""
        rows = np.block([list(band) for band in self.bands]).astype(np.float64, copy=False)
        rows -= self.mean
        return rows


def randomized_svd(
    matrix: Bands, first_sketch: np.ndarray, n_iter: int
) -> tuple[np.ndarray, np.ndarray]:
    """Leading singular values and right vectors of the centred ``matrix``, as many as the
    columns of ``first_sketch`` (the matrix times a Gaussian random matrix).

    scikit-learn's ``randomized_svd`` needs the matrix itself; this is the same algorithm
    (Halko et al. 2011, with scikit-learn's LU normalisation between power iterations) on
    the implicit, centred block matrix.
    """
    sketch = first_sketch
    for _ in range(n_iter):  # LU keeps the power iterations well scaled, at a third of QR's cost
        basis, _ = scipy.linalg.lu(sketch, permute_l=True, check_finite=False)
        back, _ = scipy.linalg.lu(matrix.rmatmul(basis), permute_l=True, check_finite=False)
        sketch = matrix.matmul(back)
    basis, _ = scipy.linalg.qr(sketch, mode="economic", check_finite=False)
    _, singular_values, components = np.linalg.svd(matrix.rmatmul(basis).T, full_matrices=False)
    return singular_values, components


def reduce_bands(
    bands: Sequence[Sequence[np.ndarray]], rank: int | None, seed: int, n_iter: int
) -> PartialPCA:
    """Partial state of the rows held by ``bands`` (see :class:`Bands`)."""
    matrix = Bands(bands)
    if rank is None or rank >= min(matrix.shape):
        mean, squared_deviations, _ = matrix.column_stats()
        _, singular_values, components = np.linalg.svd(matrix.centred_copy(), full_matrices=False)
        if rank is not None:
            singular_values, components = singular_values[:rank], components[:rank]
    else:
        gaussian = np.random.default_rng(seed).standard_normal((matrix.shape[1], rank))
        mean, squared_deviations, sketch = matrix.column_stats(gaussian)
        assert sketch is not None
        singular_values, components = randomized_svd(matrix, sketch, n_iter)
    return PartialPCA(matrix.shape[0], mean, squared_deviations, singular_values, components)


def reduce_rows(rows: np.ndarray, rank: int | None, seed: int, n_iter: int) -> PartialPCA:
    """Partial state of a numpy array of rows (left untouched)."""
    return reduce_bands([[np.asarray(rows)]], rank, seed, n_iter)


def ordered_bands(
    blocks: list[np.ndarray], block_indexes: list[tuple[int, int]]
) -> list[list[np.ndarray]]:
    # The splitter keeps every row band in one partition: the bands are read where they lie.
    bands: dict[int, list[tuple[int, np.ndarray]]] = defaultdict(list)
    for (row, column), block in zip(block_indexes, blocks, strict=True):
        bands[row].append((column, block))
    return [[b for _, b in sorted(bands[r], key=lambda cb: cb[0])] for r in sorted(bands)]


def reduce_partition(
    blocks: list[np.ndarray],
    block_indexes: list[tuple[int, int]],
    rank: int | None,
    seed: int,
    n_iter: int,
) -> PartialPCA:
    return reduce_bands(ordered_bands(blocks, block_indexes), rank, seed, n_iter)


def variance_along(
    blocks: list[np.ndarray],
    block_indexes: list[tuple[int, int]],
    state: PartialPCA,
    n_components: int,
) -> np.ndarray:
    """Sum over a partition's rows of ``((x - state.mean) . v)**2`` for the leading components.

    With the final components known, this one extra pass gives the variance along each of them
    exactly, removing the bias that truncating the partial states leaves in the singular
    values (the noise each partition's discarded components held along the leading ones).
    """
    matrix = Bands(ordered_bands(blocks, block_indexes))
    matrix.mean = state.mean
    projected = matrix.matmul(state.components[:n_components].T)
    return np.einsum("ij,ij->j", projected, projected)


def state_variance_along(
    state: PartialPCA | None, mean: np.ndarray, components: np.ndarray
) -> np.ndarray:
    """:func:`variance_along` for rows known only by their (earlier, truncated) state."""
    if state is None or state.n_samples == 0:
        return np.zeros(len(components))
    projected = (state.singular_values[:, None] * state.components) @ components.T
    shift = (state.mean - mean) @ components.T
    return np.einsum("ij,ij->j", projected, projected) + state.n_samples * shift**2


def merge(states: list[PartialPCA | None], rank: int | None) -> PartialPCA | None:
    """Merge any number of partial states (``None`` and empty states are skipped).

    Exact for untruncated states; ``rank`` truncates the result to that many components.
    """
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
    _, singular_values, components = np.linalg.svd(stacked, full_matrices=False)
    if rank is not None:
        singular_values, components = singular_values[:rank], components[:rank]
    squared_deviations = sum(s.squared_deviations for s in present) + counts @ deltas**2
    return PartialPCA(n, mean, squared_deviations, singular_values, components)
