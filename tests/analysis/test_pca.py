"""Tests of deisa.IncrementalPCA against scikit-learn's exact PCA, on a 2-process cluster."""

from __future__ import annotations

import itertools

import dask.array as da
import numpy as np
import pytest
from conftest import STARTUP, scatter_blocks
from dask.core import flatten
from distributed import Client, get_task_stream
from distributed.utils_test import poll_for
from sklearn.decomposition import PCA

import deisa.analysis._pca_kernels
import deisa.analysis.pca
from deisa.analysis.pca import IncrementalPCA

pytestmark = pytest.mark.timeout(300)

RTOL, ATOL = 1e-8, 1e-10
ROW_CHUNKS = (40, 25, 35, 20, 30, 50)  # uneven, 200 rows
COL_CHUNKS = (7, 5)  # 12 features
N_COMPONENTS = 4


@pytest.fixture(scope="module")
def client(local_client: Client) -> Client:
    return local_client


def make_data(n_rows: int = sum(ROW_CHUNKS), seed: int = 0) -> np.ndarray:
    """Correlated features with distinct variances, so components are well defined."""
    rng = np.random.default_rng(seed)
    n_features = sum(COL_CHUNKS)
    scales = np.linspace(5.0, 0.5, n_features)
    mixing = np.linalg.qr(rng.standard_normal((n_features, n_features)))[0]
    return (rng.standard_normal((n_rows, n_features)) * scales) @ mixing + 3.0


