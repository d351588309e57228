"""bench.tls_link runs end to end at a toy size: two network namespaces joined by a shaped veth
link, a TCP and a TLS cluster on one side, the ranks on the other (its numbers are not checked
here: the 15 % target lives in the benchmark's own output)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, test_env

from bench.tls_link import refusal


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=60)
    return {line.split()[0] for line in out.stdout.splitlines() if line.startswith("dtls")}


@pytest.mark.timeout(600)
def test_tls_link_sends_over_a_shaped_link_both_protocols(tmp_path: Path) -> None:
    reason = refusal()
    if reason is not None:
        pytest.skip(f"bench.tls_link cannot run here: {reason}")
    before = _namespaces()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = ["--rates", "10", "--sizes", "1", "--repeat", "2", "--ranks", "2"]
    cmd = [sys.executable, "-m", "bench.tls_link", *args, "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env={**test_env(), "TMPDIR": str(tmp)},
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: the target missed, as printed
    assert "target:" in proc.stdout and "| link Gb/s |" in proc.stdout, proc.stdout
    assert "PRIVATE KEY" not in proc.stdout + proc.stderr
    assert not list(tmp.iterdir())  # credentials and work directory removed
    assert _namespaces() == before  # the two "nodes" deleted
    result = json.loads((tmp_path / "tls_link.json").read_text())
    (record,) = result["records"]
    assert (record["rate_gbit"], record["mib"], record["ranks"]) == (10, 1, 2)
    assert record["tcp"]["steps"] == record["tls"]["steps"] == 2
    assert record["tcp"]["gib_per_s"] > 0 and record["tls"]["gib_per_s"] > 0
    assert result["links"] == {"10": "tbf rate 10gbit"}
    assert result["cipher"]["tls"][1] == "TLSv1.3" and result["cipher"]["tcp"] is None
    assert set(result["kernel_tls"]) >= {"ssl.OP_ENABLE_KTLS", "kernel tls ULP"}
    (target,) = result["targets"]
    assert target["passed"] is not None
