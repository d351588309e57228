"""``deisa-run slurm``: no value a user gives reaches the job script as shell code.

Values written as they are (``--array``, ``--job-name``, ``--time``, ``--partition``,
``--account``, ``--mpi``, ``--interface``) must fit their grammar, else the command exits with
status 2 before printing anything; every other word is quoted. The quoting is checked with a
real ``bash`` running the whole script, ``srun`` replaced by a function that records its
arguments, and with sbatch's own reading of ``#SBATCH`` lines. No Slurm is needed.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import test_env

from deisa.launcher import checks, cli, options, parse, slurm
from deisa.launcher.defaults import UsageError, load_defaults
from deisa.launcher.options import RUN, SLURM
from deisa.launcher.plan import make_plan

MARKER = "X"
INJECT = f"$(touch {MARKER})"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's directory, made the current one: where ``touch X`` would create ``X``."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def script_of(*argv: str) -> str:
    return slurm.job_script(make_plan(parse.run_settings(SLURM, list(argv))))


# -- refused before anything is printed -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--array", INJECT], "--array"),
        (["--array", "gtemp\n"], "--array"),
        (["--job-name", f"deisa\ntouch {MARKER}"], "--job-name"),
        (["--job-name", f"a;touch {MARKER}"], "--job-name"),
        (["--time", f"00:10:00\ntouch {MARKER}"], "--time"),
        (["--time", "00:10:00\n"], "--time"),  # a trailing newline is no exception
        (["--partition", f"debug\ntouch {MARKER}"], "--partition"),
        (["--partition", "a,,b"], "--partition"),
        (["--account", f"me\ntouch {MARKER}"], "--account"),
        (["--account", INJECT], "--account"),
        (["--mpi", f"pmix;touch {MARKER}"], "--mpi"),
        (["--interface", f"ib0 {INJECT}"], "--interface"),
        (["--workdir", f"w\ntouch {MARKER}"], "--workdir"),
        (["-o", f"out\ntouch {MARKER}"], "--output"),
    ],
)
def test_slurm_values_out_of_their_grammar_exit_2_naming_the_option(
    argv: list[str], option: str, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.slurm_main([*argv, "--solver", "python"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"deisa-run slurm: error: {option}=")
    assert captured.err.count("\n") == 1, captured.err  # one line: the value's newline escaped
    assert list(here.iterdir()) == []  # no output directory, no marker


def test_an_injection_attempt_through_the_real_command_exits_2(here: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deisa.launcher", "slurm", "--array", INJECT],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"deisa-run slurm: error: --array={INJECT!r} must be an identifier: " \
        "letters, digits and _, not starting with a digit\n"  # fmt: skip
    assert not (here / MARKER).exists()


@pytest.mark.parametrize(
    "value", ["30", "10:00", "01:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED", "infinite"]
)
def test_slurm_times(value: str) -> None:
    assert checks.SLURM_GRAMMARS["time"].check("--time", value) == value


@pytest.mark.parametrize("value", ["", "1h", "1:2:3:4", "-1", "1-", "1-2-3", " 10", 3600])
def test_bad_slurm_times(value: object) -> None:
    with pytest.raises(UsageError, match="must be a Slurm time"):
        checks.SLURM_GRAMMARS["time"].check("--time", value)


@pytest.mark.parametrize("value", ["gtemp", "_t", "T2"])
def test_arrays_are_identifiers(value: str) -> None:
    checks.ARRAY.check("--array", value)


@pytest.mark.parametrize("value", ["", "2t", "g-temp", "g.temp", "$t", "g temp", "gtémp", None])
def test_bad_arrays(value: object) -> None:
    with pytest.raises(UsageError, match="must be an identifier"):
        checks.ARRAY.check("--array", value)


def test_account_is_an_option_with_its_defaults_key(tmp_path: Path) -> None:
    assert "--account" not in script_of("--solver", "python")
    header = script_of("--solver", "python", "-A", "proj-1").splitlines()[:12]
    assert "#SBATCH --account=proj-1" in header
    mine = tmp_path / "mine.yml"
    mine.write_text("slurm: {account: proj_2}\n")
    assert "#SBATCH --account=proj_2" in script_of("--solver", "python", "--defaults", str(mine))
    mine.write_text("slurm: {account: 'a b'}\n")
    with pytest.raises(UsageError, match=rf"^{mine}: slurm.account='a b' must be a plain name"):
        script_of("--solver", "python", "--defaults", str(mine))
    help_text = options.build_parser(SLURM, load_defaults()).format_help()
    assert "account charged for the job" in " ".join(help_text.split())


# -- --timeout ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-5"])
@pytest.mark.parametrize("command", [RUN, SLURM])
def test_timeout_must_be_a_finite_positive_number(command: str, value: str) -> None:
    with pytest.raises(UsageError, match=rf"^--timeout={float(value)!r} must be a (finite )?pos"):
        parse.run_settings(command, [f"--timeout={value}", "--solver", "python"])


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-5"])
def test_analytics_timeout_must_be_a_finite_positive_number(
    value: str, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.analytics_main(["--scheduler-file", "s.json", f"--timeout={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"deisa-run analytics: error: --timeout={float(value)!r} must be a")
    assert err.count("\n") == 1
    mine = here / "mine.yml"
    mine.write_text("slurm: {timeout: .inf}\n")
    with pytest.raises(UsageError, match=rf"^{mine}: slurm.timeout=inf must be a finite"):
        parse.analytics_settings(["--scheduler-file", "s.json", "--defaults", str(mine)])


@pytest.mark.parametrize("command", ["slurm", "run"])
def test_timeout_inf_exits_2_in_one_line(command: str, here: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deisa.launcher", command, "--timeout", "inf", "-o", "out"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    prog = "deisa-run slurm" if command == "slurm" else "deisa-run"
    assert (
        proc.stderr == f"{prog}: error: --timeout=inf must be a finite positive number of seconds\n"
    )
    assert not (here / "out").exists()


def test_a_fraction_of_a_second_still_waits_for_the_scheduler() -> None:
    assert "$(seq 1)" in script_of("--solver", "python", "--timeout", "0.5")


# -- quoted where written -------------------------------------------------------------------------


def test_shell_word_leaves_only_the_jobs_variables_to_bash() -> None:
    for word in ("$PYTHON", "$SCHEDULER_FILE", "$OUT", "$OUT/simulation.yml", "$OUT/a_b-c.d"):
        assert slurm._shell_word(word) == f'"{word}"'
    for word in (INJECT, "$HOME", "$PYTHONX", "$OUT/$(id)", "$OUT/a b", "$OUT/`id`", "${PYTHON}"):
        assert slurm._shell_word(word) == "'" + word.replace("'", "'\"'\"'") + "'"


def sbatch_words(line: str) -> list[str]:
    """The words sbatch reads on an ``#SBATCH`` line (Slurm's src/sbatch/opt.c): a backslash
    takes the next character as it is, quoted or not; quotes group; an unquoted ``#`` ends the
    line; so does a newline, whatever the quoting."""
    rest, words, i = line.removeprefix("#SBATCH"), [], 0
    while True:
        while i < len(rest) and rest[i].isspace():
            i += 1
        if i == len(rest) or rest[i] == "#":
            return words
        word: list[str] = []
        quote, escaped = "", False
        while i < len(rest) and (quote or not rest[i].isspace()):
            char, i = rest[i], i + 1
            if escaped:
                word.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            elif quote:
                if char == quote:
                    quote = ""
                else:
                    word.append(char)
            elif char in "\"'":
                quote = char
            elif char == "#":
                i = len(rest)
            else:
                word.append(char)
        assert not quote, f"sbatch: unmatched {quote} in {line!r}"
        words.append("".join(word))


def odd_python(tmp_path: Path) -> Path:
    """A working interpreter at a path full of what a shell would read: spaces, ``$``, quotes,
    a backslash, ``#``, a newline and a command substitution."""
    directory = tmp_path / f"py $HOME 'q' \"d\" \\ #1\n{INJECT}"
    directory.mkdir()
    python = directory / "python"
    python.symlink_to(sys.executable)
    return python


