"""The plan of a run (:mod:`deisa.launcher.plan`): one description of every process, which the
local run starts and the Slurm writer renders, built once from the settings."""

from __future__ import annotations

import sys
from pathlib import Path

from deisa.launcher import parse, slurm, solver
from deisa.launcher.options import RUN, SLURM
from deisa.launcher.plan import USER_PYTHON, Process, Where, local_where, make_plan
from deisa.launcher.settings import RunSettings

JOB = Where("$PYTHON", USER_PYTHON, "$OUT", "$SCHEDULER_FILE", "/o/__SLURM_JOB_ID__/s.json",
            job=True, listen=("--host", "127.0.0.1"), comm=("--protocol", "tls"))  # fmt: skip


def settings_of(command: str, *argv: str) -> RunSettings:
    return parse.run_settings(command, list(argv))


def test_a_search_path_gets_the_directory_first(tmp_path: Path) -> None:
    process = Process("simulation", ["sim"], {"A": "1"}, {"ADIOS2_PLUGIN_PATH": tmp_path})
    assert process.environment({}) == {"A": "1", "ADIOS2_PLUGIN_PATH": str(tmp_path)}
    held = {"ADIOS2_PLUGIN_PATH": "/a:/b"}
    assert process.environment(held)["ADIOS2_PLUGIN_PATH"] == f"{tmp_path}:/a:/b"


def test_local_and_job_plans_differ_only_in_how_paths_are_spelled(tmp_path: Path) -> None:
    argv = ("--solver", "python", "--ranks", "2", "--workers", "3", "--threads", "2",
            "-o", str(tmp_path / "out"))  # fmt: skip
    settings = settings_of(RUN, *argv)
    here = make_plan(settings, local_where(settings.output, []))
    job = make_plan(settings, JOB)
    out = str(settings.output)
    spelled = {sys.executable: "$PYTHON", out: "$OUT", f"{out}/scheduler.json": "$SCHEDULER_FILE"}

    def as_job(words: list[str]) -> list[str]:
        words = [spelled.get(w, w) for w in words]
        return [w.replace(out, "$OUT") for w in words]

    # the job waits for every worker before placing (min_workers, connect_timeout): the rest
    # of the simulation's command is the same
    local_sim, job_sim = as_job(here.simulation.argv), list(job.simulation.argv)
    bridge = settings.bridge
    local = (str(bridge.connect_timeout), str(bridge.min_workers))
    for sim, values in ((local_sim, local), (job_sim, (str(settings.timeout), "3"))):
        for flag, value in zip(("--connect-timeout", "--min-workers"), values, strict=True):
            assert sim[sim.index(flag) + 1] == value
            sim[sim.index(flag) + 1] = "..."
    assert local_sim == job_sim
    assert as_job(here.workers.argv) == job.workers.argv[:-2]  # less the job's --protocol tls
    assert (job.workers.tasks, job.workers.cores, job.simulation.tasks) == (3, 2, 2)
    assert here.files["simulation.yml"] == job.files["simulation.yml"]
    assert here.analytics is None  # the built-in PCA runs in the launcher itself
    assert job.analytics is not None and "--shutdown" in job.analytics.argv


def test_the_workers_command_is_dask_processes_one(tmp_path: Path) -> None:
    from deisa.launcher.dask_processes import worker_command

    settings = settings_of(RUN, "--solver", "python", "-o", str(tmp_path / "out"))
    plan = make_plan(settings, local_where(settings.output, ["--protocol", "tls"]))
    scheduler_file = str((settings.output / "scheduler.json").absolute())
    assert plan.workers.argv == worker_command(
        scheduler_file, None, settings.threads, preload=settings.worker_preload,
        comm=["--protocol", "tls"], memory=settings.memory_limit,
    )  # fmt: skip


def test_the_workers_memory_limit_is_given_or_sized_from_this_node_and_the_step(
    tmp_path: Path,
) -> None:
    from deisa.launcher.dask_processes import MIN_MEMORY_LIMIT, memory_limit

    def limit(command: str, *argv: str) -> str:
        settings = settings_of(command, "--solver", "python", "-o", str(tmp_path / "o"), *argv)
        argv = make_plan(settings, JOB if command == SLURM else None).workers.argv
        return argv[argv.index("--memory-limit") + 1]

    step = 8 * 1024 * 512  # float64, --size 1024 512
    auto = memory_limit(3, step)
    assert limit(RUN, "--size", "1024", "512", "--workers", "3") == str(auto)
    assert MIN_MEMORY_LIMIT <= auto <= (memory_limit(3, 0))
    assert memory_limit(2, 64 * 2**20, total=2**30) == (2**30 - 2 * 64 * 2**20) // 2
    assert memory_limit(4, 0, total=2**30) == MIN_MEMORY_LIMIT  # never below
    assert limit(RUN, "--memory-limit", "120MB") == "120000000"
    assert limit(RUN, "--memory-limit", "none") == "0"  # dask worker: no limit
    assert limit(SLURM, "--memory-limit", "auto") == "auto"  # dask's own, on the worker's node


def test_a_user_command_gets_the_scheduler_file_and_the_plugin(tmp_path: Path) -> None:
    build = tmp_path / "build"
    (build / "plugin").mkdir(parents=True)
    (build / "plugin" / solver.PLUGIN_FILE).write_bytes(b"")
    settings = settings_of(RUN, "--build-dir", str(build), "-o", str(tmp_path / "out"),
                           "--analytics", "ana.py", "--", "./sim", "$OUT")  # fmt: skip
    plan = make_plan(settings, local_where(settings.output, []))
    env = plan.simulation.environment({})
    assert env["DEISA_SCHEDULER_FILE"] == str(settings.output / "scheduler.json")
    assert env["PDI_PLUGIN_PATH"] == str(build / "plugin")
    assert plan.simulation.argv == ["./sim", "$OUT"] and plan.simulation.user
    assert plan.analytics is not None and plan.analytics.environment({}) == env
    assert plan.analytics.argv[-1] == str(Path("ana.py").absolute())
    job = make_plan(settings_of(SLURM, "--build-dir", str(build), "-o", str(tmp_path / "o"),
                                "--", "./sim", "$OUT"), JOB)  # fmt: skip
    assert job.simulation.env == {}  # the job exports the scheduler file for every step
    script = slurm.job_script(make_plan(settings_of(SLURM, "--build-dir", str(build), "-o",
                                          str(tmp_path / "o"), "--", "./sim", "$OUT")))  # fmt: skip
    assert f"export PDI_PLUGIN_PATH={build / 'plugin'}" in script
    assert "./sim '$OUT'" in script  # the user's word, not the job's variable
