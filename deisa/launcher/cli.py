"""``deisa-run``: its parsers and its three commands.

``deisa-run [run]`` (or ``python -m deisa.launcher``) runs the whole pipeline on this machine
(:func:`deisa.launcher.local.run_pipeline`): a Dask scheduler and workers on loopback, the heat
simulation under ``mpirun`` (the C solver through PDI when it is built and PDI loads, else the
Python solver) and a PCA of every step, then a table of per-step times, ``results.json``, the
plot ``explained_variance.png`` and the logs in ``--output``. ``deisa-run slurm`` prints a
batch script doing the same in one Slurm allocation (:mod:`deisa.launcher.slurm`);
``deisa-run analytics`` runs only the client against an existing scheduler (what that job
runs next to the scheduler).

Every option is checked before anything starts. Exit status: 0 on success, 1 when the
simulation or the analytics failed (the reason is printed), 2 for bad options (one line naming
the option or file), 128 + signal number when interrupted by SIGINT or SIGTERM (every process
started is stopped; a second signal kills them at once). Defaults:
``deisa/templates/defaults.yml``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import (
    ANALYTICS,
    RUN,
    SLURM,
    UsageError,
    add_options,
    load_defaults,
    parse_buffer_nb,
    parse_eps,
    pick,
)
from .pipeline import PipelineError
from .processes import THREAD_PINS, Interrupted, Signals

logger = logging.getLogger(__name__)

_DESCRIPTIONS = {
    RUN: "Run a heat simulation with in situ PCA on Dask, all on this machine. Sub-commands: "
    "`deisa-run slurm --help` (batch script), `deisa-run analytics --help` (the client alone). "
    "Defaults: deisa/templates/defaults.yml (or --defaults FILE).",
    SLURM: "Print a Slurm batch script that runs the scheduler, the workers, the analytics "
    "client and the MPI simulation in one allocation (see docs/slurm.md). The options shared "
    "with deisa-run mean the same. Defaults: deisa/templates/defaults.yml (or --defaults FILE).",
    ANALYTICS: "Only the analytics client: PCA of every step published to an existing "
    "scheduler, then the table, results.json and the plot. Run by the Slurm job.",
}
_PROGS = {RUN: "deisa-run", SLURM: "deisa-run slurm", ANALYTICS: "deisa-run analytics"}


def build_parser(command: str, defaults: dict[str, dict[str, Any]]) -> argparse.ArgumentParser:
    """The parser of ``command`` (``"run"``, ``"slurm"`` or ``"analytics"``), its help showing
    the defaults in force."""
    parser = argparse.ArgumentParser(prog=_PROGS[command], description=_DESCRIPTIONS[command])
    add_options(parser, command, defaults)
    return parser


def parse_args(command: str, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed for ``command``, the help's defaults those of ``--defaults`` if given.

    Raises
    ------
    UsageError
        ``--defaults`` is unreadable or invalid.
    SystemExit
        argparse's: ``--help``, or options it refuses (status 2).
    """
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--defaults")
    known, _ = pre.parse_known_args(argv)
    return build_parser(command, load_defaults(known.defaults)).parse_args(argv)


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def run_main(argv: Sequence[str]) -> int:
    """``deisa-run [run]``: the whole pipeline on this machine."""
    with Signals("deisa-run") as signals:
        try:
            args = parse_args(RUN, argv)
            _setup_logging(args.verbose)
            os.environ.update(THREAD_PINS)  # this process's own PCA and the children's
            from .local import run_pipeline
            from .solver import resolve_settings

            settings = resolve_settings(args, RUN)
            signals.check()
            run_pipeline(settings, signals)
        except UsageError as exc:
            print(f"deisa-run: error: {exc}", file=sys.stderr)
            return 2
        except Interrupted as exc:
            print(f"deisa-run: interrupted by {exc}; every process stopped", file=sys.stderr)
            return 128 + exc.signum
        except PipelineError as exc:
            print(f"deisa-run: failed: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:
            logger.debug("deisa-run failed", exc_info=True)
            print(f"deisa-run: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    return 0


def slurm_main(argv: Sequence[str]) -> int:
    """``deisa-run slurm``: print the batch script on stdout.

    Returns
    -------
    int
        Exit status: 0, or 2 for options that cannot work (the reason on stderr).
    """
    from .slurm import job_script
    from .solver import resolve_settings

    try:
        args = parse_args(SLURM, argv)
        defaults = load_defaults(args.defaults)

        def get(key: str) -> Any:
            return pick(args, defaults, SLURM, key)

        settings = resolve_settings(args, SLURM)
        script = job_script(
            ranks=settings.ranks,
            workers=settings.workers,
            threads=settings.threads,
            nodes=get("nodes"),
            worker_nodes=get("worker_nodes"),
            scheduler_node=get("scheduler_node"),
            time=get("time"),
            partition=get("partition"),
            output=settings.output,
            workdir=get("workdir"),
            python=get("python"),
            simulation=settings.simulation,
            job_name=get("job_name"),
            mpi=get("mpi"),
            placement=settings.placement,
            buffer_nb=settings.buffer_nb,
            array=settings.array,
            n_components=settings.n_components,
            timeout=settings.timeout,
            interface=get("interface"),
            srun_args=get("srun_args") or [],
            solver=settings.solver,
            build_dir=settings.build_dir,
            pdi_config=settings.pdi_config,
            stop_when_converged=settings.stop_when_converged,
        )
    except ValueError as exc:  # UsageError included
        print(f"deisa-run slurm: error: {exc}", file=sys.stderr)
        return 2
    settings.output.mkdir(parents=True, exist_ok=True)  # sbatch --output needs it
    print(
        f"deisa-run slurm: {settings.ranks} ranks of the {settings.solver} solver "
        f"({settings.solver_reason}), {settings.workers} workers x {settings.threads} threads, "
        f"{get('nodes')} node(s); output in {settings.output}",
        file=sys.stderr,
    )
    sys.stdout.write(script)
    return 0


def resolve_analytics_args(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options of ``deisa-run analytics`` left unset from the launch defaults.

    Raises
    ------
    UsageError
        ``--defaults`` is unreadable or invalid.
    """
    defaults = load_defaults(args.defaults)
    for key in ("array", "n_components", "output", "timeout", "buffer_nb", "stop_when_converged"):
        setattr(args, key, pick(args, defaults, ANALYTICS, key))
    args.buffer_nb = parse_buffer_nb(args.buffer_nb)
    args.stop_when_converged = parse_eps(args.stop_when_converged)
    return args


def analytics_main(argv: Sequence[str]) -> int:
    """``deisa-run analytics``: the client alone, against a running scheduler."""
    with Signals("deisa-run analytics") as signals:
        try:
            args = resolve_analytics_args(parse_args(ANALYTICS, argv))
        except UsageError as exc:
            print(f"deisa-run analytics: error: {exc}", file=sys.stderr)
            return 2
        _setup_logging(args.verbose)
        os.environ.update(THREAD_PINS)
        try:
            return _analytics(args, signals)
        except Interrupted as exc:
            print(f"deisa-run analytics: interrupted by {exc}", file=sys.stderr)
            return 128 + exc.signum
        except Exception as exc:
            print(f"deisa-run analytics: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1


def _analytics(args: argparse.Namespace, signals: Signals) -> int:
    from distributed import Client

    from ..bridge.scheduler_file import read_scheduler_address
    from .pipeline import analyze_stream
    from .report import report

    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    scheduler_file = Path(args.scheduler_file)
    deadline = time.monotonic() + args.timeout
    while not scheduler_file.exists() and time.monotonic() < deadline:
        signals.check()
        time.sleep(0.1)
    address = read_scheduler_address(scheduler_file)
    with Client(address, timeout=args.timeout) as client:
        deadline = time.monotonic() + args.timeout
        while True:
            signals.check()
            try:
                client.wait_for_workers(args.workers, timeout=1)
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
        print(f"deisa-run analytics: connected to {address}", file=sys.stderr)
        analytics = analyze_stream(
            client,
            args.array,
            n_components=args.n_components,
            stall_timeout=args.timeout,
            max_in_flight=args.buffer_nb or 2,
            check=signals.check,
            on_step=lambda _: signals.check(),
            stop_when_converged=args.stop_when_converged,
        )
        timings = Path(args.timings) if args.timings else None
        deadline = time.monotonic() + 60
        while timings is not None and not timings.exists():
            signals.check()
            if time.monotonic() > deadline:
                logger.warning("no simulation timings in %s", timings)
                break
            time.sleep(0.2)
        settings = {
            "array": args.array,
            "n_components": args.n_components,
            "stop_when_converged": args.stop_when_converged,
        }
        report(analytics, timings, output, settings, args.array, sys.stdout)
        if args.shutdown:
            client.shutdown()
    return 0


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
