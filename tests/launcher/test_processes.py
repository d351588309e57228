"""deisa.launcher.processes: the one wait helper, and the children's logs."""

from __future__ import annotations

import io
import signal
import sys
from pathlib import Path

import pytest
from conftest import STARTUP

from deisa.launcher import processes
from deisa.pca_app.failures import PipelineError

# -- waiting at start-up --------------------------------------------------------------------------


def test_wait_until_returns_once_ready(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    polls = []

    def ready() -> bool:
        polls.append(1)
        if len(polls) == 3:
            marker.touch()
        return marker.exists()

    procs = processes.ProcessSet(tmp_path, {})
    processes.wait_until(ready, "the marker", STARTUP, procs=procs, interval=0.01)
    assert len(polls) == 3


def test_wait_until_names_what_it_awaited_on_timeout(tmp_path: Path) -> None:
    procs = processes.ProcessSet(tmp_path, {})
    with pytest.raises(PipelineError, match=r"timed out after 0 s waiting for the marker"):
        processes.wait_until(lambda: False, "the marker", 0.2, procs=procs, interval=0.01)


def test_wait_until_raises_when_a_signal_came(tmp_path: Path) -> None:
    signals = processes.Signals("test")
    signals.received = signal.SIGTERM
    with pytest.raises(processes.Interrupted) as interrupted:
        processes.wait_until(
            lambda: False,
            "the marker",
            60,
            procs=processes.ProcessSet(tmp_path, {}),
            check=signals.check,
        )
    assert interrupted.value.signum == signal.SIGTERM


def test_wait_until_stops_when_a_process_exits(tmp_path: Path) -> None:
    procs = processes.ProcessSet(tmp_path, processes.child_env())
    try:
        procs.start("scheduler", ["sh", "-c", "echo 'ValueError: no port'; exit 3"])
        with pytest.raises(PipelineError) as failure:
            processes.wait_until(lambda: False, "the marker", STARTUP, procs=procs)
    finally:
        procs.stop()
    message = str(failure.value)
    assert message.startswith("scheduler exited (exit status 3) while waiting for the marker:")
    assert "ValueError: no port" in message


def test_echoed_output_reaches_the_log_and_the_terminal(tmp_path: Path) -> None:
    terminal = io.StringIO()
    procs = processes.ProcessSet(tmp_path, processes.child_env())
    try:
        code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"
        child = procs.start("analytics", [sys.executable, "-c", code], echo=terminal)
        processes.wait_until(lambda: child.popen.poll() is not None, "the exit", STARTUP)
        child.join_echo()
    finally:
        procs.stop()
    assert child.popen.returncode == 0
    for text in (terminal.getvalue(), (tmp_path / "analytics.log").read_text()):
        assert "to stdout" in text and "to stderr" in text


# -- a failure found while the main thread waits in a call ---------------------------------------


def test_watched_interrupts_a_call_that_would_wait_on() -> None:
    """Issue 54: a client in distributed's reconnect waits for its whole timeout, where the
    launcher's checks did not run; the watch raises the failure it finds in the main thread,
    past an ``except Exception`` that would swallow it (the analytics' ``deisa_stats``)."""
    import threading
    import time

    failed_at = time.monotonic() + 1.0
    failure = PipelineError("scheduler at tcp://127.0.0.1:1 failed (killed by SIGKILL)")
    stuck = threading.Event()  # never set: a call that would wait on
    started = time.monotonic()
    watch = processes.watched(lambda: failure if time.monotonic() > failed_at else None, 0.1)
    with pytest.raises(PipelineError, match="scheduler at"), watch:
        while True:  # as a call whose caller takes any failure as "no answer", and asks again
            try:
                stuck.wait(STARTUP)
            except Exception:
                continue
    assert time.monotonic() - started < STARTUP / 2
    # a signal that arrives late is taken, disarmed, not SIGUSR1's default (which kills)
    signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
    time.sleep(0.1)
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)


def test_watched_lets_a_block_without_failure_end() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with processes.watched(lambda: None, 0.01):
        pass
    assert signal.getsignal(signal.SIGUSR1) == before  # given back
