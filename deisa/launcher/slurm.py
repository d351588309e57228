"""A Slurm batch script that co-launches the whole DEISA pipeline in one allocation.

:func:`job_script` fills ``deisa/templates/slurm_job.sh``: a Dask scheduler and the analytics
client (``deisa-run analytics``) on node 0, the Dask workers, then the MPI ranks of the heat
simulation (the Python solver, or the C solver through PDI and the deisa plugin), each a
concurrent ``srun --exact`` step, as in the DEISA paper's experiments. Every step is a process
of the run's :class:`~deisa.launcher.plan.RunPlan`, the one a local run starts: this module only
renders it (each command quoted for bash, the job's own variables left to it, its nodes,
tasks and cores as ``srun`` options) into the template, as dask-jobqueue's ``Job`` does.

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

import math
import re
import shlex
import string
import sys
from pathlib import Path

from .adios2_engine import PRELOAD
from .dask_processes import history_env, http_env
from .libraries import LOADER_VARIABLES
from .plan import JOB_ID, LIBRARIES, USER_PYTHON, Process, RunPlan
from .processes import NO_WORK_STEALING, SAFE_PATH_ENV, THREAD_PINS
from .security import tls_env
from .settings import SlurmSettings
from .slurm_layout import SCHEDULER_NODES, Node, describe_layout, layout
from .ucx import UCX_INSTALL, UCX_MODULE

__all__ = ["JOB_ID", "PRIVATE_TMP", "SCHEDULER_NODES", "WORKER_TTL", "job_script", "layout"]

TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "slurm_job.sh"
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


def job_script(plan: RunPlan) -> str:
    """The text of a batch script running scheduler, workers, client and simulation together.

    Parameters
    ----------
    plan
        The job's :class:`~deisa.launcher.plan.RunPlan`
        (:func:`~deisa.launcher.plan.make_plan` of the settings of ``deisa-run slurm``): its
        processes are those of a local run, spelled with the job's variables, each on its
        nodes; ``plan.job`` holds the allocation (nodes, layout, time, partition, job name,
        working directory, interpreter, ``srun --mpi`` plugin, network interface, extra
        ``srun`` options). The job writes ``slurm-<job>.out`` into ``plan.output`` and
        everything else into its own directory ``<job>/`` (``results.json``,
        ``simulation.yml``, the scheduler file, ``logs/``...), so jobs sharing an output
        directory do not overwrite each other. The Bridge fixes its placement once every
        worker has connected (``min_workers``), waiting up to ``plan.timeout``.

    Returns
    -------
    str
        The script; submit it with ``sbatch``.

    Raises
    ------
    ValueError
        ``plan`` is a local run's.

    Examples
    --------
    >>> from deisa.launcher.parse import run_settings
    >>> from deisa.launcher.plan import make_plan
    >>> settings = run_settings("slurm", ["--ranks", "4", "--workers", "2", "--solver", "python"])
    >>> "#SBATCH --ntasks=8" in job_script(make_plan(settings))
    True
    """
    if plan.job is None:
        raise ValueError("a local run's plan: make it from the settings of deisa-run slurm")
    slurm, nodes = plan.job.slurm, list(plan.job.nodes)
    cpus = sum(node.cpus for node in nodes)
    output = plan.output.absolute()
    srun_args = "".join(f" {shlex.quote(a)}" for a in slurm.srun_args)
    workers, threads, ranks = plan.workers.tasks, plan.workers.cores, plan.simulation.tasks
    fields = {
        "header": "\n".join(f"#SBATCH {line}" for line in _header(slurm, nodes, output)),
        "layout": describe_layout(nodes, threads),
        "solver": _comment(plan.description),
        "tasks": f"1 scheduler + 1 analytics client + {workers} workers x {threads} threads + "
        f"{ranks} MPI ranks = {cpus}",
        "environment": "\n".join(_environment(slurm, plan.dashboard)),
        "security": _security_lines(plan.tls, slurm.nodes, plan.protocol),
        "output": shlex.quote(str(output)),
        "simulation_yaml": plan.files["simulation.yml"],
        "solver_setup": _setup(plan),
        "start_timeout": math.ceil(plan.timeout),
        # the built-in analytics shuts the cluster down (--shutdown): its steps end by themselves
        "grace": SHUTDOWN_GRACE if plan.pca is not None else 0,
        "scheduler": _srun(srun_args, plan.scheduler, "scheduler-%N"),
        # each worker spills to its task's private TMPDIR (_srun)
        "workers": _srun(srun_args, plan.workers, "workers-%N-%t", no_kill=True),
        "analytics": _srun(srun_args, plan.analytics, "analytics-%N") if plan.analytics else "",
        "simulation": _srun(srun_args, plan.simulation, "simulation-%N-%t", mpi=slurm.mpi),
    }
    return _ScriptTemplate(TEMPLATE.read_text()).substitute(fields)


def _header(slurm: SlurmSettings, plan: list[Node], output: Path) -> list[str]:
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
    the lengths of distributed's histories (:func:`~deisa.launcher.dask_processes.history_env`),
    Open MPI's network, the interpreter (which must take ``-P``)."""
    return [
        "export " + " ".join(f"{k}={v}" for k, v in THREAD_PINS.items()),
        "export " + " ".join(f"{k}={v}" for k, v in SAFE_PATH_ENV.items()),
        "export " + " ".join(f"{k}={v}" for k, v in NO_WORK_STEALING.items()),
        *(f"export {k}={shlex.quote(v)}" for k, v in http_env(dashboard).items()),
        # distributed's histories shortened (a long run's memory level), unless the user set them
        *(f'export {k}="${{{k}:-{v}}}"' for k, v in history_env(dashboard).items()),
        # a worker whose node vanished (no TCP reset) is dropped after this, not 5 minutes
        "export DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL="
        f'"${{DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL:-{WORKER_TTL}}}"',
        *([_mpi_interface(slurm.interface)] if slurm.interface else []),
        # one node: Open MPI over shared memory, no TCP listener of the ranks on the network
        *(['export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"'] if slurm.nodes == 1 else []),
        f"PYTHON={shlex.quote(slurm.python or sys.executable)}",
        # checked as --python was (checks.interpreter): another account could have changed it
        'deisa_safe_dir "$PYTHON" || '
        '{ echo "deisa: the interpreter $PYTHON is not safe to run" >&2; exit 1; }',
        # -P: no directory of the job (its --chdir) on sys.path, where a planted module would run
        """"$PYTHON" -P -c '' 2>/dev/null || { echo "deisa: $PYTHON does not take -P """
        """(Python 3.11 or newer): it would put the job's directory on sys.path" >&2; exit 1; }""",
    ]


