"""The local run of ``deisa-run``: the whole pipeline on this machine, on loopback only.

:func:`run_pipeline` starts a Dask scheduler (with a dashboard only with ``--dashboard``: its
HTTP servers answer ``/health`` alone otherwise) and ``workers`` workers, all listening on
127.0.0.1 only, in a private temporary directory of the run (:mod:`.private_tmp`), then the
analytics and the simulation under ``mpirun`` with Open MPI kept on shared memory and loopback
(``mpi.env`` of the defaults), and stops every process it started, on success, failure or
signal.

The simulation is the heat demo (the C or the Python solver), or the user's command after
``--``; the analytics is the built-in PCA of ``--array`` (in this process, with a progress bar
and a report), or the user's ``--analytics`` command (a process of its own). The user's
processes get the scheduler file in ``DEISA_SCHEDULER_FILE`` and the deisa PDI plugin in
``PDI_PLUGIN_PATH``. Each process logs to ``<output>/logs/<part>.log``; the user's analytics
also prints to the terminal. The first part that fails (the simulation, the analytics, a
worker, the scheduler) is named, with the tail of its log, and everything else is stopped: a
failing analytics stops the simulation, which would otherwise wait on flow control. Once one
of the simulation and the user's analytics has exited 0, the other has ``--timeout`` seconds to
exit too (an analytics that stops reading early leaves the simulation that long to finish).
Should this process die without stopping them (SIGKILL), its guardian (:mod:`.guardian`)
stops every process of the run and removes its temporary directory and credentials.
A closing line gives the wall time and, per array, the steps published and taken and the
bytes published (the ``totals`` of the scheduler extension's ``deisa_stats``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ..bridge.scheduler_file import SchedulerFileError, read_scheduler_address
from ..pca_app.driver import Analysis, drive, hold, stream_stats, ways
from ..pca_app.failures import PipelineError, exit_in_words, naming_path, tail
from ..pca_app.report import ways_in_words
from ..pca_app.stall import StepWatch
from .dask_processes import (
    LOOPBACK,
    dashboard_available,
    history_env,
    http_env,
    workers_connected,
)
from .defaults import UsageError
from .guardian import Guardian, start_guardian
from .plan import RunPlan
from .private_tmp import PrivateTmp, make_private_tmp
from .processes import Child, ProcessSet, Signals, child_env, wait_until, watched
from .security import Credentials, make_credentials, output_problem
from .solver import SCHEDULER_FILE_OVERRIDE
from .ucx import UCX

logger = logging.getLogger(__name__)


def run_pipeline(plan: RunPlan, signals: Signals, out: IO[str] = sys.stdout) -> None:
    """Start the plan's scheduler, workers, analytics and simulation, wait for them, stop
    everything.

    Parameters
    ----------
    plan
        A local run's (:func:`deisa.launcher.plan.make_plan` of the settings of
        ``deisa-run``).
    signals
        Installed by the caller; every wait checks it, and its second signal kills the
        children started here.
    out
        Where the table (built-in analytics), the user's analytics output and the closing
        summary go.

    Raises
    ------
    PipelineError
        The simulation, the analytics, a worker or the scheduler failed; the message names it
        first, with the tail of its log.
    Interrupted
        A signal came; every process was stopped.
    UsageError
        The output directory or the temporary directory is not this account's alone.
    """
    scheduler_file = _prepare_output(plan.output)
    # stops every process of the run and removes its files if this one dies without doing so
    guardian = start_guardian(plan.stop_timeout)
    try:
        tmp = make_private_tmp()  # every process's TMPDIR and Dask scratch: never a shared one
        guardian.remove_on_exit(tmp.path)
        try:
            _run_in_tmp(plan, signals, out, scheduler_file, tmp, guardian)
        finally:
            tmp.remove()
    finally:
        guardian.close()


def _run_in_tmp(
    plan: RunPlan,
    signals: Signals,
    out: IO[str],
    scheduler_file: Path,
    tmp: PrivateTmp,
    guardian: Guardian,
) -> None:
    """:func:`run_pipeline` in the run's private temporary directory ``tmp``: the run's
    :class:`~deisa.launcher.plan.RunPlan` started, each process known to its ``guardian``."""
    credentials = None
    procs = ProcessSet(plan.output / "logs", child_env(), plan.stop_timeout)
    client = None
    started = time.perf_counter()
    try:
        if plan.tls:
            guardian.remove_on_exit(plan.output / "tls")
        credentials = _credentials(plan)  # where the plan's command lines name them
        secure = {**guardian.env(), **(credentials.env() if credentials is not None else {})}
        # UCX: `--protocol ucx` in the plan's command lines, in place of TLS (--insecure)
        if plan.protocol == "ucx":  # every process, this one's client included
            secure = {**secure, **UCX().env()}
            os.environ.update(secure)
        secure = {**secure, **tmp.env(), **http_env(plan.dashboard)}
        # distributed's histories shortened (a long run's memory level), unless the user set them
        procs.env = child_env(secure, keep=history_env(plan.dashboard))
        signals.on_second = procs.kill
        _announce(plan, scheduler_file)
        client = _start_dask(plan, procs, signals, scheduler_file, credentials)
        env = {p.name: child_env({**secure, **p.environment()}, keep=plan.mpi_env)
               for p in plan.processes}  # fmt: skip
        analytics = None
        if plan.analytics is not None:
            analytics = procs.start("analytics", plan.analytics.argv, env["analytics"], echo=out)
        signals.check()
        mpirun = [*plan.mpirun, "-np", str(plan.simulation.tasks)]
        sim = procs.start("simulation", [*mpirun, *plan.simulation.argv], env["simulation"])
        if analytics is None:
            _builtin_analytics(plan, client, procs, sim, signals, out)
        else:
            _wait_for_user_analytics(plan, procs, sim, analytics, signals)
            analytics.join_echo()
        print(_summary(client, time.perf_counter() - started), file=out)
    finally:
        if client is not None:  # distributed logs its reconnect's cancellation, as an error
            with contextlib.suppress(Exception), _quiet("distributed.client", "distributed.utils"):
                client.close(timeout=5)
        procs.stop()
        signals.on_second = None
        if credentials is not None:
            credentials.remove()


@contextlib.contextmanager
def _quiet(*names: str) -> Iterator[None]:
    """The loggers ``names`` silent in the block."""
    logs = [logging.getLogger(name) for name in names]
    disabled = [log.disabled for log in logs]
    for log in logs:
        log.disabled = True
    try:
        yield
    finally:
        for log, was in zip(logs, disabled, strict=True):
            log.disabled = was


def _quiet_distributed() -> None:
    """Unless ``-v``: distributed's own logs in this process silent (its client's tracebacks
    of a connection that closed, when a part of the run dies: ``deisa-run`` names the part
    itself, in one line). Its configuration set their levels at its import, hence after it."""
    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        for name in ("distributed", "distributed.client"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _announce(plan: RunPlan, scheduler_file: Path) -> None:
    """Write the plan's files into the output; say what runs (and, for a user's command,
    the plugins found and the scheduler file it is given)."""
    for name, text in plan.files.items():
        with naming_path(plan.output / name):
            (plan.output / name).write_text(text)
    if plan.simulation.user:
        for what, _, plugin in plan.found:
            print(f"deisa-run: {what}: {plugin.origin}", file=sys.stderr)
        print(
            f"deisa-run: the scheduler file is {scheduler_file.absolute()}: it overrides the one "
            f"a PDI YAML names (scheduler_file, scheduler_info) through {SCHEDULER_FILE_OVERRIDE}",
            file=sys.stderr,
        )
    workers = plan.workers
    print(
        f"deisa-run: {plan.simulation.tasks} ranks of {plan.description}, {workers.tasks} "
        f"workers x {workers.cores} threads; output in {plan.output}",
        file=sys.stderr,
    )


def _credentials(plan: RunPlan) -> Credentials | None:
    """The run's TLS credentials, made in ``<output>/tls``; ``None`` (and one warning line)
    with ``--insecure``."""
    if plan.tls:
        return make_credentials(plan.output / "tls")
    if plan.protocol == "ucx":
        warning = (
            "speak UCX without authentication, and distributed-ucxx's listeners take every "
            "interface: any account on this machine, and any machine that reaches it, can "
            "connect to them and run code as you"
        )
    else:
        warning = (
            "speak plain TCP without authentication; any account on this machine can connect "
            "to them and run code as you"
        )
    print(f"deisa-run: warning: --insecure: the Dask processes {warning}", file=sys.stderr)
    return None


def _prepare_output(output: Path) -> Path:
    """Make ``output/logs``, remove a previous run's files; the scheduler file's path.

    Raises
    ------
    UsageError
        Once made, ``output`` is not this account's alone (another account made a missing
        part first, since the options were checked).
    """
    (output / "logs").mkdir(parents=True, exist_ok=True)
    problem = output_problem(output) or output_problem(output / "logs")
    if problem is not None:
        raise UsageError(f"--output: {problem}")
    stale = ["scheduler.json", "timings.json", "results.json"]
    for path in [*map(output.joinpath, stale), *output.glob("heat-timings.*.json")]:
        path.unlink(missing_ok=True)
    return output / "scheduler.json"


def _start_dask(
    plan: RunPlan,
    procs: ProcessSet,
    signals: Signals,
    scheduler_file: Path,
    credentials: Credentials | None,
) -> Any:
    """Start the plan's scheduler and workers among the run's processes ``procs``; a client
    (with the run's ``credentials``) once every worker is connected."""
    from distributed import Client

    _quiet_distributed()
    dashboard = plan.dashboard and dashboard_available()
    scheduler = procs.start("scheduler", plan.scheduler.argv)
    wait_until(scheduler_file.exists, f"the scheduler file {scheduler_file}", plan.timeout,
               procs=procs, check=signals.check)  # fmt: skip
    with contextlib.suppress(SchedulerFileError):  # its failure names its address
        scheduler.label = f"scheduler at {read_scheduler_address(scheduler_file, wait=5)}"
    # their scratch: the run's private TMPDIR (DASK_TEMPORARY_DIRECTORY in their environment)
    workers = plan.workers.tasks
    for i in range(workers):
        procs.start(f"worker-{i}", [*plan.workers.argv, "--name", f"worker-{i}"])
    security = credentials.security() if credentials is not None else None
    client = Client(scheduler_file=str(scheduler_file), security=security, timeout=plan.timeout)
    wait_until(workers_connected(client, workers), f"{workers} worker(s) to connect",
               plan.timeout, procs=procs, interval=0, check=signals.check)  # fmt: skip
    print(dashboard_line(client, plan.dashboard, available=dashboard), file=sys.stderr)
    return client


DASHBOARD_OFF = (
    "Dashboard: off (distributed cannot make it ask for the run's credentials: every account "
    "of this node could read it on loopback); --dashboard (or dashboard: true in the run "
    "section of --defaults) turns it on"
)
"""The one line that says the dashboard is off, and how to turn it on."""


def dashboard_line(client: Any, dashboard: bool = True, *, available: bool = True) -> str:
    """Where the dashboard is (loopback only) and the ssh tunnel that reaches it from
    another machine; or why there is none (:data:`DASHBOARD_OFF` when not asked for)."""
    if not dashboard:
        return DASHBOARD_OFF
    if not available:
        return "Dashboard: unavailable (bokeh is not installed; pip install bokeh)"
    port = client.scheduler_info().get("services", {}).get("dashboard")
    if port is None:
        return "Dashboard: off"
    return (
        f"Dashboard: http://{LOOPBACK}:{port}/status, on loopback only, where every account of "
        f"this node can read it; from your machine: ssh -L 8787:{LOOPBACK}:{port} "
        f"{socket.gethostname()} and open http://localhost:8787/status"
    )


def _failure(child: Child) -> PipelineError:
    """The error naming ``child``, the first part that failed, with its log's tail; one line
    for a part that a signal killed (its log cannot say why)."""
    child.join_echo()
    code = child.popen.returncode
    what = f"{child.label or child.name} failed ({exit_in_words(code)}), log {child.log}"
    return PipelineError(what if code < 0 else f"{what}:\n{tail(child.log)}")


def _failed_part(procs: ProcessSet, finished: tuple[Child, ...]) -> PipelineError | None:
    """The failure of the first process that exited (the likeliest cause first), but
    ``finished`` ones that exited 0 (they are done); ``None`` while none did."""
    for child in sorted(procs.children, key=_blame_order):
        code = child.popen.poll()
        if code is None or (child in finished and code == 0):
            continue
        return _failure(child)
    return None


def _check_processes(procs: ProcessSet, finished: tuple[Child, ...], signals: Signals) -> None:
    """Raise on a signal or for the first process that exited, but ``finished`` ones that
    exited 0 (they are done)."""
    signals.check()
    failure = _failed_part(procs, finished)
    if failure is not None:
        raise failure


BLAME_S = 5.0
"""How long an error of the built-in analytics waits for a process of the run to be seen dead
(the scheduler's death closes the client's connection before its exit is reaped): the part
that died, not the connection it took with it, is what failed."""


def _blame(procs: ProcessSet, finished: tuple[Child, ...], exc: Exception) -> None:
    """The built-in analytics raised ``exc``: raise the failure of the part that caused it,
    if one has exited, or exits within :data:`BLAME_S` where ``exc`` comes of a lost peer (an
    ``OSError`` or a cancellation in its chain); return otherwise (``exc`` is the analytics'
    own)."""
    deadline = time.monotonic() + (BLAME_S if _of_a_lost_peer(exc) else 0.0)
    while (failure := _failed_part(procs, finished)) is None:
        if time.monotonic() >= deadline:
            return
        time.sleep(0.1)
    raise failure from exc


def _of_a_lost_peer(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it comes from, is an ``OSError`` (a connection closed,
    refused...) or a cancellation (distributed cancels a client's futures when it loses its
    scheduler)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (OSError, concurrent.futures.CancelledError)):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _blame_order(child: Child) -> int:
    """Of parts found dead in the same poll, the likeliest cause first: the scheduler, a
    worker, the simulation (a dead simulation ends the analytics' stream), the analytics."""
    order = {"scheduler": 0, "simulation": 2, "analytics": 3}
    return order.get(child.name, 1)


def _wait_for_simulation(plan: RunPlan, procs: ProcessSet, sim: Child, signals: Signals) -> None:
    """Once the stream has ended: the simulation's exit, within ``--timeout``."""
    wait_until(
        lambda: sim.popen.poll() is not None,
        "the simulation to exit",
        plan.timeout,
        check=lambda: _check_processes(procs, (sim,), signals),
    )
    _check_processes(procs, (sim,), signals)


def _wait_for_user_analytics(
    plan: RunPlan, procs: ProcessSet, sim: Child, analytics: Child, signals: Signals
) -> None:
    """Wait until the simulation and the analytics have both exited 0; the first part to fail
    (the analytics included: the simulation is then stopped) raises."""
    done = (sim, analytics)
    while sim.popen.poll() is None and analytics.popen.poll() is None:
        _check_processes(procs, done, signals)
        time.sleep(0.1)
    _check_processes(procs, done, signals)
    # one is done: the other has --timeout to follow (an analytics that ends early leaves
    # the simulation that time to finish, since nobody takes its steps any more)
    last = analytics if sim.popen.poll() is not None else sim
    wait_until(
        lambda: last.popen.poll() is not None,
        f"the {last.name} to exit",
        plan.timeout,
        check=lambda: _check_processes(procs, done, signals),
    )
    _check_processes(procs, done, signals)


def _builtin_analytics(
    plan: RunPlan, client: Any, procs: ProcessSet, sim: Child, signals: Signals, out: IO[str]
) -> None:
    """The built-in PCA of every step (:func:`~deisa.pca_app.driver.drive`), with a progress
    bar; then, once the simulation has exited, the report."""
    pca = plan.pca
    assert pca is not None  # the plan has no analytics process: the built-in PCA runs here
    timings = Path(plan.timings) if plan.timings else None

    def after_stream() -> Path | None:
        _wait_for_simulation(plan, procs, sim, signals)
        return timings

    analysis = Analysis(
        pca.array,
        pca.n_components,
        plan.output,
        plan.timeout,
        buffer_nb=pca.buffer_nb,
        stop_when_converged=pca.stop_when_converged,
        settings=dict(pca.settings),
        steps=pca.steps,
    )
    # the simulation's exit, not a deadline, ends the wait for a step (unless --step-timeout)
    watch = StepWatch(
        pca.array, client, step_timeout=pca.step_timeout, exit_status=sim.popen.poll, log=sim.log
    )
    # the processes are checked between the client's calls, and from a thread during them:
    # a client whose scheduler died may sit in distributed's reconnect for its whole timeout
    try:
        with watched(lambda: _failed_part(procs, (sim,))):
            drive(
                client,
                analysis,
                watch,
                check=lambda: _check_processes(procs, (sim,), signals),
                on_step=signals.check,
                after_stream=after_stream,
                out=out,
                progress=True,
            )
    except Exception as exc:  # a closed connection to a dead scheduler: the scheduler failed
        _blame(procs, (sim,), exc)
        raise


def _held(totals: dict[str, Any]) -> str:
    """:func:`~deisa.pca_app.driver.hold` in words for the closing line; nothing before the
    stream is closed."""
    held = hold(totals)
    if held is None:
        return ""
    share = 100 * held["held_s"] / held["open_s"]
    return (
        f", publish held by flow control {held['held_s']:.2f} s of {held['open_s']:.2f} s "
        f"({share:.1f} %)"
    )


def _ways(totals: dict[str, Any]) -> str:
    """How the ranks sent their blocks, for the closing line; nothing before the stream is
    closed."""
    found = ways(totals)
    return f", blocks {ways_in_words(found)}" if found else ""


def _summary(client: Any, wall_s: float) -> str:
    """The closing line: wall time, then per array the steps published and taken, the bytes
    published, the time flow control held the simulation and how the ranks sent their blocks
    (the ``totals`` of the extension's ``deisa_stats``)."""
    try:
        totals = stream_stats(client)["totals"]
    except Exception as exc:  # the summary must not turn a run into a failure
        logger.debug("no deisa_stats", exc_info=True)
        return f"deisa-run: done in {wall_s:.1f} s (no stream statistics: {exc})"
    parts = [
        f"{name}: {t.get('published', 0)} steps published, {t.get('taken', 0)} taken, "
        f"{t.get('bytes', 0):,} bytes{_held(t)}{_ways(t)}"
        for name, t in totals.items()
    ]
    return f"deisa-run: done in {wall_s:.1f} s; " + ("; ".join(parts) or "no array published")
