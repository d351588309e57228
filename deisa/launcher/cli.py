"""``deisa-run``: its parsers and its three commands.

``deisa-run [run]`` (or ``python -m deisa.launcher``) runs the whole pipeline on this machine
(:func:`deisa.launcher.local.run_pipeline`): a Dask scheduler and workers on loopback, the heat
simulation under ``mpirun`` (the C solver through PDI when it is built and PDI loads, else the
Python solver) and a PCA of every step, then a table of per-step times, ``results.json``, the
plot ``explained_variance.png`` and the logs in ``--output``. ``deisa-run slurm`` prints a
batch script doing the same in one Slurm allocation (:mod:`deisa.launcher.slurm`);
``deisa-run analytics`` runs only the client against an existing scheduler (what that job
runs next to the scheduler).

``deisa-run [options] [--analytics COMMAND] [-- SIMULATION COMMAND ...]`` (and the same after
``slurm``) runs the user's MPI program instead of the heat solver and the user's analytics
instead of the PCA (:mod:`deisa.launcher.local`).

Every option is checked before anything starts. Exit status: 0 on success, 1 when the
simulation or the analytics failed (the reason is printed), 2 for bad options (one line naming
the option or file), 128 + signal number when interrupted by SIGINT or SIGTERM (every process
started is stopped; a second signal kills them at once). Defaults:
``deisa/templates/defaults.yml``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..pca_app.failures import PipelineError
from .defaults import UsageError
from .options import RUN, SLURM
from .parse import analytics_settings, run_settings
from .processes import THREAD_PINS, Interrupted, Signals, wait_until
from .settings import AnalyticsSettings, RunSettings

logger = logging.getLogger(__name__)


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def run_main(argv: Sequence[str]) -> int:
    """``deisa-run [run]``: the whole pipeline on this machine."""
    with Signals("deisa-run") as signals:
        try:
            settings = run_settings(RUN, argv)
            _setup_logging(settings.verbose)
            os.environ.update(THREAD_PINS)  # this process's own PCA and the children's
            from .local import run_pipeline
            from .plan import make_plan

            signals.check()
            run_pipeline(make_plan(settings), signals)
        except UsageError as exc:
            print(f"deisa-run: error: {exc}", file=sys.stderr)
            return 2
        except (Interrupted, Exception) as exc:
            return _exit_status("deisa-run", exc, stopped="; every process stopped")
    return 0


def _exit_status(prog: str, exc: BaseException, *, stopped: str = "") -> int:
    """The exit status of a command that ``exc`` ended (see the module's documentation), the
    reason printed on stderr; ``stopped`` follows the signal's name when interrupted."""
    if isinstance(exc, Interrupted):
        print(f"{prog}: interrupted by {exc}{stopped}", file=sys.stderr)
        return 128 + exc.signum
    logger.debug("%s failed", prog, exc_info=exc)
    reason = str(exc) if isinstance(exc, PipelineError) else f"{type(exc).__name__}: {exc}"
    print(f"{prog}: failed: {reason}", file=sys.stderr)
    return 1


def slurm_main(argv: Sequence[str]) -> int:
    """``deisa-run slurm``: print the batch script on stdout.

    Returns
    -------
    int
        Exit status: 0, or 2 for options that cannot work (the reason on stderr).
    """
    from .plan import make_plan
    from .slurm import job_script

    try:
        settings = run_settings(SLURM, argv)
        script = job_script(make_plan(settings))
    except ValueError as exc:  # UsageError included
        print(f"deisa-run slurm: error: {exc}", file=sys.stderr)
        return 2
    settings.output.mkdir(parents=True, exist_ok=True)  # sbatch --output needs it
    print(
        f"deisa-run slurm: {settings.ranks} ranks of {_simulation_name(settings)}"
        f" ({settings.solver_reason}), {settings.workers} workers x {settings.threads} threads, "
        f"{settings.slurm.nodes if settings.slurm else 1} node(s); output in {settings.output}",
        file=sys.stderr,
    )
    sys.stdout.write(script)
    return 0


def _simulation_name(settings: RunSettings) -> str:
    if settings.command:
        return f"your command `{shlex.join(settings.command)}`"
    return f"the {settings.solver} solver"


def analytics_main(argv: Sequence[str]) -> int:
    """``deisa-run analytics``: the client alone, against a running scheduler."""
    with Signals("deisa-run analytics") as signals:
        try:
            args = analytics_settings(argv)
        except UsageError as exc:
            print(f"deisa-run analytics: error: {exc}", file=sys.stderr)
            return 2
        _setup_logging(args.verbose)
        os.environ.update(THREAD_PINS)
        try:
            return _analytics(args, signals)
        except (Interrupted, Exception) as exc:
            return _exit_status("deisa-run analytics", exc)


def _analytics(args: AnalyticsSettings, signals: Signals, security: Any = None) -> int:
    """The client's work; ``security``: its :class:`distributed.Security` (``None``: from
    the dask configuration, which the Slurm job sets)."""
    from distributed import Client

    from ..bridge.scheduler_file import read_scheduler_address
    from ..pca_app.driver import Analysis, drive
    from ..pca_app.stall import StepWatch
    from .dask_processes import dashboard_available, workers_connected
    from .local import dashboard_line

    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    if args.scheduler_file is None:  # --replay alone: a cluster of --workers workers, here
        return _with_local_cluster(args, signals)
    scheduler_file = Path(args.scheduler_file)
    wait_until(
        scheduler_file.exists,
        f"the scheduler file {scheduler_file}",
        args.timeout,
        check=signals.check,
    )
    address = read_scheduler_address(scheduler_file)
    with Client(address, security=security, timeout=args.timeout) as client:
        wait_until(
            workers_connected(client, args.workers),
            f"{args.workers} worker(s) to connect",
            args.timeout,
            interval=0,
            check=signals.check,
        )
        print(f"deisa-run analytics: connected to {address}", file=sys.stderr)
        dashboard = dashboard_line(client, args.dashboard, available=dashboard_available())
        print(dashboard, file=sys.stderr)
        analysis = Analysis(
            args.array,
            args.n_components,
            output,
            args.timeout,
            buffer_nb=args.buffer_nb,
            stop_when_converged=args.stop_when_converged,
            replay=args.replay,
            settings={
                "array": args.array,
                "n_components": args.n_components,
                "stop_when_converged": args.stop_when_converged,
            },
        )
        drive(
            client,
            analysis,
            # the ranks run elsewhere: rank 0's heartbeat on the scheduler says they live
            StepWatch(args.array, client, step_timeout=args.step_timeout),
            check=signals.check,
            on_step=signals.check,
            after_stream=lambda: _timings(args.timings, signals),
        )
        if args.shutdown:
            client.shutdown()
    return 0


def _timings(timings: str | None, signals: Signals) -> Path | None:
    """The simulation's timings file ``timings`` once it is there (a warning after 60 s)."""
    if not timings:
        return None
    path = Path(timings)
    try:
        wait_until(
            path.exists, f"the simulation timings {path}", 60, interval=0.2, check=signals.check
        )
    except PipelineError as exc:
        logger.warning("%s", exc)
    return path


def _with_local_cluster(args: AnalyticsSettings, signals: Signals) -> int:
    """``deisa-run analytics --replay FILES`` without a scheduler: one on loopback, for the run,
    speaking TLS with credentials held in memory (``Security.temporary``), its scratch in a
    private temporary directory (:mod:`.private_tmp`), its HTTP servers ``/health`` alone
    unless ``--dashboard``."""
    import dask.config
    from distributed import LocalCluster, Security

    from .dask_processes import http_config
    from .private_tmp import make_private_tmp

    security = Security.temporary()

    scheduler_file = Path(args.output).resolve() / "scheduler.json"
    args = dataclasses.replace(args, scheduler_file=str(scheduler_file))
    tmp = make_private_tmp()  # the cluster's scratch: never a shared dask-scratch-space
    config = {"temporary-directory": str(tmp.path), **http_config(args.dashboard)}
    try:
        with (
            dask.config.set(config),
            LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                protocol="tls",
                security=security,
                local_directory=str(tmp.path),
                scheduler_kwargs={"scheduler_file": str(scheduler_file)},
            ),
        ):
            return _analytics(args, signals, security)
    finally:
        tmp.remove()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``deisa-run`` and ``python -m deisa.launcher``.

    Parameters
    ----------
    argv
        Arguments without the program name; ``sys.argv[1:]`` by default. A first word
        ``slurm`` or ``analytics`` selects a sub-command, ``run`` (optional) the local run.

    Returns
    -------
    int
        Exit status.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # every file and directory of a run private to its owner: results, logs, the scheduler
    # file, the Dask spill directory, the TLS credentials (inherited by every child)
    os.umask(0o077)
    command = argv[0] if argv else ""
    if command == "slurm":
        return slurm_main(argv[1:])
    if command == "analytics":
        return analytics_main(argv[1:])
    if command == "run":
        argv = argv[1:]
    return run_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