PRIVATE_TMP = "bash -c 'deisa_private_tmp \"$@\"' deisa-tmp"
"""What runs each task of the job: the job script's ``deisa_private_tmp`` (exported to the
tasks), which makes a private directory of the task on its node (0700, checked, under a
``TMPDIR`` that no other account can change), runs the task with it as ``TMPDIR`` and Dask's
``temporary-directory``, and removes it when the task ends."""


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


_BREAKS = {"workers": ("--no-nanny",), "analytics": ("--array", "--timeout"),
           "simulation": ("--array",)}  # fmt: skip
"""The options that begin a line of their own in each of deisa's commands."""


def _srun(
    srun_args: str, process: Process, log: str, *, mpi: str | None = None, no_kill: bool = False
) -> str:
    """The ``srun --exact`` step of ``process``: on its nodes (first, count), its tasks of its
    cores, logging to ``$LOGS/<log>.log``, running its command in a private temporary
    directory of each task (:data:`PRIVATE_TMP`)."""
    first, count = process.nodes
    options = f"--exact --nodes={count} --relative={first} --ntasks={process.tasks}"
    options += f" --cpus-per-task={process.cores}"
    if no_kill:  # a node that fails ends its own tasks, the step goes on on the others
        options += " --no-kill"
    if mpi is not None:  # the simulation: a rank that fails ends the step, as mpirun does
        # (an MPI that does not abort would leave the others hung, rank 0's heartbeat going)
        options += f" --mpi={shlex.quote(mpi)} --kill-on-bad-exit=1"
    # a preload (the ADIOS2 memory selection guard) for this step's processes only (_setup)
    preload = f'{PRELOAD}="${PRELOADED}" ' if PRELOAD in process.first_in else ""
    return (
        f'{preload}srun {options} --output="$LOGS/{log}.log"{srun_args} \\\n    {PRIVATE_TMP} '
        + _command(process)
    )


