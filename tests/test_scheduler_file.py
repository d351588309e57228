"""Scheduler file errors say which file and what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from deisa.bridge.scheduler_file import SchedulerFileError, read_scheduler_address


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
