"""deisa.bridge.scheduler_file: which scheduler file (argument, else $DEISA_SCHEDULER_FILE), and
errors that say which file and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deisa.bridge.scheduler_file import (
    ENV_VAR,
    SchedulerFileError,
    read_scheduler_address,
    resolve_scheduler_file,
)


def test_scheduler_file_address(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"address": "tcp://127.0.0.1:8786", "workers": {}}')
    assert read_scheduler_address(path) == "tcp://127.0.0.1:8786"


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "does not exist"), ("{not json", "is unreadable"), ('{"id": 1}', "holds no scheduler")],
)
def test_scheduler_file_errors(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "s.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SchedulerFileError, match=message):
        read_scheduler_address(path, wait=0.2)


def test_explicit_scheduler_file_wins_over_the_environment() -> None:
    env = {ENV_VAR: "/run/env.json"}
    assert resolve_scheduler_file("mine.json", env) == "mine.json"
    assert resolve_scheduler_file(Path("mine.json"), env) == "mine.json"
    assert resolve_scheduler_file(None, env) == "/run/env.json"
    assert resolve_scheduler_file("", env) == "/run/env.json"


def test_no_scheduler_file_anywhere_names_the_argument_and_the_variable() -> None:
    for env in ({}, {ENV_VAR: ""}):
        with pytest.raises(SchedulerFileError) as info:
            resolve_scheduler_file(None, env)
        assert "scheduler_file" in str(info.value) and ENV_VAR in str(info.value)


def test_bridge_reads_the_scheduler_file_from_the_environment(
    local_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mpi4py import MPI

    from deisa import Adapter, ArraySpec, Bridge, BridgeError

    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps({"address": local_client.scheduler.address}))
    spec = ArraySpec("float64", (2, 3), (0, 0), (2, 3))
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(BridgeError, match=f"rank 0: no scheduler file.*{ENV_VAR}"):
        Bridge(arrays={"u": spec}, comm=MPI.COMM_SELF)
    monkeypatch.setenv(ENV_VAR, str(path))
    with Bridge(arrays={"u": spec}, comm=MPI.COMM_SELF, mode="sync") as bridge:
        bridge.publish("u", np.ones((2, 3)), 0)
        assert bridge.scheduler_address == local_client.scheduler.address
        field = Adapter(local_client, timeout=60)["u"][0].compute()
    assert np.array_equal(field, np.ones((2, 3)))


def test_a_half_written_file_is_waited_for(tmp_path: Path) -> None:
    """The scheduler writes its file in place: a reader may open it empty or half-written."""
    import threading

    path = tmp_path / "scheduler.json"
    path.write_text('{"address": "tls://127.0')  # the scheduler is still writing
    done = threading.Timer(0.3, path.write_text, ['{"address": "tls://127.0.0.1:8786"}'])
    done.start()
    try:
        assert read_scheduler_address(path, wait=60) == "tls://127.0.0.1:8786"
    finally:
        done.join()
    path.write_text("")
    with pytest.raises(SchedulerFileError, match="unreadable"):
        read_scheduler_address(path)  # no wait: what is there now