def run_with_fake_srun(script: str, tmp_path: Path) -> dict[str, list[str]]:
    """Run ``script`` with a real ``bash`` in ``tmp_path``, ``srun`` a function that records
    its arguments (and writes the scheduler file, as the scheduler would): ``{step: argv}``
    of its calls, each step named by its log (``scheduler``, ``workers``...)."""
    calls = tmp_path / "calls"
    calls.mkdir()
    (tmp_path / "job.sh").write_text(script)
    fake_srun = (
        '() { printf "%s\\0" "$@" > "$(mktemp "$CALLS/call.XXXXXX")"; '
        'echo "{}" > "$DEISA_SCHEDULER_FILE"; }'
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SLURM_JOB_ID": "7",
        "CALLS": str(calls),
        "PYTHONPATH": test_env()["PYTHONPATH"],  # the job's Python runs this deisa's checks
        "BASH_FUNC_srun%%": fake_srun,
    }
    done = subprocess.run(
        ["bash", str(tmp_path / "job.sh")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    steps = {}
    for call in calls.iterdir():
        argv = call.read_bytes().decode().split("\0")[:-1]
        log = next(Path(a).name for a in argv if a.startswith("--output="))
        steps[log.split("-")[0]] = argv
    assert sorted(steps) == ["analytics", "scheduler", "simulation", "workers"], steps
    return steps


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_odd_but_legal_values_are_quoted_and_nothing_runs(tmp_path: Path) -> None:
    python = odd_python(tmp_path)
    workdir = tmp_path / f"work dir {INJECT} #1 'q' \\"
    output = tmp_path / f"out 100% {INJECT}"
    srun_args = ["--mem-per-cpu=1G", INJECT, "--comment=a b;c"]
    user_command = ["./sim", "$PYTHON", f"a\nb; touch {MARKER} #", "it's", INJECT]
    analytics = f"'{INJECT}' --x '$PYTHON'"
    argv = [
        "--python", str(python), "--workdir", str(workdir), "-o", str(output),
        "--job-name", "a.b+c-d_e", "--time", "1-00:00:00", "--partition", "p1,p_2",
        "--account", "acc_1", "--mpi", "pmi2", "--insecure",
        *(f"--srun-arg={arg}" for arg in srun_args),
        "--analytics", analytics, "--", *user_command,
    ]  # fmt: skip
    script = script_of(*argv)
    (tmp_path / "syntax.sh").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "syntax.sh")], check=True, timeout=30)

    # sbatch reads every #SBATCH line as one option, with the value given
    header = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            words = sbatch_words(line)
            assert len(words) == 1, line
            key, _, value = words[0].partition("=")
            header[key] = value
    assert header["--chdir"] == str(workdir)
    assert header["--output"] == str(output).replace("%", "%%") + "/slurm-%j.out"
    assert (header["--job-name"], header["--time"]) == ("a.b+c-d_e", "1-00:00:00")
    assert (header["--partition"], header["--account"]) == ("p1,p_2", "acc_1")
    # the comment naming the user's command stays one comment line
    simulation_comment = next(line for line in script.splitlines() if "# Simulation:" in line)
    assert "a\\nb; touch X #" in simulation_comment

    steps = run_with_fake_srun(script, tmp_path)
    assert not list(tmp_path.rglob(MARKER))
    for step in steps.values():
        at = step.index(srun_args[0])
        assert step[at : at + len(srun_args)] == srun_args
    simulation = steps["simulation"]
    assert "--mpi=pmi2" in simulation
    assert simulation[-len(user_command) :] == user_command  # "$PYTHON" stays the user's word
    assert steps["analytics"][-3:] == [INJECT, "--x", "$PYTHON"]
    # --python, through the script's own PYTHON variable
    assert str(python) in steps["scheduler"] and str(python) in steps["workers"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_python_solver_step_quotes_the_interpreter(tmp_path: Path) -> None:
    python = odd_python(tmp_path)
    output = tmp_path / "out"
    script = script_of("--solver", "python", "--python", str(python), "-o", str(output),
                       "--insecure", f"--srun-arg={INJECT}")  # fmt: skip
    steps = run_with_fake_srun(script, tmp_path)
    assert not list(tmp_path.rglob(MARKER))
    simulation, client = steps["simulation"], steps["analytics"]
    at = simulation.index(str(python))
    # srun's last option, as given, then the task's private TMPDIR (deisa_private_tmp)
    assert simulation[at - 5 : at] == [INJECT, "bash", "-c", 'deisa_private_tmp "$@"', "deisa-tmp"]
    assert simulation[at + 1 : at + 5] == [
        "-P",
        "-m",
        "deisa_simulation.heat",
        f"{output}/7/simulation.yml",
    ]
    assert simulation[simulation.index("--scheduler-file") + 1] == f"{output}/7/scheduler.json"
    assert simulation[simulation.index("--array") + 1] == "gtemp"
    assert client[client.index("--array") + 1] == "gtemp"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_quoting_holds_for_values_the_grammar_would_refuse(tmp_path: Path) -> None:
    """Settings made in Python skip the command line's checks: the script still runs no word
    of theirs."""
    argv = ["--solver", "python", "--insecure", "-o", str(tmp_path / "o")]
    made = dataclasses.replace(parse.run_settings(SLURM, argv), array=INJECT)
    steps = run_with_fake_srun(slurm.job_script(make_plan(made)), tmp_path)
    assert not list(tmp_path.rglob(MARKER))
    for step in ("simulation", "analytics"):
        argv = steps[step]
        assert argv[argv.index("--array") + 1] == INJECT


# -- checked again when it runs, every task in a private TMPDIR ------------------------------------


def _job(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by a real ``bash`` in ``tmp_path``, ``srun`` a function that records
    that it was called (in ``$CALLS``)."""
    (tmp_path / "calls").mkdir(exist_ok=True)
    (tmp_path / "job.sh").write_text(script)
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SLURM_JOB_ID": "7",
        "CALLS": str(tmp_path / "calls"),
        "PYTHONPATH": test_env()["PYTHONPATH"],  # the job's Python runs this deisa's checks
        "BASH_FUNC_srun%%": '() { touch "$CALLS/srun"; echo "{}" > "$DEISA_SCHEDULER_FILE"; }',
    }
    return subprocess.run(
        ["bash", str(tmp_path / "job.sh")],
        cwd=tmp_path, env={**base, **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_job_checks_its_output_again_before_writing_anything(tmp_path: Path) -> None:
    """A parent of ``--output`` opened to other accounts between ``deisa-run slurm`` and the
    job's start: the job stops before it writes its credentials or starts a step."""
    parent = tmp_path / "shared"
    parent.mkdir()
    output = parent / "out"
    script = script_of("--solver", "python", "-o", str(output))
    parent.chmod(0o777)  # the attack: another account may now rename out/ and plant its own
    shutil.rmtree(output, ignore_errors=True)
    done = _job(script, tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"{parent} is writable by other accounts" in done.stderr
    assert not (tmp_path / "calls" / "srun").exists()
    assert not output.exists()  # nothing written, no credentials
    parent.chmod(0o700)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_job_checks_its_working_directory_again(tmp_path: Path) -> None:
    script = script_of("--solver", "python", "-o", str(tmp_path / "out"))
    tmp_path.chmod(0o777)  # the job's working directory (cwd, as sbatch --chdir), opened
    try:
        done = _job(script, tmp_path)
    finally:
        tmp_path.chmod(0o700)
    assert done.returncode == 1 and f"{tmp_path} is writable" in done.stderr, done.stderr
    assert not (tmp_path / "calls" / "srun").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_job_checks_its_interpreter_and_libraries_again(tmp_path: Path) -> None:
    """``--python``'s ``bin/`` opened to others after ``deisa-run slurm`` checked it, then the
    preloaded guard made writable by others: the job stops before any step, naming them."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    guard = tmp_path / "build" / "plugin" / "adios2" / "libdeisa_adios2_guard.so"
    guard.parent.mkdir(parents=True)
    (guard.parent / "libdeisa_adios2_engine.so").write_bytes(b"")
    guard.write_bytes(b"")
    script = script_of("--python", str(venv / "python"), "--build-dir", str(tmp_path / "build"),
                       "-o", str(tmp_path / "out"), "--", "./sim")  # fmt: skip
    assert _job(script, tmp_path).returncode == 0  # as checked
    (tmp_path / "calls" / "srun").unlink()
    venv.chmod(0o777)  # another account may now swap the link
    done = _job(script, tmp_path)
    assert done.returncode == 1 and f"{venv} is writable" in done.stderr, done.stderr
    assert f"the interpreter {venv / 'python'} is not safe" in done.stderr
    venv.chmod(0o755)
    guard.chmod(0o666)  # another account may now change what the simulation preloads
    done = _job(script, tmp_path)
    assert done.returncode == 1 and f"{guard} is writable" in done.stderr, done.stderr
    assert not (tmp_path / "calls" / "srun").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_job_removes_the_tmpdirs_its_killed_tasks_left(tmp_path: Path) -> None:
    """A task that srun killed left its private TMPDIR (``deisa-<job>.XXXXXX``): the job's end
    removes those of its node, not another job's, nor another account's."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    left = shared / "deisa-7.abcdef"
    (left / "dask-scratch-space").mkdir(parents=True)
    other_job = shared / "deisa-8.abcdef"
    other_job.mkdir()
    theirs = shared / "deisa-7.theirs"
    theirs.mkdir()
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)
    script = script_of("--solver", "python", "-o", str(tmp_path / "out"))
    done = _job(script, tmp_path, TMPDIR=str(shared))
    assert done.returncode == 0, done.stderr
    assert not left.exists() and other_job.exists()
    assert theirs.exists() or os.geteuid() != 0


def _functions(script: str) -> str:
    """The job script's own bash functions (``deisa_safe_dir``, ``deisa_private_tmp``)."""
    lines = script.splitlines()
    first = lines.index("deisa_safe_dir() {")
    last = next(i for i, line in enumerate(lines) if line.startswith("export -f "))
    return "\n".join(lines[first : last + 1]) + "\n"


PRINT_TMP = 'echo "$TMPDIR $DASK_TEMPORARY_DIRECTORY"; stat -c "%a %u" "$TMPDIR"; exit 3'


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_each_task_gets_a_private_tmpdir_removed_at_its_end(tmp_path: Path) -> None:
    """What ``srun`` runs (:data:`deisa.launcher.slurm.PRIVATE_TMP`) gives the task a 0700
    directory of its own as TMPDIR and Dask's temporary-directory, keeps its exit status,
    removes it; under a TMPDIR that other accounts may change, it runs nothing."""
    (tmp_path / "functions.sh").write_text(_functions(script_of("--solver", "python")))
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    (shared / "dask-scratch-space").mkdir(mode=0o777)  # planted by another account

    def task(command: str) -> subprocess.CompletedProcess[str]:
        wrapper = slurm.PRIVATE_TMP
        line = f"source functions.sh; {wrapper} bash -c {shlex.quote(command)}"
        env = {"PATH": os.environ["PATH"], "TMPDIR": str(shared), "SLURM_JOB_ID": "7"}
        return subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip

    done = task(PRINT_TMP)
    assert done.returncode == 3, done.stderr
    path, dask_path, mode = done.stdout.split()[0], done.stdout.split()[1], done.stdout.split()[2]
    assert (
        path == dask_path and Path(path).parent == shared and Path(path).name.startswith("deisa-7.")
    )
    assert mode == "700"
    assert not Path(path).exists()  # removed with the task
    assert sorted(p.name for p in shared.iterdir()) == ["dask-scratch-space"]
    shared.chmod(0o777)  # no sticky bit: another account could rename the task's directory
    done = task(f"touch {tmp_path / MARKER}")
    assert done.returncode == 1 and "without the sticky bit" in done.stderr
    assert not (tmp_path / MARKER).exists()
