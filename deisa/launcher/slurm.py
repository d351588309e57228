"""A Slurm batch script that co-launches the whole DEISA pipeline in one allocation.

:func:`job_script` fills ``deisa/templates/slurm_job.sh``: a Dask scheduler and the analytics
client (``deisa-run analytics``) on node 0, the Dask workers, then the MPI ranks of the heat
simulation (the Python solver, or the C solver through PDI and the deisa plugin), each a
concurrent ``srun --exact`` step, as in the DEISA paper's experiments. The simulation's command
is :func:`deisa.launcher.solver.simulation_command`'s, as for a local run.

Three parameters choose the layout (:func:`layout`): ``nodes``, ``worker_nodes`` (nodes of
their own for the workers, or ``0``: workers beside the ranks on the simulation nodes) and
``scheduler_node`` (whether the scheduler and the client share node 0 with workers and ranks).
The script waits for the scheduler file (the scheduler takes a free port), stops the client if
the simulation fails (and the reverse), and exits non-zero when either failed; a worker node
lost mid-run costs only its workers (``--no-kill``, :data:`WORKER_TTL`). Each job writes
into its own directory ``<output>/<job id>/``: ``results.json``, ``explained_variance.png``,
``simulation.yml``, ``timings.json``, ``scheduler.json`` and ``logs/``, one log per task named
after its node (``workers-<node>-<task>.log``...).

From the command line::

    deisa-run slurm --ranks 4 --workers 2 > job.sh
    deisa-run slurm --ranks 4 --solver c > job.sh      # the C solver through PDI
    sbatch job.sh

See ``docs/slurm.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import shlex
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..bridge.options import BridgeOptions
from .adios2_engine import find_engine
from .dask_processes import LOOPBACK, dashboard_available, http_env
from .processes import SAFE_PATH_ENV, THREAD_PINS
from .security import tls_env
from .settings import RunSettings, SlurmSettings, preload_args
from .solver import analytics_argv, find_plugin, python_script, simulation_command
from .ucx import INSTALL as UCX_INSTALL
from .ucx import MODULE as UCX_MODULE

TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "slurm_job.sh"
# In the C solver's PDI YAML, replaced by $SLURM_JOB_ID when the job starts: the scheduler file
# is per job, and the YAML cannot go through an unquoted heredoc (PDI's `$` expressions).
JOB_ID = "__SLURM_JOB_ID__"
SHUTDOWN_GRACE = 30
"""Seconds the steps of a job whose built-in analytics succeeded have to end by themselves
(the analytics shut the cluster down) before the job stops what is left: killing ``srun``
SIGKILLs its tasks, which then leave their private temporary directories behind."""
WORKER_TTL = "60s"
"""The job's default ``distributed.scheduler.worker-ttl``: a worker silent this long (its node
lost: no TCP reset) is dropped, and the Bridge places on the others. The environment's
``DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL`` at ``sbatch`` time overrides it."""


class _ScriptTemplate(string.Template):
    delimiter = "@@"  # `$` belongs to bash


SCHEDULER_NODES = ("auto", "own", "shared")


def layout(
    nodes: int, worker_nodes: int | None = None, scheduler_node: str = "auto"
) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((first, count), (first, count))`` of the worker nodes and the simulation nodes.

    The scheduler and the analytics client always run on node 0; the worker nodes come next,
    then the simulation nodes.

    Parameters
    ----------
    nodes
        Nodes of the allocation; ``1`` runs everything on one node.
    worker_nodes
        Nodes that run the workers and no rank; ``0``: the workers run on the simulation nodes,
        beside the ranks (co-located). Default: ``max(1, (nodes - 1) // 2)``, or ``0`` on one
        node.
    scheduler_node
        ``"own"``: node 0 runs only the scheduler and the client; ``"shared"``: node 0 is also
        the first worker node (co-located: the first simulation node); ``"auto"``: ``"own"``
        when ``nodes >= 3`` and the other nodes are enough, else ``"shared"``.

    Raises
    ------
    ValueError
        Counts that leave no node for the simulation, or an unknown ``scheduler_node``.

    Examples
    --------
    >>> layout(3, 1)  # node 0: scheduler + client; node 1: workers; node 2: ranks
    ((1, 1), (2, 1))
    >>> layout(2, 1)  # node 0: scheduler + client + workers; node 1: ranks
    ((0, 1), (1, 1))
    >>> layout(2, 0)  # both nodes: ranks + workers; node 0 also the scheduler + client
    ((0, 2), (0, 2))
    """
    if scheduler_node not in SCHEDULER_NODES:
        raise ValueError(f"scheduler_node={scheduler_node!r}: one of {', '.join(SCHEDULER_NODES)}")
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes={nodes!r} must be a positive integer")
    if worker_nodes is None:
        worker_nodes = max(1, (nodes - 1) // 2) if nodes > 1 else 0
    if not isinstance(worker_nodes, int) or not 0 <= worker_nodes <= nodes - 1:
        raise ValueError(
            f"worker_nodes={worker_nodes!r} must be between 0 (workers beside the ranks) and "
            f"nodes - 1 = {nodes - 1}, so that at least one node runs the simulation"
        )
    if scheduler_node == "auto":
        own = nodes >= 3 and nodes >= worker_nodes + 2
    else:
        own = scheduler_node == "own"
    first = 1 if own else 0
    if own and nodes < worker_nodes + 2:
        others = f"{worker_nodes} worker node(s), " if worker_nodes else ""
        raise ValueError(
            f"scheduler_node='own' with worker_nodes={worker_nodes} needs nodes >= "
            f"{worker_nodes + 2} (node 0 for the scheduler, {others}at least one simulation "
            f"node); nodes={nodes}"
        )
    if worker_nodes == 0:
        return (first, nodes - first), (first, nodes - first)
    return (first, worker_nodes), (first + worker_nodes, nodes - first - worker_nodes)


def job_script(settings: RunSettings) -> str:
    """The text of a batch script running scheduler, workers, client and simulation together.

    Parameters
    ----------
    settings
        From :func:`deisa.launcher.solver.resolve_settings` for ``deisa-run slurm``: the
        counts, the simulation, the solver, the Bridge options and the analytics are those of a
        local run; ``settings.slurm`` holds the allocation (nodes, layout, time, partition, job
        name, working directory, interpreter, ``srun --mpi`` plugin, network interface, extra
        ``srun`` options; ``None``: :class:`~deisa.launcher.settings.SlurmSettings`'s
        defaults). The job writes ``slurm-<job>.out`` into ``settings.output`` and everything
        else into its own directory ``<job>/`` (``results.json``, ``simulation.yml``, the
        scheduler file, ``logs/``...), so jobs sharing an output directory do not overwrite each
        other. The Bridge fixes its placement once every worker has connected
        (``min_workers``), waiting up to ``settings.timeout``.

    Returns
    -------
    str
        The script; submit it with ``sbatch``.

    Raises
    ------
    ValueError
        A layout that cannot work (see :func:`layout`), or a node left without a task.

    Examples
    --------
    >>> from deisa.launcher.cli import parse_args
    >>> from deisa.launcher.solver import resolve_settings
    >>> args = parse_args("slurm", ["--ranks", "4", "--workers", "2", "--solver", "python"])
    >>> "#SBATCH --ntasks=8" in job_script(resolve_settings(args, "slurm"))
    True
    """
    slurm = settings.slurm or SlurmSettings()
    plan, worker_nodes, sim_nodes = _allocation(settings, slurm)
    cpus = sum(node.cpus for node in plan)
    output = settings.output.absolute()
    # the placement is fixed once every worker is there, however slowly they start
    bridge = settings.bridge.replace(min_workers=settings.workers, connect_timeout=settings.timeout)
    steps = _simulation_step(settings, bridge, output=output)
    srun = functools.partial(_srun, "".join(f" {shlex.quote(a)}" for a in slurm.srun_args))
    workers, threads, ranks = settings.workers, settings.threads, settings.ranks
    fields = {
        "header": "\n".join(f"#SBATCH {line}" for line in _header(slurm, plan, output)),
        "layout": _describe(plan, threads),
        "solver": _comment(steps["solver"]),
        "tasks": f"1 scheduler + 1 analytics client + {workers} workers x {threads} threads + "
        f"{ranks} MPI ranks = {cpus}",
        "environment": "\n".join(_environment(slurm, settings.dashboard)),
        "security": _security_lines(settings.tls, slurm.nodes, settings.protocol),
        "output": shlex.quote(str(output)),
        "simulation_yaml": yaml.safe_dump(
            settings.simulation, sort_keys=False, default_flow_style=None
        ),
        "solver_setup": steps["solver_setup"],
        "start_timeout": math.ceil(settings.timeout),
        # the built-in analytics shuts the cluster down (--shutdown): its steps end by themselves
        "grace": SHUTDOWN_GRACE if settings.analytics is None else 0,
        **_dask_steps(settings, slurm, srun, worker_nodes),
        "analytics": srun((0, 1), 1, 1, "analytics-%N", steps["analytics_command"]),
        "simulation": srun(
            sim_nodes, ranks, 1, "simulation-%N-%t", steps["simulation_command"], mpi=slurm.mpi
        ),
    }
    return _ScriptTemplate(TEMPLATE.read_text()).substitute(fields)


def _allocation(
    settings: RunSettings, slurm: SlurmSettings
) -> tuple[list[_Node], tuple[int, int], tuple[int, int]]:
    """What each node runs, and the (first, count) of the worker and the simulation nodes.

    Raises
    ------
    ValueError
        A layout that cannot work (see :func:`layout`), or a node left without a task.
    """
    worker_nodes, sim_nodes = layout(slurm.nodes, slurm.worker_nodes, slurm.scheduler_node)
    workers, ranks = settings.workers, settings.ranks
    if workers < worker_nodes[1] or ranks < sim_nodes[1]:
        raise ValueError(
            f"{workers} workers on {worker_nodes[1]} nodes and {ranks} ranks on {sim_nodes[1]} "
            "nodes: every node needs at least one task"
        )
    plan = _plan(slurm.nodes, worker_nodes, sim_nodes, workers, settings.threads, ranks)
    return plan, worker_nodes, sim_nodes


def _header(slurm: SlurmSettings, plan: list[_Node], output: Path) -> list[str]:
    """The ``#SBATCH`` options: the allocation of ``plan``, every value quoted for sbatch."""
    header = [
        f"--job-name={_sbatch_word(slurm.job_name)}", f"--nodes={slurm.nodes}",
        f"--ntasks={sum(node.cpus for node in plan)}", "--cpus-per-task=1",
        f"--time={_sbatch_word(slurm.time)}",
        f"--chdir={_sbatch_word(str(Path(slurm.workdir).absolute()))}",
        # sbatch expands %-patterns in --output: a % of the directory's name is written %%
        f"--output={_sbatch_word(str(output).replace('%', '%%'))}/slurm-%j.out",
    ]  # fmt: skip
    if slurm.partition:
        header.append(f"--partition={_sbatch_word(slurm.partition)}")
    if slurm.account:
        header.append(f"--account={_sbatch_word(slurm.account)}")
    if slurm.nodes > 1:
        # whole nodes, each with the CPUs its busiest node needs (steps split evenly)
        header += ["--exclusive", f"--mincpus={max(n.cpus for n in plan)}"]
        # a failed node costs its own tasks, not the allocation (docs/slurm.md, lost node)
        header.append("--no-kill")
    return header


def _environment(slurm: SlurmSettings, dashboard: bool = False) -> list[str]:
    """The job's environment: thread pins, no unsafe directory on a Python's ``sys.path``, the
    scheduler's settings, the HTTP routes (:func:`~deisa.launcher.dask_processes.http_env`),
    Open MPI's network, the interpreter (which must take ``-P``)."""
    return [
        "export " + " ".join(f"{k}={v}" for k, v in THREAD_PINS.items()),
        "export " + " ".join(f"{k}={v}" for k, v in SAFE_PATH_ENV.items()),
        "export DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING=False",
        *(f"export {k}={shlex.quote(v)}" for k, v in http_env(dashboard).items()),
        # a worker whose node vanished (no TCP reset) is dropped after this, not 5 minutes
        "export DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL="
        f'"${{DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL:-{WORKER_TTL}}}"',
        *([_mpi_interface(slurm.interface)] if slurm.interface else []),
        # one node: Open MPI over shared memory, no TCP listener of the ranks on the network
        *(['export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"'] if slurm.nodes == 1 else []),
        f"PYTHON={shlex.quote(slurm.python or sys.executable)}",
        # -P: no directory of the job (its --chdir) on sys.path, where a planted module would run
        """"$PYTHON" -P -c '' 2>/dev/null || { echo "deisa: $PYTHON does not take -P """
        """(Python 3.11 or newer): it would put the job's directory on sys.path" >&2; exit 1; }""",
    ]


def _dask_steps(
    settings: RunSettings,
    slurm: SlurmSettings,
    srun: Callable[..., str],
    worker_nodes: tuple[int, int],
) -> dict[str, str]:
    """The template fields ``scheduler`` and ``workers``: their ``srun`` steps."""
    # one node: every Dask server on loopback; several: on --interface (or every interface),
    # which TLS keeps to the job's own processes. HTTP servers (dashboard, health) stay local.
    if slurm.nodes == 1:
        listen = f" --host {LOOPBACK}"
    else:
        listen = f" --interface {shlex.quote(slurm.interface)}" if slurm.interface else ""
    tls = _TLS_ARGS if settings.tls else _UCX_ARGS if settings.protocol == "ucx" else ""
    http = f" --dashboard-address {LOOPBACK}:0"
    pages = settings.dashboard and dashboard_available()
    dashboard = " --dashboard" if pages else " --no-dashboard"
    # deisa's worker plugin (settings.BRIDGE_WORKER) is there before the ranks connect, and
    # the PCA's warm-up (or --worker-preload's module) runs while they start; the
    # configuration's preloads (DASK_DISTRIBUTED__WORKER__PRELOAD at sbatch time) are kept
    preload = "".join(f" {shlex.quote(a)}" for a in preload_args(settings.worker_preload))
    threads = settings.threads
    return {
        "scheduler": srun(
            (0, 1), 1, 1, "scheduler-%N",
            '"$PYTHON" -P -m dask scheduler --scheduler-file "$SCHEDULER_FILE" --port 0'
            f"{listen}{dashboard}{http}{tls}",
        ),
        # each worker spills to its task's private TMPDIR (_srun)
        "workers": srun(
            worker_nodes, settings.workers, threads, "workers-%N-%t",
            f'"$PYTHON" -P -m dask worker --scheduler-file "$SCHEDULER_FILE" '
            f"--nthreads {threads} \\\n    --no-nanny --no-dashboard{http}{preload}{listen}{tls}",
            no_kill=True,
        ),
    }  # fmt: skip


PRIVATE_TMP = "bash -c 'deisa_private_tmp \"$@\"' deisa-tmp"
"""What runs each task of the job: the job script's ``deisa_private_tmp`` (exported to the
tasks), which makes a private directory of the task on its node (0700, checked, under a
``TMPDIR`` that no other account can change), runs the task with it as ``TMPDIR`` and Dask's
``temporary-directory``, and removes it when the task ends."""


_TLS_ARGS = " --protocol tls"
"""``dask scheduler`` and ``dask worker``: TLS only. The files come from the environment (the
job exports Dask's ``DASK_DISTRIBUTED__COMM__TLS__*`` variables, and deisa's ``DEISA_TLS_*``
for the ranks' notices: :func:`~deisa.launcher.security.tls_env`): ``--tls-*`` options would
make ``dask scheduler`` refuse ``--interface`` ("Can not specify both interface and host")."""


_UCX_ARGS = " --protocol ucx"
"""``dask scheduler`` and ``dask worker`` with ``--protocol ucx`` (``--insecure`` only:
:func:`deisa.launcher.ucx.check_protocol`)."""


def _security_lines(tls: bool, nodes: int, protocol: str = "tcp") -> str:
    """The job's credentials, made on its first node and handed to every step through Dask's
    configuration variables and deisa's names of the same files (each value a double-quoted
    ``"$TLS/..."``); or the warning of ``--insecure`` (with ``protocol`` ``ucx``, and the check
    that the job's Python imports distributed-ucxx)."""
    if protocol == "ucx":
        return "\n".join(
            [
                f'"$PYTHON" -c "import {UCX_MODULE}" 2>/dev/null || {{ echo "deisa: --protocol '
                f'ucx: $PYTHON cannot import {UCX_MODULE}: {UCX_INSTALL}" >&2; exit 1; }}',
                'echo "deisa: warning: --insecure: the Dask processes speak UCX without '
                "authentication and listen on every interface (distributed-ucxx's listener); "
                'whoever reaches them runs code as you" >&2',
            ]
        )
    if not tls:
        where = "this node" if nodes == 1 else "the network"
        return (
            f'echo "deisa: warning: --insecure: the Dask processes listen on {where} over plain '
            'TCP without authentication; whoever reaches them runs code as you" >&2'
        )
    env = tls_env('"$TLS/ca.pem"', '"$TLS/cert.pem"', '"$TLS/key.pem"')
    return "\n".join(
        [
            "# Mutual TLS between every process of the job (docs/security.md): fresh credentials,",
            "# private to you, removed when the job ends; the key never leaves its file.",
            'TLS="$OUT/tls"',
            '"$PYTHON" -P -m deisa.launcher.security "$TLS" || exit 1',
            *(f"export {k}={v}" for k, v in env.items()),
        ]
    )


_JOB_WORD = re.compile(r"\$(PYTHON|SCHEDULER_FILE|OUT(/[A-Za-z0-9_.-]+)*)")
"""The words that name the job's own variables (``$PYTHON``, ``$SCHEDULER_FILE``,
``$OUT/simulation.yml``...), the only words the script leaves for bash to expand."""

_PYTHON = "\0$PYTHON"
"""Stands for the job's interpreter in a user's command (:func:`_user_words`): no argument
holds a NUL, so no word a user gives is taken for it."""


def _shell_word(word: str) -> str:
    """``word`` for bash: one of the job's variables (:data:`_JOB_WORD`) in double quotes,
    expanded by the job; any other word, the user's included, quoted as it is."""
    return f'"{word}"' if _JOB_WORD.fullmatch(word) else shlex.quote(word)


def _sbatch_word(text: str) -> str:
    """``text`` as one word of an ``#SBATCH`` line. sbatch reads these lines itself (not
    bash): a newline ends the line whatever the quoting, an unquoted space ends the word even
    after a backslash, an unquoted ``#`` the line, and a backslash takes the next character as
    it is, within quotes too. So a word of other than the plainest characters goes in double
    quotes, with a backslash before each ``"`` and ``\\``.

    Raises
    ------
    ValueError
        ``text`` holds a newline (the settings refuse one before).
    """
    if "\n" in text:
        raise ValueError(f"{text!r}: a newline cannot be written on an #SBATCH line")
    if re.fullmatch(r"[\w@%+=:,./-]+", text, re.ASCII):
        return text
    return '"' + re.sub(r'(["\\])', r"\\\1", text) + '"'


def _comment(text: str) -> str:
    """``text`` for a ``#`` comment: on one line, its control characters escaped (a newline
    in a user's word would end the comment, and bash would run the rest)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _simulation_step(
    settings: RunSettings, bridge: BridgeOptions, *, output: Path
) -> dict[str, str]:
    """Template fields of the simulation and client steps: ``solver`` (words),
    ``solver_setup``, ``simulation_command`` and ``analytics_command``."""
    timings = False
    if settings.command:  # the user's simulation: the scheduler file comes from the environment
        command = _user_words(python_script(settings.command, _PYTHON))
        description = f"your command ({shlex.join(settings.command)})"
        plugin = find_plugin(settings.build_dir)
        setup = ""
        if plugin.directory is not None:
            setup = f"\n# the deisa PDI plugin, {_comment(plugin.origin)}\n"
            setup += _plugin_path(plugin.directory)
        engine = find_engine(settings.build_dir)
        if engine.directory is not None:
            setup += f"\n# the deisa ADIOS2 engine, {_comment(engine.origin)}\n"
            setup += _engine_path(engine.directory)
    else:
        command, description, setup, timings = _solver_step(settings, bridge, output)
    return {
        "solver": description,
        "solver_setup": setup,
        "simulation_command": command,
        "analytics_command": _analytics_step(settings, timings),
    }


def _srun(
    srun_args: str,
    nodes: tuple[int, int],
    ntasks: int,
    cpus: int,
    log: str,
    command: str,
    *,
    mpi: str | None = None,
    no_kill: bool = False,
) -> str:
    """One ``srun --exact`` step: on ``nodes`` (first, count), ``ntasks`` tasks of ``cpus``
    CPUs, logging to ``$LOGS/<log>.log``, running ``command`` (bash words) in a private
    temporary directory of its own (:data:`PRIVATE_TMP`)."""
    first, count = nodes
    options = f"--exact --nodes={count} --relative={first} --ntasks={ntasks} --cpus-per-task={cpus}"
    if no_kill:  # a node that fails ends its own tasks, the step goes on on the others
        options += " --no-kill"
    if mpi is not None:  # the simulation: a rank that fails ends the step, as mpirun does
        # (an MPI that does not abort would leave the others hung, rank 0's heartbeat going)
        options += f" --mpi={shlex.quote(mpi)} --kill-on-bad-exit=1"
    return f'srun {options} --output="$LOGS/{log}.log"{srun_args} \\\n    {PRIVATE_TMP} {command}'


def _user_words(words: list[str]) -> str:
    """The user's command for bash: every word quoted as it is, but :data:`_PYTHON` (the
    job's interpreter, put before a ``.py`` script), which becomes ``"$PYTHON"``."""
    return " ".join('"$PYTHON"' if w == _PYTHON else shlex.quote(w) for w in words)


def _analytics_step(settings: RunSettings, timings: bool) -> str:
    """The client step's command: the user's analytics, else ``deisa-run analytics``."""
    if settings.analytics is not None:
        return _user_words(analytics_argv(settings.analytics, _PYTHON))
    # the C solver writes no timings.json: the client must not wait for one
    stop = settings.stop_when_converged
    timings_option = ' --timings "$OUT/timings.json"' if timings else ""
    stop_option = "" if stop is None else f" --stop-when-converged {stop}"
    if settings.step_timeout is not None:
        stop_option += f" --step-timeout {settings.step_timeout}"
    dashboard = " --dashboard" if settings.dashboard else ""
    return (
        f'"$PYTHON" -P -m deisa.launcher analytics --scheduler-file "$SCHEDULER_FILE" '
        f"--workers {settings.workers} \\\n"
        f"    --array {shlex.quote(settings.array)} --n-components {settings.n_components} "
        f'--output "$OUT"{timings_option} \\\n'
        f"    --timeout {settings.timeout}{stop_option}{dashboard} --shutdown"
    )


def _engine_path(directory: Path) -> str:
    return (
        f"export ADIOS2_PLUGIN_PATH={shlex.quote(str(directory))}"
        '"${ADIOS2_PLUGIN_PATH:+:$ADIOS2_PLUGIN_PATH}"\n'
    )


def _plugin_path(directory: Path) -> str:
    return (
        f"export PDI_PLUGIN_PATH={shlex.quote(str(directory))}"
        '"${PDI_PLUGIN_PATH:+:$PDI_PLUGIN_PATH}"\n'
    )


def _solver_step(
    settings: RunSettings, bridge: BridgeOptions, output: Path
) -> tuple[str, str, str, bool]:
    """The heat solver's command, description, setup lines, and whether it writes timings."""
    # The Python solver reads the job's scheduler file from the script's variable; the C
    # solver's PDI YAML is written by a quoted heredoc, where `sed` puts the job ID in.
    scheduler_file = (
        "$SCHEDULER_FILE" if settings.solver == "python" else f"{output}/{JOB_ID}/scheduler.json"
    )
    sim = simulation_command(
        dataclasses.replace(settings, bridge=bridge),
        python="$PYTHON",
        sim_config="$OUT/simulation.yml",
        scheduler_file=scheduler_file,
        timings="$OUT/timings.json",
        pdi_file="$OUT/pdi.yml",
    )
    words = [_shell_word(w) for w in sim.argv]
    if "--array" in sim.argv:  # the Python solver's options, on a line of their own
        at = sim.argv.index("--array")
        command = " ".join(words[:at]) + " \\\n    " + " ".join(words[at:])
    else:
        command = " ".join(words)
    setup = ""
    if sim.pdi is not None and sim.plugin_dir is not None:
        # as the Python solver's flags: wait for every worker, as long as the job waits
        sim.pdi["plugins"]["deisa"].update(
            min_workers=bridge.min_workers, connect_timeout=bridge.connect_timeout
        )
        setup = (
            f"\n# PDI configuration of the C solver: {_comment(str(settings.pdi_config))}, its "
            "deisa block set "
            "for this job\n"
            f'sed "s/{JOB_ID}/$SLURM_JOB_ID/g" > "$OUT/pdi.yml" <<\'DEISA_PDI_YML\'\n'
            f"{yaml.safe_dump(sim.pdi, sort_keys=False, default_flow_style=None)}DEISA_PDI_YML\n"
            + _plugin_path(sim.plugin_dir)
        )
    return command, sim.description, setup, sim.timings


@dataclass(frozen=True)
class _Node:
    """What one node of the allocation runs."""

    index: int
    scheduler: bool
    workers: int
    ranks: int
    cpus: int


def _even(total: int, count: int) -> list[int]:
    """``total`` tasks over ``count`` nodes as Slurm spreads a step's tasks: evenly, the first
    nodes taking one more."""
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


def _plan(
    nodes: int,
    worker_nodes: tuple[int, int],
    simulation_nodes: tuple[int, int],
    workers: int,
    threads: int,
    ranks: int,
) -> list[_Node]:
    """Every node's scheduler (node 0), workers and ranks, and the CPUs they take."""
    on_node = {i: [0, 0] for i in range(nodes)}
    for (first, count), total, slot in ((worker_nodes, workers, 0), (simulation_nodes, ranks, 1)):
        for offset, n in enumerate(_even(total, count)):
            on_node[first + offset][slot] = n
    return [
        _Node(i, i == 0, w, r, (2 if i == 0 else 0) + w * threads + r)
        for i, (w, r) in on_node.items()
    ]


def _describe(plan: list[_Node], threads: int) -> str:
    """The layout as comment lines, one per node (or per run of identical nodes)."""
    lines: list[tuple[list[int], str]] = []
    for node in plan:
        parts = ["scheduler + client"] if node.scheduler else []
        if node.workers:
            worker = "worker" if node.workers == 1 else "workers"
            thread = "thread" if threads == 1 else "threads"
            parts.append(f"{node.workers} {worker} x {threads} {thread}")
        if node.ranks:
            parts.append(f"{node.ranks} rank{'s' if node.ranks > 1 else ''}")
        text = f"{', '.join(parts)} ({node.cpus} CPUs)"
        if lines and lines[-1][1] == text and not node.scheduler:
            lines[-1][0].append(node.index)
        else:
            lines.append(([node.index], text))
    return "\n".join(f"#   {_nodes(indices[0], len(indices))}: {text}" for indices, text in lines)


def _mpi_interface(interface: str | None) -> str:
    """The line keeping Open MPI's TCP traffic on ``interface`` (empty without one)."""
    if not interface:
        return ""
    quoted = shlex.quote(interface)
    return f"export OMPI_MCA_btl_tcp_if_include={quoted} OMPI_MCA_oob_tcp_if_include={quoted}"


def _nodes(first: int, count: int) -> str:
    return f"node {first}" if count == 1 else f"nodes {first}-{first + count - 1}"
