"""How a run tells its failures (deisa.pca_app.failures): the end of a failed process's log
(:func:`tail`), led by the line that says why it stopped, whatever wrote it; a process's end in
words; the file a disk error was writing."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deisa.pca_app.failures import exit_in_words, naming_path, tail

BACKTRACE = [f"[host:12345] [{i:2d}] /lib/libc.so.6(+0x{i:x}) [0x7f00]" for i in range(20)]


def log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "simulation.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_cpp_exceptions_what_leads_even_under_a_backtrace(tmp_path: Path) -> None:
    """An ADIOS2 code stopped by the deisa engine: std::terminate's what() line, then
    OpenMPI's backtrace, longer than the tail."""
    what = "  what():  deisa ADIOS2 engine: unknown parameter `BuferNb': did you mean `BufferNb'?"
    path = log(tmp_path, "step 0", "terminate called after throwing an instance of "
               "'std::invalid_argument'", what, "[host:12345] *** Process received signal ***",
               *BACKTRACE)  # fmt: skip
    text = tail(path)
    assert text.splitlines()[0] == "  " + what.strip()
    assert "what()" not in "\n".join(text.splitlines()[1:])  # pushed out of the tail


def test_the_last_reason_leads_python_or_printed_by_the_code(tmp_path: Path) -> None:
    python = log(tmp_path, "Traceback (most recent call last):", '  File "x.py"',
                 "ValueError: bad", *BACKTRACE)  # fmt: skip
    assert tail(python).splitlines()[0] == "  ValueError: bad"
    printed = log(tmp_path, "ValueError: earlier",
                  "deisa ADIOS2 engine: variable `L' is a local array", *BACKTRACE)  # fmt: skip
    assert tail(printed).splitlines()[0] == "  deisa ADIOS2 engine: variable `L' is a local array"


def test_no_reason_no_lead(tmp_path: Path) -> None:
    text = tail(log(tmp_path, "killed", "what a day: fine"))
    assert text.splitlines() == ["    killed", "    what a day: fine"]


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
