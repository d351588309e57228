"""The options of ``deisa-run``, ``deisa-run slurm`` and ``deisa-run analytics``, declared once.

Every option is declared in :data:`OPTIONS`, once: its flags, the section of the defaults
(``deisa.<section>`` of the dask configuration) it falls back to for each command, and its
check (:mod:`.checks`); :func:`build_parser` makes the parser of each command from them, and
:func:`deisa.launcher.parse.resolve` reads every value once, given or from the defaults in
force, checked by its declaration. Its help is the comment after its key in
``deisa/templates/defaults.yml``, followed by the value in force. The Bridge options take their
type, choices and metavar from :class:`~deisa.bridge.options.BridgeOptions`'s table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..bridge.options import BridgeOptions, Choice
from . import checks
from .defaults import default_comments

RUN, SLURM, ANALYTICS = "run", "slurm", "analytics"

PROTOCOLS = ("tcp", "ucx")
"""The values of ``--protocol``: what ``dask scheduler --protocol`` and ``dask worker
--protocol`` are given (``tcp``: ``tls`` unless ``--insecure``)."""


@dataclass(frozen=True)
class Option:
    """One command-line option of the launcher.

    Attributes
    ----------
    key
        Attribute of the parsed namespace, and key in the defaults file.
    flags
        ``("--ranks", "-n")``.
    sections
        ``{command: section}``: the commands that take the option, each with the section of
        the defaults file it falls back to (``None``: not in the file, ``default`` is used).
    kwargs
        More arguments of ``add_argument`` (``type``, ``nargs``, ``choices``...).
    help
        Help of an option that is not in the defaults file (otherwise its key's comment).
    default
        Value of an option that is not in the defaults file.
    check
        ``check(name, value)``: the value as the settings hold it, or a
        :class:`~deisa.launcher.defaults.UsageError` naming ``name`` (:mod:`.checks`);
        ``None``: checked with the options it goes with (:mod:`deisa.launcher.parse`).
    dest
        Attribute of the parsed namespace, if not ``key``.
    checked_in
        The commands whose value ``check`` checks (``None``: all).
    """

    key: str
    flags: tuple[str, ...]
    sections: Mapping[str, str | None]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    help: str = ""
    default: Any = None
    check: Callable[[str, Any], Any] | None = None
    dest: str | None = None
    checked_in: frozenset[str] | None = None

    @property
    def flag(self) -> str:
        return self.flags[0]


def _both(section: str = "run") -> dict[str, str | None]:
    return {RUN: section, SLURM: section}


def _all(section: str = "run") -> dict[str, str | None]:
    return {RUN: section, SLURM: section, ANALYTICS: section}


def _named(parse: Callable[[Any, str], Any]) -> Callable[[str, Any], Any]:
    """A check of the ``parse(value, name)`` kind as ``check(name, value)``."""
    return lambda name, value: parse(value, name)


def _grammar(key: str) -> Callable[[str, Any], Any]:
    """The check of a Slurm option written into the job script as it is."""
    return checks.SLURM_GRAMMARS[key].check


def _bridge(name: str) -> dict[str, Any]:
    """``add_argument``'s type, choices and metavar of the Bridge option ``name``, from its
    declaration (:class:`~deisa.bridge.options.BridgeOptions`)."""
    constraint = BridgeOptions.constraint(name)
    if isinstance(constraint, Choice):
        return {"choices": list(constraint.values)}
    return {"type": constraint.parse, "metavar": constraint.metavar}


_PAIR = {"type": int, "nargs": 2, "metavar": ("ROWS", "COLS")}

OPTIONS: tuple[Option, ...] = (
    # simulation
    Option("ranks", ("--ranks", "-n"), _both(), {"type": int}, check=checks.positive),
    Option("process_grid", ("--process-grid",), _both(), _PAIR, check=checks.pair),
    Option("global_size", ("--size",), _both(), _PAIR),
    Option("steps", ("--steps",), _both(), {"type": int}),
    Option("output_period", ("--output-period",), _both(), {"type": int}),
    Option("solver", ("--solver",), _both(), {"choices": ["auto", "c", "python"]}),
    Option("config", ("--config",), _both()),
    Option("pdi_config", ("--pdi-config",), _both()),
    Option("build_dir", ("--build-dir",), _both()),
    # data path
    # the job script and the C solver's PDI YAML carry the name: its grammar; the analytics
    # client takes whatever name a simulation published
    Option("array", ("--array",), _all(), check=checks.array, checked_in=frozenset({RUN, SLURM})),
    Option("placement", ("--placement",), _both(), _bridge("placement")),
    # the analytics client fits as many steps at once as the stream may queue; read as a string
    # (parsed by the settings), so that an explicit `none` is told from an absent option
    Option(
        "buffer_nb",
        ("--buffer-nb",),
        _all(),
        {"metavar": BridgeOptions.constraint("buffer_nb").metavar},
        check=_named(checks.parse_buffer_nb),
    ),
    Option("mode", ("--mode",), _both(), _bridge("mode")),
    Option("max_in_flight", ("--max-in-flight",), _both(), _bridge("max_in_flight")),
    # Dask
    Option("workers", ("--workers", "-w"), _both(), {"type": int}, check=checks.positive),
    Option("threads", ("--threads", "-t"), _both(), {"type": int}, check=checks.positive),
    Option(
        "memory_limit",
        ("--memory-limit",),
        _both(),
        {"metavar": "BYTES|auto|none"},
        check=_named(checks.parse_memory_limit),
    ),
    # analytics and run
    Option("n_components", ("--n-components",), _all(), {"type": int}, check=checks.positive),
    Option(
        "worker_preload",
        ("--worker-preload",),
        _both(),
        {"metavar": "MODULE"},
        check=checks.preload,
    ),
    Option("output", ("--output", "-o"), _all(), check=checks.output),
    # a flag that turns the defaults' `tls: true` off: None (not given) falls back to the file
    Option(
        "tls",
        ("--insecure",),
        _both(),
        {"action": "store_const", "const": False},
        check=checks.flag,
    ),
    Option("protocol", ("--protocol",), _both(), {"choices": list(PROTOCOLS)}),
    # a flag that turns the defaults' `dashboard: false` on; the analytics client only says
    # where it is
    Option(
        "dashboard",
        ("--dashboard",),
        _all(),
        {"action": "store_const", "const": True},
        check=checks.flag,
    ),
    Option(
        "stop_when_converged",
        ("--stop-when-converged",),
        _all(),
        {"type": float, "metavar": "EPS"},
        check=_named(checks.parse_eps),
    ),
    # Batch jobs are slower to start than a laptop: their patience is the Slurm section's.
    Option(
        "timeout",
        ("--timeout",),
        {RUN: "run", SLURM: "slurm", ANALYTICS: "slurm"},
        {"type": float},
        check=checks.seconds,
    ),
    # read as a string (checked by the settings), so that an explicit `none` is told from an
    # absent option
    Option(
        "step_timeout",
        ("--step-timeout",),
        _all(),
        {"metavar": "SECONDS|none"},
        check=_named(checks.parse_step_timeout),
    ),
    # Slurm
    Option("nodes", ("--nodes", "-N"), {SLURM: "slurm"}, {"type": int}),
    Option("worker_nodes", ("--worker-nodes",), {SLURM: "slurm"}, {"type": int}),
    Option(
        "scheduler_node",
        ("--scheduler-node",),
        {SLURM: "slurm"},
        {"choices": ["auto", "own", "shared"]},
    ),
    Option("time", ("--time",), {SLURM: "slurm"}, check=_grammar("time")),
    Option("partition", ("--partition", "-p"), {SLURM: "slurm"}, check=_grammar("partition")),
    Option("account", ("--account", "-A"), {SLURM: "slurm"}, check=_grammar("account")),
    Option("job_name", ("--job-name",), {SLURM: "slurm"}, check=_grammar("job_name")),
    Option("workdir", ("--workdir",), {SLURM: "slurm"}, check=checks.workdir),
    Option("python", ("--python",), {SLURM: "slurm"}, check=checks.interpreter),
    Option("mpi", ("--mpi",), {SLURM: "slurm"}, check=_grammar("mpi")),
    Option("interface", ("--interface",), {SLURM: "slurm"}, check=_grammar("interface")),
    Option(
        "srun_args", ("--srun-arg",), {SLURM: "slurm"}, {"action": "append"}, check=checks.words
    ),
    # the analytics client alone
    Option(
        "scheduler_file",
        ("--scheduler-file",),
        {ANALYTICS: None},
        help="JSON file of `dask scheduler --scheduler-file` (with --replay: the cluster that "
        "reads the files; without, a local one of --workers workers)",
    ),
    Option(
        "replay",
        ("--replay",),
        {ANALYTICS: None},
        {"metavar": "FILES"},
        help="analyse saved steps instead of the live stream (deisa.Replay): an HDF5 file or "
        "Zarr store with the time axis first, or a per-step pattern such as 'data_{step}.h5'",
    ),
    Option(
        "analytics_workers",
        ("--workers",),
        {ANALYTICS: None},
        {"type": int},
        help="workers to wait for before starting",
        default=1,
        dest="workers",
    ),
    Option(
        "timings",
        ("--timings",),
        {ANALYTICS: None},
        help="simulation timings JSON to wait for and include in the table",
    ),
    Option(
        "shutdown",
        ("--shutdown",),
        {ANALYTICS: None},
        {"action": "store_true"},
        help="shut the scheduler and workers down at the end",
        default=False,
    ),
    # your own code
    Option(
        "analytics",
        ("--analytics",),
        {RUN: None, SLURM: None},
        {"metavar": "COMMAND"},
        help="your analytics, one command line (split as a shell would, no shell; a .py runs "
        "with this Python); default: the built-in PCA of --array. Your simulation goes after "
        "`--`: deisa-run [options] -- SIMULATION COMMAND",
        check=checks.command,
    ),
    # every command
    Option(
        "defaults",
        ("--defaults",),
        {RUN: None, SLURM: None, ANALYTICS: None},
        help="YAML file overriding deisa/templates/defaults.yml",
    ),
    Option(
        "verbose",
        ("--verbose", "-v"),
        {RUN: None, SLURM: None, ANALYTICS: None},
        {"action": "count"},
        help="log more (-v info, -vv debug)",
        default=0,
    ),
)


def option(key: str) -> Option:
    """The declaration of ``key`` in :data:`OPTIONS`."""
    return next(o for o in OPTIONS if o.key == key)


def add_options(
    parser: argparse.ArgumentParser, command: str, defaults: Mapping[str, Mapping[str, Any]]
) -> None:
    """Declare on ``parser`` every option ``command`` takes; defaults-file options are left
    ``None`` when not given, so that :func:`deisa.launcher.parse.resolve` can tell them from
    the defaults."""
    comments = default_comments()
    for opt in OPTIONS:
        if command not in opt.sections:
            continue
        section = opt.sections[command]
        if section is None:
            text, default = opt.help, opt.default
            if default:
                text += f" (default: {default})"
        else:
            text, default = comments[section][opt.key], None
            value = defaults[section][opt.key]
            if value is not None and value != []:
                shown = " ".join(map(str, value)) if isinstance(value, list) else value
                text += f" (default: {shown})"
        dest = opt.dest or opt.key
        parser.add_argument(
            *opt.flags, dest=dest, default=default, help=text.replace("%", "%%"), **opt.kwargs
        )


_DESCRIPTIONS = {
    RUN: "Run a simulation with in situ analytics on Dask, all on this machine: the heat demo "
    "and a PCA, or `deisa-run [options] [--analytics COMMAND] -- SIMULATION COMMAND` for your "
    "own MPI program and analytics. Sub-commands: "
    "`deisa-run slurm --help` (batch script), `deisa-run analytics --help` (the client alone). "
    "Defaults: deisa/templates/defaults.yml (or --defaults FILE).",
    SLURM: "Print a Slurm batch script that runs the scheduler, the workers, the analytics "
    "client (or your --analytics) and the MPI simulation (the heat demo, or your command after "
    "`--`) in one allocation (see docs/slurm.md). The options shared "
    "with deisa-run mean the same. Defaults: deisa/templates/defaults.yml (or --defaults FILE).",
    ANALYTICS: "Only the analytics client: PCA of every step published to an existing "
    "scheduler, then the table, results.json and the plot. Run by the Slurm job. With --replay "
    "FILES, the same of saved steps (deisa.Replay), on a local cluster unless --scheduler-file.",
}
_PROGS = {RUN: "deisa-run", SLURM: "deisa-run slurm", ANALYTICS: "deisa-run analytics"}


def build_parser(
    command: str, defaults: Mapping[str, Mapping[str, Any]]
) -> argparse.ArgumentParser:
    """The parser of ``command`` (``"run"``, ``"slurm"`` or ``"analytics"``), its help showing
    the defaults in force."""
    usage = None
    if command != ANALYTICS:
        usage = "%(prog)s [options] [--analytics COMMAND] [-- SIMULATION COMMAND ...]"
    parser = argparse.ArgumentParser(
        prog=_PROGS[command], usage=usage, description=_DESCRIPTIONS[command]
    )
    add_options(parser, command, defaults)
    return parser
