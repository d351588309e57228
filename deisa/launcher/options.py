"""The options of ``deisa-run``, ``deisa-run slurm`` and ``deisa-run analytics``, declared once.

Every option is declared in :data:`OPTIONS`, with the section of the defaults file it falls
back to for each command (:func:`pick`). Its help is the comment after its key in
``deisa/templates/defaults.yml``, followed by the value in force. The Bridge options take their
type, choices and metavar from :class:`~deisa.bridge.options.BridgeOptions`'s table.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..bridge.options import BridgeOptions, Choice
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
    """

    key: str
    flags: tuple[str, ...]
    sections: Mapping[str, str | None]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    help: str = ""
    default: Any = None

    @property
    def flag(self) -> str:
        return self.flags[0]


def _both(section: str = "run") -> dict[str, str | None]:
    return {RUN: section, SLURM: section}


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
    Option("ranks", ("--ranks", "-n"), _both(), {"type": int}),
    Option("process_grid", ("--process-grid",), _both(), _PAIR),
    Option("global_size", ("--size",), _both(), _PAIR),
    Option("steps", ("--steps",), _both(), {"type": int}),
    Option("output_period", ("--output-period",), _both(), {"type": int}),
    Option("solver", ("--solver",), _both(), {"choices": ["auto", "c", "python"]}),
    Option("config", ("--config",), _both()),
    Option("pdi_config", ("--pdi-config",), _both()),
    Option("build_dir", ("--build-dir",), _both()),
    # data path
    Option("array", ("--array",), {RUN: "run", SLURM: "run", ANALYTICS: "run"}),
    Option("placement", ("--placement",), _both(), _bridge("placement")),
    # the analytics client fits as many steps at once as the stream may queue; read as a string
    # (parsed by the settings), so that an explicit `none` is told from an absent option
    Option(
        "buffer_nb",
        ("--buffer-nb",),
        {RUN: "run", SLURM: "run", ANALYTICS: "run"},
        {"metavar": BridgeOptions.constraint("buffer_nb").metavar},
    ),
    Option("mode", ("--mode",), _both(), _bridge("mode")),
    Option("max_in_flight", ("--max-in-flight",), _both(), _bridge("max_in_flight")),
    # Dask
    Option("workers", ("--workers", "-w"), _both(), {"type": int}),
    Option("threads", ("--threads", "-t"), _both(), {"type": int}),
    # analytics and run
    Option(
        "n_components",
        ("--n-components",),
        {RUN: "run", SLURM: "run", ANALYTICS: "run"},
        {"type": int},
    ),
    Option("worker_preload", ("--worker-preload",), _both(), {"metavar": "MODULE"}),
    Option("output", ("--output", "-o"), {RUN: "run", SLURM: "run", ANALYTICS: "run"}),
    # a flag that turns the defaults' `tls: true` off: None (not given) falls back to the file
    Option("tls", ("--insecure",), _both(), {"action": "store_const", "const": False}),
    Option("protocol", ("--protocol",), _both(), {"choices": list(PROTOCOLS)}),
    Option(
        "stop_when_converged",
        ("--stop-when-converged",),
        {RUN: "run", SLURM: "run", ANALYTICS: "run"},
        {"type": float, "metavar": "EPS"},
    ),
    # Batch jobs are slower to start than a laptop: their patience is the Slurm section's.
    Option(
        "timeout", ("--timeout",), {RUN: "run", SLURM: "slurm", ANALYTICS: "slurm"}, {"type": float}
    ),
    # read as a string (checked by the settings), so that an explicit `none` is told from an
    # absent option
    Option(
        "step_timeout",
        ("--step-timeout",),
        {RUN: "run", SLURM: "run", ANALYTICS: "run"},
        {"metavar": "SECONDS|none"},
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
    Option("time", ("--time",), {SLURM: "slurm"}),
    Option("partition", ("--partition", "-p"), {SLURM: "slurm"}),
    Option("account", ("--account", "-A"), {SLURM: "slurm"}),
    Option("job_name", ("--job-name",), {SLURM: "slurm"}),
    Option("workdir", ("--workdir",), {SLURM: "slurm"}),
    Option("python", ("--python",), {SLURM: "slurm"}),
    Option("mpi", ("--mpi",), {SLURM: "slurm"}),
    Option("interface", ("--interface",), {SLURM: "slurm"}),
    Option("srun_args", ("--srun-arg",), {SLURM: "slurm"}, {"action": "append"}),
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
    ``None`` when not given, so that :func:`pick` can tell them from the file's values."""
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
        dest = "workers" if opt.key == "analytics_workers" else opt.key
        parser.add_argument(
            *opt.flags, dest=dest, default=default, help=text.replace("%", "%%"), **opt.kwargs
        )


def pick(
    args: argparse.Namespace,
    defaults: Mapping[str, Mapping[str, Any]],
    command: str,
    key: str,
) -> Any:
    """The option ``key`` of ``command``: as given, else from its section of the defaults."""
    value = getattr(args, key, None)
    section = option(key).sections[command]
    if value is not None or section is None:
        return value
    return defaults[section][key]