def place(client: Client, data: np.ndarray, name: str, by_row_band: bool = True) -> da.Array:
    workers = sorted(client.nthreads())

    def owner(i: int, j: int) -> str:
        if by_row_band:
            return workers[i * len(workers) // len(ROW_CHUNKS)]
        return workers[j % len(workers)]

    return scatter_blocks(client, data, (ROW_CHUNKS, COL_CHUNKS), owner, name)


def assert_matches_pca(model: IncrementalPCA, data: np.ndarray) -> None:
    reference = PCA(n_components=model.n_components_, svd_solver="full").fit(data)
    signs = np.sign(np.sum(model.components_ * reference.components_, axis=1))
    np.testing.assert_allclose(
        model.components_ * signs[:, None], reference.components_, rtol=RTOL, atol=1e-9
    )
    for attribute in (
        "explained_variance_",
        "explained_variance_ratio_",
        "singular_values_",
        "mean_",
        "noise_variance_",
    ):
        np.testing.assert_allclose(
            getattr(model, attribute),
            getattr(reference, attribute),
            rtol=RTOL,
            atol=ATOL,
            err_msg=attribute,
        )
    np.testing.assert_allclose(model.var_, data.var(axis=0), rtol=RTOL, atol=ATOL)
    assert model.n_samples_seen_ == len(data)


def test_fit_dask_array_equals_exact_pca(client: Client) -> None:
    data = make_data()
    x = place(client, data, "exact")
    model = IncrementalPCA(n_components=N_COMPONENTS).fit(x)
    assert_matches_pca(model, data)
    assert model.bytes_moved_ == 0
    np.testing.assert_array_equal(x.compute(), data)  # the reduction centred a copy, not them


def test_fit_with_spread_row_bands_reports_bytes_moved(client: Client) -> None:
    data = make_data()
    model = IncrementalPCA(n_components=N_COMPONENTS).fit(place(client, data, "spread", False))
    assert_matches_pca(model, data)
    assert model.bytes_moved_ == sum(ROW_CHUNKS) * COL_CHUNKS[1] * 8  # smaller column block


def test_fit_equals_chained_partial_fit(client: Client) -> None:
    steps = [make_data(seed=s) for s in range(3)]
    chained = IncrementalPCA(n_components=N_COMPONENTS, partition_policy="factoring")
    for t, step in enumerate(steps):
        chained.partial_fit(place(client, step, f"step-{t}"))
    whole = np.concatenate(steps)
    assert_matches_pca(chained, whole)
    direct = IncrementalPCA(n_components=N_COMPONENTS).fit(whole)
    np.testing.assert_allclose(
        np.abs(chained.components_), np.abs(direct.components_), rtol=RTOL, atol=1e-9
    )


def test_merge_of_many_uneven_states_is_exact() -> None:
    data = make_data()
    bounds = [0, 3, 40, 41, 120, 200]  # a 1-row state has no spread, only a mean
    states = [
        deisa.analysis._pca_kernels.reduce_rows(data[a:b], None, 0, 2)
        for a, b in itertools.pairwise(bounds)
    ]
    merged = deisa.analysis._pca_kernels.merge([None, *states], None)
    assert merged is not None and merged.n_samples == len(data)
    centred = data - data.mean(axis=0)
    _, singular_values, components = np.linalg.svd(centred, full_matrices=False)
    np.testing.assert_allclose(merged.mean, data.mean(axis=0), rtol=RTOL)
    np.testing.assert_allclose(merged.squared_deviations, (centred**2).sum(axis=0), rtol=RTOL)
    np.testing.assert_allclose(merged.singular_values, singular_values, rtol=RTOL)
    np.testing.assert_allclose(
        np.abs(merged.components @ components.T), np.eye(len(components)), atol=1e-8
    )


def test_merge_tree_wider_than_its_fan_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three workers with a fan-in of 2: one merge task across workers, the root on the client."""
    from conftest import THREAD_PINS
    from distributed import LocalCluster

    monkeypatch.setattr(deisa.analysis.pca, "_MERGE_FAN_IN", 2)
    blas = {k: v for k, v in THREAD_PINS.items() if k.endswith("_NUM_THREADS")}
    data = make_data()
    with (
        LocalCluster(
            n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0", env=blas
        ) as cluster,
        Client(cluster) as client,
    ):
        x = place(client, data, "three-workers")
        assert len({w for ws in client.who_has(x).values() for w in ws}) == 3
        model = IncrementalPCA(n_components=N_COMPONENTS, partition_policy="factoring")
        assert_matches_pca(model.fit(x), data)


def test_fit_numpy_in_batches_equals_exact_pca() -> None:
    data = make_data()
    assert_matches_pca(IncrementalPCA(n_components=N_COMPONENTS, batch_size=17).fit(data), data)
    full = IncrementalPCA().fit(data)  # n_components=None keeps min(n_samples, n_features)
    assert full.n_components_ == data.shape[1] and full.noise_variance_ == 0.0


def test_fit_lazy_dask_array_is_persisted(client: Client) -> None:
    data = make_data()
    lazy = da.from_array(data, chunks=(50, 12)) * 1.0
    with get_task_stream(client) as stream:
        model = IncrementalPCA(n_components=N_COMPONENTS).fit(lazy)
    assert_matches_pca(model, data)
    # each block of the lazy array computed once, on the workers (persisted for the fit, not
    # computed again per partition or pass), and the persisted copy let go of afterwards
    computed = [tuple(t["key"]) for t in stream.data if t["key"][0] == lazy.name]
    assert sorted(computed) == sorted(flatten(lazy.__dask_keys__()))
    assert all(t["worker"] in client.nthreads() for t in stream.data)

    def held(name: str = lazy.name) -> list[object]:
        return client.run_on_scheduler(
            lambda dask_scheduler: [k for k in dask_scheduler.tasks if k[0] == name]
        )

    poll_for(lambda: not held(), timeout=STARTUP)


def test_transform_matches_sklearn_up_to_sign(client: Client) -> None:
    data = make_data()
    x = place(client, data, "transform")
    for whiten in (False, True):
        model = IncrementalPCA(n_components=N_COMPONENTS, whiten=whiten).fit(x)
        reference = PCA(n_components=N_COMPONENTS, whiten=whiten, svd_solver="full").fit(data)
        ours, theirs = model.transform(x).compute(), reference.transform(data)
        signs = np.sign(np.sum(ours * theirs, axis=0))
        np.testing.assert_allclose(ours * signs, theirs, rtol=1e-7, atol=1e-8)
        back = model.inverse_transform(model.transform(data))
        np.testing.assert_allclose(back, reference.inverse_transform(theirs), atol=1e-8)


def test_randomized_solver_is_close_on_low_rank_data(client: Client) -> None:
    rng = np.random.default_rng(1)
    low_rank = 10.0 * rng.standard_normal((200, 3)) @ rng.standard_normal((3, 12))
    data = low_rank + 1e-3 * rng.standard_normal((200, 12))
    model = IncrementalPCA(n_components=2, copy=False, svd_solver="randomized", random_state=0)
    model.fit(place(client, data, "randomized"))
    reference = PCA(n_components=2, svd_solver="full").fit(data)
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_, rtol=1e-6)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_components": 13}, r"n_components=13 must be ≤ n_features=12"),
        ({"n_components": 0}, r"n_components=0 must be an integer ≥ 1"),
        ({"svd_solver": "arpack"}, r"svd_solver='arpack' must be one of"),
    ],
)
def test_invalid_parameters_are_named(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        IncrementalPCA(**params).fit(make_data())


def test_too_few_samples_is_named() -> None:
    with pytest.raises(ValueError, match=r"n_components=4 must be ≤ n_samples_seen=3"):
        IncrementalPCA(n_components=4).fit(make_data()[:3])


def test_feature_count_must_not_change() -> None:
    model = IncrementalPCA(n_components=2).partial_fit(make_data())
    with pytest.raises(ValueError, match=r"n_features=11"):
        model.partial_fit(make_data()[:, :11])


# ---------------------------------------------------------------- regimes (auto, bounded rank)


def modes_plus_noise(n_rows: int, n_features: int, seed: int = 0) -> np.ndarray:
    """6 modes well above a white-noise floor, offset by 3 (the mean must not matter)."""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((n_rows, 6)) * np.geomspace(10, 1, 6)
    modes = np.linalg.qr(rng.standard_normal((n_features, 6)))[0].T
    return scores @ modes + 0.05 * rng.standard_normal((n_rows, n_features)) + 3.0


def heat_like(n_rows: int, n_features: int) -> np.ndarray:
    """A diffused hot disc, as the heat solver makes (smooth, no noise floor above rounding)."""
    from deisa_simulation.heat import DIFFUSION, initial_field

    u = np.zeros((n_rows + 2, n_features + 2))
    u[1:-1, 1:-1] = initial_field((n_rows, n_features), (0, 0), (n_rows, n_features))
    for _ in range(30):
        c = u[1:-1, 1:-1]
        neighbours = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
        u[1:-1, 1:-1] = c + DIFFUSION * (neighbours - 4 * c)
    return u[1:-1, 1:-1].copy()


@pytest.mark.parametrize(
    ("n_features", "solver", "regime", "state_rank"),
    [
        (500, "auto", "full", 500),  # at the threshold: exact, every component kept
        (501, "auto", "randomized", 4 + 10),  # above: n_components + 10
        (501, "full", "full", 501),
        (64, "randomized", "randomized", 4 + 10),
    ],
)
def test_auto_is_exact_below_the_threshold_and_bounded_above(
    n_features: int, solver: str, regime: str, state_rank: int
) -> None:
    data = modes_plus_noise(600, n_features)
    model = IncrementalPCA(n_components=4, svd_solver=solver, random_state=0).fit(data)
    assert model.svd_solver_ == regime
    assert model._state.components.shape == (state_rank, n_features)
    assert model.components_.shape == (4, n_features)


def test_bounded_state_memory_is_linear_in_features() -> None:
    n_features = 3000
    model = IncrementalPCA(n_components=4, batch_size=100, random_state=0)
    model.fit(modes_plus_noise(400, n_features))
    # (k + 10) components, mean, squared deviations, singular values: no features**2 anywhere
    assert model._state.__sizeof__() <= 8 * (4 + 10 + 3) * n_features + 1024


@pytest.mark.parametrize("field", ["modes plus noise", "heat"])
@pytest.mark.parametrize("batches", [2, 32])
def test_bounded_rank_explained_variance_within_1e_6(field: str, batches: int) -> None:
    """Accuracy target of the default solver above 500 features, however many partial states."""
    from scipy.linalg import subspace_angles

    data = modes_plus_noise(640, 640) if field != "heat" else heat_like(640, 640)
    model = IncrementalPCA(n_components=4, batch_size=640 // batches, random_state=0).fit(data)
    assert model.svd_solver_ == "randomized"
    reference = PCA(n_components=4, svd_solver="full").fit(data)
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_, rtol=1e-6)
    np.testing.assert_allclose(
        model.explained_variance_ratio_, reference.explained_variance_ratio_, rtol=1e-6
    )
    assert subspace_angles(model.components_.T, reference.components_.T).max() < 1e-3


def test_bounded_rank_on_the_cluster_matches_exact_pca(client: Client) -> None:
    data = modes_plus_noise(sum(ROW_CHUNKS), 520)
    x = scatter_blocks(
        client,
        data,
        (ROW_CHUNKS, (260, 260)),
        lambda i, _j: sorted(client.nthreads())[i % 2],  # bands alternate between workers
        "bounded-on-cluster",
    )
    pending = IncrementalPCA(n_components=3, random_state=0).submit_fit(x)
    assert pending.progress()[0] in ("local reductions", "merges", "refinement", "client merge")
    model = pending.result()
    assert pending.done() and pending.progress() == ("client merge", 0, 1)
    assert model.svd_solver_ == "randomized" and model.bytes_moved_ == 0
    reference = PCA(n_components=3, svd_solver="full").fit(data)
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_, rtol=1e-6)
    np.testing.assert_array_equal(x.compute(), data)  # blocks read in place, never modified


def test_bounded_rank_partial_fit_follows_a_stream(client: Client) -> None:
    steps = [modes_plus_noise(sum(ROW_CHUNKS), 520, seed=s) for s in range(3)]
    model = IncrementalPCA(n_components=3, random_state=0)
    for t, step in enumerate(steps):
        model.partial_fit(
            scatter_blocks(
                client, step, (ROW_CHUNKS, (520,)), lambda i, _j: sorted(client.nthreads())[i % 2],
                f"bounded-stream-{t}",
            )
        )  # fmt: skip
    reference = PCA(n_components=3, svd_solver="full").fit(np.concatenate(steps))
    assert model.n_samples_seen_ == 3 * sum(ROW_CHUNKS)
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_, rtol=1e-4)


@pytest.mark.parametrize("blocks_per_band", [1, 3])
def test_column_statistics_read_the_band_in_place(blocks_per_band: int) -> None:
    """The first pass allocates a chunk of scratch and its results, never a copy of a band
    (it once concatenated the first band whole to read its first row: 12 % of a fit)."""
    import tracemalloc

    kernels = deisa.analysis._pca_kernels
    band = np.random.default_rng(0).random((2048, 1536))  # 24 MiB
    blocks = np.split(band, blocks_per_band, axis=1)
    matrix = kernels.Bands([blocks])
    sketch = np.random.default_rng(1).standard_normal((band.shape[1], 14))
    tracemalloc.start()
    try:
        mean, squared_deviations, product = matrix.column_stats(sketch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < kernels.CHUNK_BYTES + product.nbytes + band.nbytes // 8
    np.testing.assert_allclose(mean, band.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(squared_deviations, band.var(axis=0) * len(band), rtol=1e-10)
    centred = band - band.mean(axis=0)
    np.testing.assert_allclose(product, centred @ sketch, rtol=1e-9, atol=1e-9)


def test_float32_blocks_stay_float32_and_match_exact_pca(client: Client) -> None:
    """float32 data is reduced in float32 (no float64 copy of a partition), shifted by the
    centre before each product, so even a large offset keeps the variance within 1e-6."""
    data = (modes_plus_noise(sum(ROW_CHUNKS), 520) + 300.0).astype(np.float32)
    block = data[:40]
    matrix = deisa.analysis._pca_kernels.Bands([[block]])
    assert matrix.dtype == np.float32 and matrix.bands[0][0] is block
    reference = PCA(n_components=3, svd_solver="full").fit(data.astype(np.float64))
    x = scatter_blocks(
        client,
        data,
        (ROW_CHUNKS, (260, 260)),
        lambda i, _j: sorted(client.nthreads())[i % 2],
        "bounded-float32",
    )
    for model in (
        IncrementalPCA(n_components=3, random_state=0).fit(x),
        IncrementalPCA(n_components=3, batch_size=50, random_state=0).fit(data),
    ):
        assert model.svd_solver_ == "randomized"
        np.testing.assert_allclose(
            model.explained_variance_, reference.explained_variance_, rtol=1e-6
        )
        np.testing.assert_allclose(model.mean_, reference.mean_, rtol=1e-12)
        np.testing.assert_allclose(model.var_, data.astype(np.float64).var(axis=0), rtol=1e-9)
