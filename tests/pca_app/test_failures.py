"""How a run tells its failures (deisa.pca_app.failures): a process's end in words, the file a
disk error was writing."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deisa.pca_app.failures import exit_in_words, naming_path


def test_a_signal_is_named_as_a_signal() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc.send_signal(signal.SIGKILL)
    assert exit_in_words(proc.wait()) == "killed by SIGKILL"  # not "exit status -9"
    assert exit_in_words(-signal.SIGTERM) == "killed by SIGTERM"
    assert exit_in_words(3) == "exit status 3"
    assert exit_in_words(0) == "exit status 0"


def test_a_full_disk_names_the_file() -> None:
    """/dev/full: every write fails with ENOSPC, whose error names no file (it is the write's,
    not the open's)."""
    with pytest.raises(OSError) as raw, open("/dev/full", "wb", buffering=0) as out:
        out.write(b"x")
    assert raw.value.filename is None  # what a person read before
    full = Path("/dev/full")
    with pytest.raises(OSError) as named, naming_path(full), open(full, "wb", buffering=0) as out:
        out.write(b"x")
    assert named.value.errno == raw.value.errno
    assert "No space left on device: '/dev/full'" in str(named.value)
    assert named.value.__cause__ is not None


def test_an_error_that_names_its_file_is_left_as_it_is(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "file"
    with pytest.raises(FileNotFoundError) as raised, naming_path(tmp_path / "other"):
        missing.write_text("x")
    assert raised.value.filename == str(missing)