def _command(process: Process) -> str:
    """``process``'s command for bash: a user's every word quoted (:func:`_user_words`);
    deisa's with the job's variables left to bash (:func:`_shell_word`)."""
    if process.user:
        return _user_words(process.argv)
    breaks = _BREAKS.get(process.name, ())
    return "".join(
        (" \\\n    " if i and word in breaks else " " if i else "") + _shell_word(word)
        for i, word in enumerate(process.argv)
    )


PRELOADED = "DEISA_LD_PRELOAD"
"""The job's variable holding what the simulation's step gets as ``LD_PRELOAD`` (the ADIOS2
memory selection guard first, then the user's own): not exported, the other steps keep theirs."""


def _first_in(variable: str, directory: Path) -> str:
    """The line putting ``directory`` first in the search path ``variable`` (for
    ``LD_PRELOAD``: into :data:`PRELOADED`, which only the simulation's step gets), after the
    one checking again the library it hands over (``deisa_safe_dir``)."""
    value = f'{shlex.quote(str(directory))}"${{{variable}:+:${variable}}}"'
    # the library, checked again as the settings did (plan.LIBRARIES): it runs as you
    library = directory if variable == PRELOAD else directory / LIBRARIES.get(variable, "")
    check = f"deisa_safe_dir {shlex.quote(str(library))} || exit 1\n"
    return check + (
        f"{PRELOADED}={value}\n" if variable == PRELOAD else f"export {variable}={value}\n"
    )


def _setup(plan: RunPlan) -> str:
    """The lines before the steps: the C solver's PDI YAML, the search paths the simulation
    gets (the deisa PDI plugin, the ADIOS2 engine)."""
    setup = ""
    pdi_config = plan.job.pdi_config if plan.job is not None else ""
    if "pdi.yml" in plan.files:
        setup = (
            f"\n# PDI configuration of the C solver: {_comment(str(pdi_config))}, its "
            "deisa block set for this job\n"
            f'sed "s/{JOB_ID}/$SLURM_JOB_ID/g" > "$OUT/pdi.yml" <<\'DEISA_PDI_YML\'\n'
            f"{plan.files['pdi.yml']}DEISA_PDI_YML\n"
        )
    found = {var: (what, plugin) for what, var, plugin in plan.found}
    for variable, directory in plan.simulation.first_in.items():
        if variable in found:
            what, plugin = found[variable]
            setup += f"\n# {what}, {_comment(plugin.origin)}\n"
        setup += _first_in(variable, directory)
    return setup + _loader_check(plan)


def _loader_check(plan: RunPlan) -> str:
    """The line checking on the job's node what the simulation hands the loaders: its search
    paths and preloads as its step gets them, every entry absolute and private, every library
    there safe, the C solver's program too (``python -m`` :mod:`deisa.launcher.libraries`);
    none for the Python solver, which loads no plugin."""
    process = plan.simulation
    if not process.user and not process.first_in:
        return ""
    preload = PRELOADED if PRELOAD in process.first_in else PRELOAD
    words = [f'"{v}=${{{preload if v == PRELOAD else v}-}}"' for v in LOADER_VARIABLES]
    if "pdi.yml" in plan.files:  # the C solver: its program, its RUNPATH
        words.append(shlex.quote(process.argv[0]))
    return (
        "# what the simulation hands the loaders: absolute, private, no library of another "
        "account (docs/security.md)\n"
        f'"$PYTHON" -P -m deisa.launcher.libraries {" ".join(words)} || exit 1\n'
    )


def _user_words(words: list[str]) -> str:
    """The user's command for bash: every word quoted as it is, but
    :data:`~deisa.launcher.plan.USER_PYTHON` (the job's interpreter, put before a ``.py``
    script), which becomes ``"$PYTHON"``."""
    return " ".join('"$PYTHON"' if w == USER_PYTHON else shlex.quote(w) for w in words)


def _mpi_interface(interface: str | None) -> str:
    """The line keeping Open MPI's TCP traffic on ``interface`` (empty without one)."""
    if not interface:
        return ""
    quoted = shlex.quote(interface)
    return f"export OMPI_MCA_btl_tcp_if_include={quoted} OMPI_MCA_oob_tcp_if_include={quoted}"
