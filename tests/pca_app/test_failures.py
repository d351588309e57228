"""The end of a failed process's log (deisa.pca_app.failures.tail): led by the line that says
why it stopped, whatever wrote it."""

from __future__ import annotations

from pathlib import Path

from deisa.pca_app.failures import tail

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
