"""The analytics scripts: one PCA script for both sources (live stream, saved files).

Live against replayed, on the same run: tests/test_replay_live.py; in situ against post hoc with
the C solver: tests/test_pdi_plugin.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.decomposition import PCA

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    ("script", "options"),
    [("pca.py", ["--scheduler-file", "--replay", "--out"]), ("steered_pca.py", ["--out"])],
)
def test_analytics_script_help(script: str, options: list[str]) -> None:
    cmd = [sys.executable, str(EXAMPLES / script), "--help"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert all(option in proc.stdout for option in ["--scheduler-file", *options])


def test_pca_script_needs_a_source() -> None:
    cmd = [sys.executable, str(EXAMPLES / "pca.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "give --scheduler-file (live) or --replay FILES" in proc.stderr


def test_pca_script_replays_a_file_step_by_step(tmp_path: Path) -> None:
    """``--replay``: every saved step, with its step number, as exact PCA gives it."""
    import h5py

    rng = np.random.default_rng(0)
    field = rng.standard_normal((3, 40, 12)) * np.linspace(3, 0.5, 12)
    with h5py.File(tmp_path / "run.h5", "w") as f:
        f.create_dataset("gtemp", data=field, chunks=(1, 20, 6))
        f.create_dataset("step", data=np.array([0, 10, 20], dtype=np.int32))
    cmd = [sys.executable, str(EXAMPLES / "pca.py"), "--replay", "run.h5", "--out", "out.json"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["steps"] == [0, 10, 20]
    expected = [PCA(n_components=2).fit(step).explained_variance_ for step in field]
    np.testing.assert_allclose(result["explained_variance"], expected, rtol=1e-10)
