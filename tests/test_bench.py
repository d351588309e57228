"""The fragmentation benchmark runs end to end at a toy size (its numbers are not checked here:
performance targets live in the benchmark's own output, never in timed tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, test_env

from bench.fragmentation import VARIANTS, block_grid, check_targets


@pytest.mark.parametrize(
    ("n_blocks", "n_workers", "grid"), [(2, 2, (2, 1)), (8, 2, (4, 2)), (96, 2, (12, 8))]
)
def test_block_grid_is_near_square_with_whole_row_bands_per_worker(
    n_blocks: int, n_workers: int, grid: tuple[int, int]
) -> None:
    assert block_grid(n_blocks, n_workers) == grid


def test_targets_compare_the_lowest_and_highest_levels() -> None:
    seconds = {"dask-ml blocks": (1.0, 2.0), "dask-ml rechunk": (0.5, 0.6), "deisa": (0.1, 0.2)}
    records = [
        {"variant": v, "blocks_per_core": level, "seconds": s, "local_phase_bytes": 0}
        for v, pair in seconds.items()
        for level, s in zip((1, 48), pair, strict=True)
    ]
    passed = {description: ok for description, ok, _ in check_targets(records)}
    assert passed == {
        "deisa at 48 blocks/core within 1.25x of deisa at 1": False,  # 2x
        "deisa at least 10x faster than dask-ml on the blocks at 48 blocks/core": True,
        "deisa faster than dask-ml rechunk at 1 blocks/core": True,
        "deisa faster than dask-ml rechunk at 48 blocks/core": True,
        "zero inter-worker bytes in deisa's local phase": True,
    }


@pytest.mark.timeout(180)
def test_fragmentation_runs_and_writes_table_json_and_plot(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench.fragmentation", "--size", "256", "--repeat", "1"]
    cmd += ["--blocks-per-core", "1", "4", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=test_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "targets:" in proc.stdout
    result = json.loads((tmp_path / "fragmentation.json").read_text())
    assert {(r["variant"], r["blocks_per_core"]) for r in result["records"]} == {
        (v, level) for v in VARIANTS for level in (1, 4)
    }
    for record in result["records"]:
        assert record["explained_variance_rel_error"] < 0.05
        if record["variant"] == "deisa":
            # The blocks never move; only partial states do (bounded rank: the root merge and
            # the refinement run on the workers), each (2 + 10 + 3) x 256 float64 at most.
            assert record["local_phase_bytes"] == 0
            assert record["inter_worker_bytes"] <= 4 * 15 * 256 * 8
    assert (tmp_path / "fragmentation.png").stat().st_size > 0


@pytest.mark.timeout(300)
def test_analytics_runs_and_writes_table_and_json(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench.analytics", "--shapes", "128x600", "1024x32"]
    cmd += ["--repeat", "1", "--accuracy-size", "128", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=test_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "MiB/s/core" in proc.stdout and "target:" in proc.stdout
    result = json.loads((tmp_path / "analytics.json").read_text())
    fitted = {(tuple(r["shape"]), r["variant"]): r for r in result["throughput"]}
    assert len(fitted) == 2 * 5 and not any(r["skipped"] for r in fitted.values())
    assert "MiB/CPU s" in proc.stdout and all(r["mib_per_cpu_s"] > 0 for r in fitted.values())
    assert fitted[(128, 600), "deisa auto"]["solver"] == "randomized"
    assert fitted[(1024, 32), "deisa auto"]["solver"] == "full"
    reference = fitted[(128, 600), "sklearn full"]["explained_variance"]
    for variant in ("deisa auto", "deisa full", "sklearn randomized"):
        ours = fitted[(128, 600), variant]["explained_variance"]
        assert ours == pytest.approx(reference, rel=1e-6), variant
    assert {a["field"] for a in result["accuracy"]} == {"heat", "modes + noise", "power law"}


def test_benchmarks_pin_threads_as_the_launcher_does() -> None:
    from bench._common import PINS
    from deisa.launcher.processes import THREAD_PINS

    assert PINS == THREAD_PINS


def test_benchmark_workers_preload_the_bridge_as_the_launcher_does() -> None:
    from bench._common import worker_preloads
    from deisa.launcher.dask_processes import BRIDGE_WORKER, preload_args

    assert worker_preloads() == preload_args()[1::2] and BRIDGE_WORKER in worker_preloads()
    assert BRIDGE_WORKER not in worker_preloads(False)  # --no-worker-preload


def _record(ranks: int, workers: int) -> dict:
    """A run that follows a known model: 0.1 ms of scheduler CPU per message, registration
    0.05 ms + 2 us per block, heartbeats 3 per step (left out of the model)."""
    per_step = {
        "simulation": 1.0,
        "publish": 1.0,
        "analytics": 3.0 + ranks,
        "other": 5.0 + 4.0 * ranks + 2.0 * workers,
        "heartbeats": 3.0,
    }
    register = 0.05 + 0.002 * ranks
    messages = per_step["simulation"] + per_step["analytics"] + per_step["other"]
    return {
        "ranks": ranks,
        "workers": workers,
        "steps": 10,
        "per_step": per_step,
        "total": 10 * (messages + per_step["heartbeats"]),
        "register_blocks": ranks,
        "register_ms_per_step": register,
        "scheduler_cpu_steady_ms_per_step": register + 0.1 * messages,
    }


def test_extrapolation_recovers_a_linear_model() -> None:
    from bench.scheduler_messages import extrapolate

    records = [_record(r, w) for r in (4, 8, 16) for w in (2, 4)]
    model = extrapolate(records, ranks=1024, workers=64, saturation=1000.0)
    assert model["cpu_ms_per_message"] == pytest.approx(0.1)
    assert model["register_ms"]["per_block"] == pytest.approx(0.002)
    assert model["simulation"]["messages_per_step"] == pytest.approx(1.0)
    assert model["simulation"]["cpu_ms_per_step"] == pytest.approx(0.1 + 0.05 + 0.002 * 1024)
    analytics = 3 + 1024 + 5 + 4 * 1024 + 2 * 64
    assert model["analytics"]["messages_per_step"] == pytest.approx(analytics)
    assert model["analytics"]["cpu_ms_per_step"] == pytest.approx(0.1 * analytics)
    assert model["analytics"]["saturation_ms_per_step"] == pytest.approx(analytics)
    assert model["paper_simulation"]["messages_per_step"] == 2048
    # measured on one node only: the workers do not vary, and get no coefficient
    one_node = extrapolate([_record(r, 2) for r in (4, 16)], ranks=1024, workers=64)
    assert one_node["analytics"]["fit"]["per_worker"] == 0.0
    assert one_node["analytics"]["messages_per_step"] == pytest.approx(
        3 + 1024 + 5 + 4 * 1024 + 2 * 2
    )


@pytest.mark.parametrize(("ranks", "grid"), [(1, (1, 1)), (4, (2, 2)), (6, (3, 2)), (16, (4, 4))])
def test_insitu_benchmark_grid_is_near_square(ranks: int, grid: tuple[int, int]) -> None:
    from bench.insitu_vs_posthoc import global_size, process_grid

    assert process_grid(ranks) == grid
    rows, cols = global_size(1, grid)  # 1 MiB of float64 per rank: 362 x 362 cells
    assert (rows // grid[0], cols // grid[1]) == (362, 362)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("analytics", ["pca", "sum"])
def test_insitu_vs_posthoc_runs_every_mode_and_writes_json(tmp_path: Path, analytics: str) -> None:
    """One tiny size, one repetition, two ranks: the C solver when it is built (post hoc
    included), else the Python solver; every mode runs, the table and the targets print. Both
    analyses give the same result on every side (``same_result``)."""
    cmd = [sys.executable, "-m", "bench.insitu_vs_posthoc", "--sizes", "0.01", "--steps", "2"]
    cmd += ["--period", "1", "--ranks", "2", "--workers", "1", "--timings", "--out", str(tmp_path)]
    cmd += ["--analytics", analytics]
    proc = subprocess.run(cmd, cwd=REPO, env=test_env(), capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target missed, as printed
    assert "target:" in proc.stdout and "publish/iteration" in proc.stdout, proc.stdout
    result = json.loads((tmp_path / "insitu_vs_posthoc.json").read_text())
    (size,) = result["sizes"]
    assert result["settings"]["analytics"] == analytics
    assert result["settings"]["worker_preload"] is True  # as deisa-run's workers
    if analytics == "sum":  # every value of the field is at least the boundary's 0: a sum > 0
        assert all(s > 0 for s in size["runs"]["in situ async"][0]["result"])
    modes = {"no output", "in situ sync", "in situ async"}
    if result["solver"] == "C":
        modes.add("post hoc")
        assert size["same_result"]
        assert size["summary"]["in situ async"]["first_publish_s"] > 0
    assert set(size["runs"]) == modes
    assert result["cores_separate"] == (len(os.sched_getaffinity(0)) >= 3)  # 2 ranks + 1
    if result["solver"] == "C":
        (post,) = size["runs"]["post hoc"]
        assert post["time_to_analysis_cold_s"] >= post["simulation_s"] + post["fsync_s"]
        assert size["posthoc_cold_over_async"] > 0 and size["posthoc_over_async"] > 0
    for mode in modes:
        (run,) = size["runs"][mode]
        assert [len(rank) for rank in run["timings"]["steps"]] == [2, 2], mode
    assert size["summary"]["in situ async"]["first_step_s"] > 0
    assert (tmp_path / "insitu_vs_posthoc.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("ranks", "workers", "cores", "separate", "simulation"),
    [
        (1, 1, [0, 1], True, [0]),  # the layout on 2 cores: the workers share core 1
        (4, 2, [0, 1], False, None),
        (2, 1, [0, 1], False, None),
        (8, 4, list(range(16)), True, list(range(8))),
    ],
)
def test_insitu_cores_plan_pins_ranks_apart_when_a_core_is_left(
    ranks: int, workers: int, cores: list[int], separate: bool, simulation: list[int] | None
) -> None:
    from bench._common import cores_plan

    plan = cores_plan(ranks, workers, cores)
    assert plan["separate"] is separate
    assert plan["simulation"] == simulation
    if separate:
        assert plan["analytics"] == [c for c in cores if c not in simulation]
        assert plan["description"].startswith("separate cores")
    else:
        assert plan["analytics"] is None and plan["description"].startswith("shared cores")


def test_cores_plan_shares_every_core_when_asked() -> None:
    from bench._common import cores_plan, pinned_to

    plan = cores_plan(1, 1, [0, 1, 2, 3], shared=True)
    assert plan["separate"] is False and plan["simulation"] is None
    assert plan["description"].endswith("(as asked)")
    assert pinned_to(None) is None and callable(pinned_to([0]))


def test_drop_from_page_cache_evicts_a_synced_file(tmp_path: Path) -> None:
    import math

    import psutil

    from bench._common import drop_from_page_cache, fsync, page_cache_fraction

    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(4 << 20))
    path.read_bytes()
    cached = page_cache_fraction(path)
    if math.isnan(cached):
        pytest.skip("mincore is not available here")
    assert cached == 1.0
    fsync(path)
    drop_from_page_cache(path)
    mount = max((p for p in psutil.disk_partitions(all=True) if str(path).startswith(p.mountpoint)),
                key=lambda p: len(p.mountpoint))  # fmt: skip
    if mount.fstype == "tmpfs":  # its pages are the file: nothing to drop
        assert page_cache_fraction(path) == 1.0
    else:
        assert page_cache_fraction(path) < 0.5
    path.read_bytes()
    assert page_cache_fraction(path) == 1.0


@pytest.mark.parametrize("maker", ["temporary", "deisa-run"])
def test_tls_credentials_are_private_and_removed(maker: str) -> None:
    from bench._common import tls_credentials

    with tls_credentials(maker=maker) as tls:
        assert tls.directory.stat().st_mode & 0o777 == 0o700
        for path in (tls.ca_file, tls.cert, tls.key):
            assert path.parent.is_relative_to(tls.directory)
            assert path.parent.stat().st_mode & 0o777 == 0o700
            assert path.stat().st_mode & 0o777 == 0o600
        assert "PRIVATE KEY" in tls.key.read_text() and "CERTIFICATE" in tls.cert.read_text()
        assert str(tls.key) in tls.env().values() and "PRIVATE" not in repr(tls.config())
        assert tls.security().require_encryption
    assert not tls.directory.exists()


def _table_rows(stdout: str) -> list[list[str]]:
    """The cells of every row of the tables printed (``bench._common.table``)."""
    return [[c.strip() for c in line.split("|")[1:-1]] for line in stdout.splitlines()
            if line.startswith("| ")]  # fmt: skip


def _run_tls_bench(tmp_path: Path, module: str, *args: str) -> tuple[str, dict]:
    """Run ``bench.<module> --tls`` (or the start-up benchmark) with its own temporary
    directory: the credentials' directory must be gone at the end, the key never printed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", f"bench.{module}", *args, "--out", str(tmp_path)]
    env = {**test_env(), "TMPDIR": str(tmp)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target missed, as printed
    assert "target:" in proc.stdout, proc.stdout
    assert "PRIVATE KEY" not in proc.stdout + proc.stderr
    assert not list(tmp.glob("deisa-bench-tls-*"))
    name = {"tls_startup": "tls_startup"}.get(module, f"{module}_tls")
    return proc.stdout, json.loads((tmp_path / f"{name}.json").read_text())


@pytest.mark.timeout(300)
def test_bandwidth_tls_runs_every_lane_side_by_side(tmp_path: Path) -> None:
    from bench.bandwidth import TLS12, TLS_PATHS

    args = ["--tls", "--tls12", "--sizes", "1", "--repeat", "2"]
    stdout, result = _run_tls_bench(tmp_path, "bandwidth", *args)
    lanes = ("tcp", "tls", TLS12)
    rows = {tuple(cells[:2]) for cells in _table_rows(stdout)}
    assert rows >= {(p, q) for p in TLS_PATHS for q in (*lanes, "tls / tcp", f"{TLS12} / tcp")}
    measured = {(r["path"], r["protocol"]) for r in result["records"] if r["path"] in TLS_PATHS}
    assert measured == {(p, q) for p in TLS_PATHS for q in lanes}
    assert all(len(r.get("seconds", r.get("counts"))) == 2 for r in result["records"])
    info = result["info"]
    for key in ("dask cipher", "dask comm cipher"):
        assert info[f"{key} tls"][1] == "TLSv1.3"
        version = info[f"{key} {TLS12}"]
        assert version[1] == "TLSv1.2" and "ECDHE" in version[0] and "GCM" in version[0]
    # the Bridges send over the Dask connection, TLS included, as to a worker on another node
    assert set(info[f"transport {2**20}"].values()) == {"tcp"}
    assert set(info["openssl speed GB/s"]) == {"aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"}
    assert [t["passed"] for t in result["targets"]] == [None, None]  # 16 MiB not measured


@pytest.mark.timeout(300)
def test_publish_tls_runs_both_protocols_side_by_side(tmp_path: Path) -> None:
    args = ["--tls", "--ranks", "1", "--sizes", "1", "--steps", "4", "--compute", "1"]
    stdout, result = _run_tls_bench(tmp_path, "publish", *args)
    rows = {tuple(cells[:2]) for cells in _table_rows(stdout)}
    assert rows >= {("1", "tcp"), ("1", "tls"), ("1", "tls / tcp")}
    assert sorted(run["protocol"] for run in result["runs"]) == ["tcp", "tls"]
    assert all(run["steps_taken"] == 4 for run in result["runs"])
    assert set(result["summaries"]["1"]) == {"tcp", "tls"}
    assert any(t["target"].startswith("TLS costs <= 15%") for t in result["targets"])


@pytest.mark.timeout(300)
def test_tls_startup_times_both_protocols(tmp_path: Path) -> None:
    from bench.tls_startup import PHASES

    stdout, result = _run_tls_bench(tmp_path, "tls_startup", "--repeats", "1")
    rows = {cells[0] for cells in _table_rows(stdout)}
    assert rows >= {*PHASES, "handshake", "credentials, deisa-run (TLS only)"}
    (run,) = result["runs"]
    for protocol in ("tcp", "tls"):
        times = [run[protocol][phase] for phase in PHASES]
        assert times == sorted(times) and times[0] > 0, protocol
    assert run["tls"]["credentials"] > 0 and "credentials" not in run["tcp"]
    (target,) = result["targets"]
    assert target["passed"] is not None


@pytest.mark.timeout(600)
def test_node_local_runs_both_transports_side_by_side(tmp_path: Path) -> None:
    args = ["--sizes", "1", "--steps", "3", "--repeat", "1", "--ranks", "2", "--compute-ms", "5",
            "--bursts", "2", "--pause-s", "0.2", "--pool-blocks", "4",
            "--max-in-flight", "3"]  # fmt: skip
    cmd = [sys.executable, "-m", "bench.node_local", *args, "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=test_env(), capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target missed, as printed
    assert "target:" in proc.stdout, proc.stdout
    result = json.loads((tmp_path / "node_local.json").read_text())
    runs = {(r["transport"], r["analytics"]): r["transports"] for r in result["rows"]}
    assert runs == {
        ("tcp", "taking"): ["tcp"],
        ("tcp", "behind"): ["tcp"],
        ("shared memory", "taking"): ["shared memory"],
        ("shared memory", "behind"): ["shared memory"],
    }
    assert all(r["sustained_gibs"] > 0 and r["memcpy_gibs"] > 0 for r in result["rows"])
    # the yardstick beside each burst, the copy at the rank's start apart
    assert all(r["memcpy_ms"] > 0 and r["memcpy_start_ms"] > 0 for r in result["rows"])
    # 2 ranks apart from the analytics where 3 cores are there, else sharing them
    assert result["cores_separate"] is (len(os.sched_getaffinity(0)) >= 3), result["cores"]
    # how each sustained block was placed, from the Bridge's debug lines: 3 per rank
    placed = {(r["transport"], r["analytics"]): sum(r["slots"].values()) for r in result["rows"]}
    assert placed == {("tcp", "taking"): 0, ("tcp", "behind"): 0,
                      ("shared memory", "taking"): 6, ("shared memory", "behind"): 6}  # fmt: skip
    assert result["compute_ms"] == 5 and "copy of memcpy" in proc.stdout
    assert result["max_in_flight"] == 3 and {r["max_in_flight"] for r in result["rows"]} == {3}
    # two bursts per run; the warm pool of shared memory holds slots where a burst outran the
    # worker (steps 5 ms apart: some run does), never at the start or in a steady state
    assert sorted({r["burst"] for r in result["rows"]}) == [1, 2]
    shm = [r for r in result["rows"] if r["transport"] == "shared memory"]
    assert any(r["pool_mib"] > 0 for r in shm), shm
    assert result["worker_preload"] is True  # as deisa-run's workers
    assert result["warm_up_s"] > 0  # an unreported first run took the cluster's cold start
    others = result["rows"][0]["start_cpu_others_s"]
    assert others == others and others > 0  # rank 1 measured apart (not NaN)


def test_shm_pages_measures_each_kind_of_page_offered(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench.shm_pages", "--sizes", "1", "--repeat", "2",
           "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=test_env(), capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target missed, as printed
    result = json.loads((tmp_path / "shm_pages.json").read_text())
    rows = {row["pages"]: row for row in result["rows"]}
    assert "4 KiB pages" in rows  # the others where the node offers them
    assert all(r["populate_ms"] > 0 and r["copy_ms"] > 0 for r in rows.values())
    assert len(result["targets"]) == len(rows) and "copy into the slot" in proc.stdout


def test_scheduler_memory_samples_a_real_scheduler_per_box_count_and_writes_json(
    tmp_path: Path,
) -> None:
    cmd = [sys.executable, "-m", "bench.scheduler_memory", "--steps", "30", "--boxes", "1", "3",
           "--every", "10", "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=test_env(), capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target missed, as printed
    result = json.loads((tmp_path / "scheduler_memory.json").read_text())
    rows = {row["boxes"]: row for row in result["rows"]}
    assert list(rows) == [1, 3]
    for row in rows.values():
        assert list(row["rss_mib"]) == ["start", "middle", "end"]
        assert row["messages_per_step"]["publish"] == 1.0  # one deisa_publish a step
        assert row["records_end"]["transition_log"] <= 100  # deisa-run's history lengths
        assert row["deisa_end"]["steps_pending"] <= 2
    assert "B/step middle->end" in proc.stdout and len(result["targets"]) == 2


def test_long_run_prints_memory_at_three_marks_and_writes_json(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench.long_run", "--steps", "60", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=test_env(), capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target missed, as printed
    result = json.loads((tmp_path / "long_run.json").read_text())
    assert list(result["marks"]) == ["start", "middle", "end"]
    assert all(mark["traced_kib"] > 0 for mark in result["marks"].values())
    assert "growth middle -> end" in proc.stdout and "flat memory" in result["targets"]
