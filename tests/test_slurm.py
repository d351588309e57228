"""The Slurm batch script: its text without Slurm, and a real job on a one-node Slurm.

The real-job test starts its own slurmctld and slurmd (as root, on loopback, with
``auth/none``) from a generated ``slurm.conf`` in a temporary directory, and skips with the
reason when they cannot start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import dask.config
import multinode
import pytest
import yaml
from conftest import REPO, STARTUP
from distributed.utils_test import poll_for
from user_code import write_user_code

from deisa._dask_internals import workers_of
from deisa.bridge.tls_files import TLS_FILES_ENV
from deisa.launcher import parse, solver
from deisa.launcher.cli import slurm_main
from deisa.launcher.plan import make_plan
from deisa.launcher.processes import THREAD_PINS
from deisa.launcher.slurm import JOB_ID, PRIVATE_TMP, WORKER_TTL, job_script, layout

_FLAGS = {"output": "-o", "srun_args": "--srun-arg", "build_dir": "--build-dir"}


def slurm_script(*command: str, **options: Any) -> str:
    """The script of ``deisa-run slurm [--solver python] [options] [-- command]`` (the demo's
    Python solver without a command), each option given as a keyword (``worker_nodes=0``:
    ``--worker-nodes 0``; ``simulation={"steps": 3}``: ``--steps 3``)."""
    argv = [] if command else ["--solver", "python"]
    for key, value in {**options.pop("simulation", {}), **options}.items():
        flag = _FLAGS.get(key, "--" + key.replace("_", "-").replace("global-size", "size"))
        if key == "srun_args":  # values that start with a dash
            argv += [f"{flag}={item}" for item in value]
            continue
        words = value if isinstance(value, list) else ["none" if value is None else value]
        argv += [flag, *map(str, words)]
    if command:
        argv += ["--", *command]
    return job_script(make_plan(parse.run_settings("slurm", argv)))


# -- the script's text ----------------------------------------------------------------------------


def sbatch_lines(script: str) -> dict[str, str]:
    lines = {}
    for line in script.splitlines():
        match = re.match(r"#SBATCH --([\w-]+)=?(.*)", line)
        if match:
            lines[match.group(1)] = match.group(2)
    return lines


def srun_steps(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.lstrip().startswith("srun ")]


def simulation_step(script: str) -> str:
    """The simulation's ``srun`` command, all its continuation lines."""
    start = script.index(srun_steps(script)[3])
    return script[start : script.index("simulation=$!", start)]


def test_header_has_counts_time_and_partition(tmp_path: Path) -> None:
    script = slurm_script(
        ranks=4, workers=2, threads=3, time="00:05:00", partition="debug", output=tmp_path
    )
    header = sbatch_lines(script)
    assert script.startswith("#!/bin/bash\n")
    assert header["nodes"] == "1"
    assert header["ntasks"] == str(2 + 2 * 3 + 4)
    assert header["cpus-per-task"] == "1"
    assert header["time"] == "00:05:00"
    assert header["partition"] == "debug"
    assert header["output"] == f"{tmp_path}/slurm-%j.out"
    assert "exclusive" not in header


def test_header_without_partition_leaves_the_default() -> None:
    assert "partition" not in sbatch_lines(slurm_script())


def test_every_srun_step_is_exact() -> None:
    steps = srun_steps(slurm_script(ranks=4, workers=2))
    assert len(steps) == 4
    assert all("--exact" in step for step in steps)
    assert not any("--overlap" in step for step in steps)


def test_steps_have_the_requested_counts() -> None:
    script = slurm_script(ranks=6, workers=3, threads=2, mpi="pmi2")
    scheduler, workers, client, simulation = srun_steps(script)
    assert "--ntasks=1" in scheduler and "--relative=0" in scheduler
    assert "--ntasks=3 --cpus-per-task=2" in workers
    assert "--ntasks=1" in client and "--relative=0" in client
    assert "--ntasks=6" in simulation and "--mpi=pmi2" in simulation
    assert "--nthreads 2" in script
    assert "process_grid: [3, 2]" in script
    assert "deisa.launcher analytics" in script and "--workers 3" in script


def test_multi_node_layout_follows_the_paper() -> None:
    script = slurm_script(ranks=8, workers=4, nodes=5, worker_nodes=2)
    scheduler, workers, client, simulation = srun_steps(script)
    assert sbatch_lines(script)["nodes"] == "5"
    assert "exclusive" in sbatch_lines(script)
    assert "--nodes=1" in scheduler and "--relative=0" in scheduler
    assert "--nodes=1" in client and "--relative=0" in client
    assert "--nodes=2 --relative=1" in workers
    assert "--nodes=2 --relative=3" in simulation


def step_options(step: str) -> dict[str, str]:
    """``--name=value`` options of one ``srun`` line."""
    return dict(re.findall(r"--([\w-]+)=(\S+)", step.split(" \\")[0]))


def placed(script: str) -> dict[str, tuple[str, str]]:
    """``(nodes, relative)`` of each step: scheduler, workers, client, simulation."""
    names = ("scheduler", "workers", "client", "simulation")
    steps = (step_options(step) for step in srun_steps(script))
    return {name: (o["nodes"], o["relative"]) for name, o in zip(names, steps, strict=True)}


@pytest.mark.parametrize(
    ("options", "expected", "picture"),
    [
        pytest.param(
            {"nodes": 2, "worker_nodes": 0},
            {"workers": ("2", "0"), "simulation": ("2", "0")},
            [
                "#   node 0: scheduler + client, 1 worker x 1 thread, 2 ranks (5 CPUs)",
                "#   node 1: 1 worker x 1 thread, 2 ranks (3 CPUs)",
            ],
            id="colocated-shared",
        ),
        pytest.param(
            {"nodes": 3, "worker_nodes": 0},
            {"workers": ("2", "1"), "simulation": ("2", "1")},
            [
                "#   node 0: scheduler + client (2 CPUs)",
                "#   nodes 1-2: 1 worker x 1 thread, 2 ranks (3 CPUs)",
            ],
            id="colocated-own",
        ),
        pytest.param(
            {"nodes": 2, "worker_nodes": 1},
            {"workers": ("1", "0"), "simulation": ("1", "1")},
            [
                "#   node 0: scheduler + client, 2 workers x 1 thread (4 CPUs)",
                "#   node 1: 4 ranks (4 CPUs)",
            ],
            id="dedicated-shared",
        ),
        pytest.param(
            {"nodes": 3, "worker_nodes": 1},
            {"workers": ("1", "1"), "simulation": ("1", "2")},
            [
                "#   node 0: scheduler + client (2 CPUs)",
                "#   node 1: 2 workers x 1 thread (2 CPUs)",
                "#   node 2: 4 ranks (4 CPUs)",
            ],
            id="dedicated-own",
        ),
        pytest.param(
            {"nodes": 3, "worker_nodes": 1, "scheduler_node": "shared"},
            {"workers": ("1", "0"), "simulation": ("2", "1")},
            [
                "#   node 0: scheduler + client, 2 workers x 1 thread (4 CPUs)",
                "#   nodes 1-2: 2 ranks (2 CPUs)",
            ],
            id="dedicated-shared-3",
        ),
    ],
)
def test_layouts_place_every_step(
    options: dict[str, Any], expected: dict[str, tuple[str, str]], picture: list[str]
) -> None:
    script = slurm_script(ranks=4, workers=2, **options)
    header = sbatch_lines(script)
    assert header["nodes"] == str(options["nodes"])
    assert header["ntasks"] == "8"
    assert "exclusive" in header
    cpus = [int(m) for m in re.findall(r"\((\d+) CPUs\)", script)]
    assert header["mincpus"] == str(max(cpus))
    assert placed(script) == {"scheduler": ("1", "0"), "client": ("1", "0"), **expected}
    assert "\n".join(picture) in script


def test_one_node_runs_everything() -> None:
    script = slurm_script(ranks=4, workers=2)
    assert set(placed(script).values()) == {("1", "0")}
    assert "exclusive" not in sbatch_lines(script) and "mincpus" not in sbatch_lines(script)
    assert "#   node 0: scheduler + client, 2 workers x 1 thread, 4 ranks (8 CPUs)" in script


def full_steps(script: str) -> list[str]:
    """Each ``srun`` step with its continuation lines."""
    return [
        re.sub(r"\\\n\s*", "", step) for step in re.findall(r"^srun (?:.*\\\n)*.*$", script, re.M)
    ]


def test_interface_binds_dask_and_mpi() -> None:
    script = slurm_script(nodes=2, worker_nodes=0, interface="ib0")
    scheduler, workers, client, simulation = full_steps(script)
    assert "dask scheduler" in scheduler and " --interface ib0 " in scheduler
    assert "dask worker" in workers and " --interface ib0 " in workers
    assert "--interface" not in client + simulation
    assert "export OMPI_MCA_btl_tcp_if_include=ib0 OMPI_MCA_oob_tcp_if_include=ib0\n" in script
    assert "OMPI_MCA_btl_tcp_if_include" not in slurm_script(nodes=2, worker_nodes=0)


def test_a_lost_node_costs_its_workers_not_the_job(tmp_path: Path) -> None:
    """A multi-node job survives a node's failure (sbatch --no-kill), the workers' step loses
    only that node's tasks (srun --no-kill), and the scheduler drops a silent worker after
    WORKER_TTL unless the environment at sbatch time says otherwise."""
    script = slurm_script(nodes=3, worker_nodes=1, output=tmp_path / "out")
    assert "no-kill" in sbatch_lines(script) and "no-kill" not in sbatch_lines(slurm_script())
    scheduler, workers, client, simulation = srun_steps(script)
    assert "--no-kill" in workers
    assert not any("--no-kill" in step for step in (scheduler, client, simulation))
    shell = preamble(script) + 'echo "$DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"'
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7", "HOME": str(tmp_path)}
    for given, expected in ((None, WORKER_TTL), ("15s", "15s")):
        extra = {} if given is None else {"DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": given}
        done = subprocess.run(
            ["bash", "-c", shell],
            env=env | extra, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert done.stdout.splitlines()[-1] == expected


def test_scheduler_takes_a_free_port() -> None:
    script = slurm_script()
    assert '--scheduler-file "$SCHEDULER_FILE" --port 0 ' in script
    assert "8786" not in script


def test_the_placement_waits_for_every_worker() -> None:
    command = simulation_step(slurm_script(workers=3, timeout=200, placement="node_local"))
    assert "--placement node_local" in command
    assert "--connect-timeout 200.0 --min-workers 3" in command


def test_jobs_sharing_an_output_directory_write_apart(tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = slurm_script(output=out, simulation={"steps": 3})
    for job in ("41", "42"):
        env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": job}
        shell = preamble(script) + 'echo "$OUT $SCHEDULER_FILE $LOGS"'
        done = subprocess.run(
            ["bash", "-c", shell], env=env, capture_output=True, text=True, timeout=30, check=True
        )
        assert done.stdout.split() == [
            f"{out}/{job}",
            f"{out}/{job}/scheduler.json",
            f"{out}/{job}/logs",
        ]
    for job in ("41", "42"):
        assert "steps: 3" in (out / job / "simulation.yml").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["41", "42"]
    # every output of the job is under $OUT: timings, results (the client's --output), logs
    assert '--output "$OUT" --timings "$OUT/timings.json"' in script
    assert all('--output="$LOGS/' in step for step in srun_steps(script))


@pytest.mark.parametrize(
    ("nodes", "worker_nodes", "expected"),
    [(1, None, ((0, 1), (0, 1))), (2, None, ((0, 1), (1, 1))), (3, None, ((1, 1), (2, 1)))],
)
def test_layout_defaults(nodes: int, worker_nodes: int | None, expected: tuple) -> None:
    assert layout(nodes, worker_nodes) == expected


def test_layout_needs_a_simulation_node() -> None:
    with pytest.raises(ValueError, match=r"worker_nodes=3 must be between 0 .* and nodes - 1 = 2"):
        layout(3, 3)
    with pytest.raises(
        ValueError, match="scheduler_node='own' with worker_nodes=2 needs nodes >= 4"
    ):
        layout(3, 2, "own")
    with pytest.raises(
        ValueError, match="scheduler_node='own' with worker_nodes=0 needs nodes >= 2"
    ):
        layout(1, 0, "own")
    with pytest.raises(ValueError, match="scheduler_node='alone': one of auto, own, shared"):
        layout(3, 1, "alone")


def test_grid_must_match_ranks() -> None:
    with pytest.raises(ValueError, match="--process-grid 3 1 has 3 ranks, --ranks is 4"):
        slurm_script(ranks=4, simulation={"process_grid": [3, 1]})


def test_srun_args_reach_every_step() -> None:
    steps = srun_steps(slurm_script(srun_args=["--mem-per-cpu=1G"]))
    assert len(steps) >= 4 and all("--mem-per-cpu=1G" in step for step in steps), steps


def test_cli_takes_every_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--solver", "python", "-o", str(tmp_path / "out")]
    assert slurm_main(["--nodes", "2", "--worker-nodes", "1", *out]) == 0
    assert placed(capsys.readouterr().out)["simulation"] == ("1", "1")
    argv = ["--nodes", "3", "--worker-nodes", "0", "--scheduler-node", "own", *out]
    assert slurm_main(argv) == 0
    assert placed(capsys.readouterr().out)["workers"] == ("2", "1")


def test_cli_prints_the_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert slurm_main(["--ranks", "2", "--workers", "1", "-o", str(out), "-p", "p1"]) == 0
    script = capsys.readouterr().out
    assert sbatch_lines(script)["ntasks"] == "5"
    assert sbatch_lines(script)["partition"] == "p1"
    assert out.is_dir()  # sbatch needs the directory of --output to exist


def test_thread_pins_are_the_launchers() -> None:
    pins = " ".join(f"{k}={v}" for k, v in THREAD_PINS.items())
    assert f"export {pins}\n" in slurm_script()


def test_bridge_options_are_checked() -> None:
    with pytest.raises(ValueError, match="buffer_nb=0 must be a positive integer or None"):
        slurm_script(buffer_nb=0)
    with pytest.raises(SystemExit):  # argparse refuses the choice, from the options' table
        slurm_script(placement="nearest")


def test_script_is_valid_bash(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text(slurm_script(nodes=3))
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


# -- the solver -----------------------------------------------------------------------------------


@pytest.fixture
def fake_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A build directory the C solver counts as runnable, whatever is installed here: its
    ``simulation/heat`` a real program with no RUNPATH (``true``), as the job checks it
    (``deisa.launcher.libraries``) before its steps."""
    monkeypatch.setattr(solver, "c_solver_problem", lambda build_dir, pdi_config: None)
    build = tmp_path / "build"
    (build / "simulation").mkdir(parents=True)
    true = shutil.which("true")
    assert true is not None
    shutil.copy(true, build / "simulation" / "heat")
    return build


def preamble(script: str) -> str:
    """The script up to its first step: settings and the files it writes."""
    return script[: script.index("background=()")]


def test_python_solver_by_default() -> None:
    script = slurm_script(placement="locality", buffer_nb=3)
    assert "# Simulation: the Python solver" in script
    command = simulation_step(script)
    assert '"$PYTHON" -P -m deisa_simulation.heat "$OUT/simulation.yml"' in command
    assert "--placement locality --buffer-nb 3" in command
    assert '--timings "$OUT/timings.json"' in command
    assert "analytics" in script and script.count('--timings "$OUT/timings.json"') == 2
    assert "pdi.yml" not in script and "PDI_PLUGIN_PATH" not in script


def test_c_solver_step(fake_build: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = slurm_script(
        ranks=2, solver="c", build_dir=fake_build, output=out, placement="locality", buffer_nb=None
    )
    heat = fake_build / "simulation" / "heat"
    assert f"# Simulation: the C solver ({heat})" in script
    assert f'    {PRIVATE_TMP} {heat} "$OUT/simulation.yml" "$OUT/pdi.yml" &\n' in script
    assert "deisa_simulation" not in script
    # the C solver writes no timings.json: the client must not wait for one
    assert "--timings" not in script
    assert f"export PDI_PLUGIN_PATH={fake_build / 'plugin'}" in script
    path = tmp_path / "job.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


def test_c_solver_pdi_yaml_names_the_job_scheduler_file(fake_build: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = slurm_script(solver="c", build_dir=fake_build, output=out, buffer_nb=5, array="gtemp")
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "42", "PDI_PLUGIN_PATH": "/opt/pdi"}
    shell = subprocess.run(
        ["bash", "-c", preamble(script) + 'echo "$PDI_PLUGIN_PATH"'],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert shell.stdout.strip() == f"{fake_build / 'plugin'}:/opt/pdi"
    pdi = yaml.safe_load((out / "42" / "pdi.yml").read_text())
    packaged = yaml.safe_load((REPO / "configs" / "heat_deisa.yml").read_text())
    deisa = pdi["plugins"]["deisa"]
    assert deisa["scheduler_file"] == f"{out}/42/scheduler.json"
    # as the Python solver: the placement waits for every worker, as long as the job waits
    assert deisa["min_workers"] == 2 and deisa["connect_timeout"] == 300.0
    assert deisa["placement"] == "round_robin" and deisa["buffer_nb"] == 5
    assert deisa["datasets"] == packaged["plugins"]["deisa"]["datasets"]
    assert pdi["data"] == packaged["data"]  # `$` expressions survive the heredoc
    assert JOB_ID not in (out / "42" / "pdi.yml").read_text()


def test_c_solver_without_a_build_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match=r"--solver c: C solver not built \(.*simulation/heat"):
        slurm_script(solver="c", build_dir=tmp_path)
    out = tmp_path / "out"
    assert slurm_main(["--solver", "c", "--build-dir", str(tmp_path), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "deisa-run slurm: error: --solver c: C solver not built" in captured.err
    assert "--build-dir" in captured.err
    assert not out.exists()


def test_auto_solver_falls_back_to_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert slurm_main(["--build-dir", str(tmp_path), "-o", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "deisa_simulation.heat" in simulation_step(captured.out)
    assert "python solver (C solver not built" in captured.err


def test_c_solver_needs_the_array_it_publishes(fake_build: Path) -> None:
    with pytest.raises(ValueError, match="--array temp: the C solver publishes gtemp"):
        slurm_script(solver="c", build_dir=fake_build, array="temp")


def test_cli_passes_the_c_solver_settings(
    fake_build: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pdi_config = tmp_path / "pdi.yml"
    pdi = yaml.safe_load((REPO / "configs" / "heat_deisa.yml").read_text())
    pdi["plugins"]["deisa"]["datasets"] = {"field": pdi["plugins"]["deisa"]["datasets"]["gtemp"]}
    pdi_config.write_text(yaml.safe_dump(pdi))
    argv = ["--solver", "c", "--build-dir", str(fake_build), "--pdi-config", str(pdi_config)]
    argv += ["--array", "field", "-o", str(tmp_path / "out")]
    assert slurm_main(argv) == 0
    captured = capsys.readouterr()
    assert str(fake_build / "simulation" / "heat") in simulation_step(captured.out)
    assert "field:" in captured.out and "--array field" in captured.out
    assert "c solver" in captured.err


# -- the user's own code ---------------------------------------------------------------------------


def test_user_simulation_and_analytics_steps(tmp_path: Path) -> None:
    analytics = tmp_path / "my analytics.py"
    script = slurm_script(
        "./my_code", "my.yml", "--flag=x y", analytics=f"'{analytics}' --steps 3", nodes=2,
        worker_nodes=1, output=tmp_path / "out", build_dir=tmp_path / "no-build",
    )  # fmt: skip
    client, simulation = full_steps(script)[2:]
    assert simulation.endswith(" ./my_code my.yml '--flag=x y' &")
    assert "--mpi=pmix" in simulation and "--ntasks=4" in simulation
    assert placed(script)["simulation"] == ("1", "1")  # the layouts hold for user commands
    assert client.endswith(f" \"$PYTHON\" -P '{analytics}' --steps 3 &")
    assert "deisa.launcher analytics" not in script and "deisa_simulation" not in script
    assert "# Simulation: your command (./my_code my.yml '--flag=x y')" in script
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7", "PYTHONPATH": str(REPO)}
    shell = preamble(script) + 'echo "$DEISA_SCHEDULER_FILE"'
    done = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True,
                          timeout=30, check=True)  # fmt: skip
    assert done.stdout.strip() == f"{tmp_path / 'out'}/7/scheduler.json"
    path = tmp_path / "job.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


def test_user_simulation_gets_the_built_plugin(fake_build: Path, tmp_path: Path) -> None:
    (fake_build / "plugin").mkdir(parents=True)
    (fake_build / "plugin" / solver.PLUGIN_FILE).touch()
    script = slurm_script("./my_code", build_dir=fake_build, output=tmp_path / "out")
    assert f"export PDI_PLUGIN_PATH={fake_build / 'plugin'}" in script
    client = full_steps(script)[2]
    assert "deisa.launcher analytics" in client  # without --analytics: the built-in PCA


def test_user_simulation_gets_the_built_adios2_engine(fake_build: Path, tmp_path: Path) -> None:
    """An ADIOS2 code's job finds the engine CMake built, first in ADIOS2_PLUGIN_PATH (and the
    variable's value before it, after)."""
    engine = fake_build / "plugin" / "adios2"
    engine.mkdir(parents=True)
    (engine / "libdeisa_adios2_engine.so").touch()
    script = slurm_script("./my_code", "my.xml", build_dir=fake_build, output=tmp_path / "out")
    assert f"export ADIOS2_PLUGIN_PATH={engine}" in script
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_ID": "42",
        "ADIOS2_PLUGIN_PATH": "/opt/a",
        "PYTHONPATH": str(REPO),
    }  # the job checks the loaders with this deisa
    proc = subprocess.run(
        ["bash", "-c", preamble(script) + 'echo "$ADIOS2_PLUGIN_PATH"'],
        env=env, capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert proc.stdout.strip().splitlines()[-1] == f"{engine}:/opt/a", proc.stderr


# -- options shared with deisa-run ----------------------------------------------------------------


def test_cli_options_mean_what_they_mean_for_deisa_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    argv = ["--solver", "python", "--process-grid", "3", "1", "--buffer-nb", "none", "-o", out]
    assert slurm_main(argv) == 0
    script = capsys.readouterr().out
    assert "process_grid: [3, 1]" in script and sbatch_lines(script)["ntasks"] == str(2 + 2 + 3)
    assert "--buffer-nb none" in simulation_step(script)
    assert "--timeout 300.0" in script  # the slurm section's default, not the local run's
    # a relative --config is found from the repository too, as for deisa-run
    assert slurm_main(["--solver", "python", "--config", "configs/simulation.yml", "-o", out]) == 0
    assert "output_period: 5" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "missing.yml"], "--config missing.yml: "),
        (["--ranks", "0"], "--ranks=0 must be a positive integer"),
        (["--ranks", "4", "--process-grid", "3", "1"], "--process-grid 3 1 has 3 ranks"),
        (["--buffer-nb", "many"], "--buffer-nb 'many': a positive integer or 'none'"),
        (["--buffer-nb", "0"], "--buffer-nb 0: buffer_nb=0 must be a positive integer or None"),
        (["--size", "-1", "5"], "--size -1 5: global_size: expected two positive integers"),
        (["--nodes", "3", "--worker-nodes", "3"], "worker_nodes=3 must be between 0"),
        (
            ["--nodes", "2", "--worker-nodes", "1", "--scheduler-node", "own"],
            "scheduler_node='own' with worker_nodes=1 needs nodes >= 3",
        ),
    ],
)
def test_cli_bad_options_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert slurm_main([*argv, "--solver", "python", "-o", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err


# -- a real job on a one-node Slurm ---------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Slurm:
    env: dict[str, str]
    root: Path

    def run(self, *cmd: str, timeout: float = STARTUP) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.root.glob("*.log"))
        )


SLURM_CONF = (
    """\
ClusterName=deisatest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
"""
    + multinode.SLURM_POLICY
    + """\
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
TmpFS={root}/tmp
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=deisanode NodeAddr=127.0.0.1 NodeHostname={hostname} CPUs=16 State=UNKNOWN
PartitionName=debug Nodes=deisanode Default=YES MaxTime=INFINITE State=UP
"""
)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    """slurmctld + slurmd on loopback with a generated slurm.conf; skip if they cannot start."""
    missing = [b for b in ("slurmctld", "slurmd", "sbatch", "scontrol") if not shutil.which(b)]
    if missing:
        pytest.skip(f"Slurm not installed: {', '.join(missing)} not found")
    if os.geteuid() != 0:
        pytest.skip("starting slurmd needs root")
    root = tmp_path_factory.mktemp("slurm")
    (root / "state").mkdir()
    (root / "spool").mkdir()
    # the steps' PMIx directories (spmix_appdir_<uid>_<job>.<step>) go under TmpFS: in /tmp, a
    # second cluster of this host (another test session's) numbering its jobs from 1 too would
    # hold the same names, and the step would fail to launch
    (root / "tmp").mkdir()
    ctld_port, slurmd_port = _free_ports(2)
    conf = root / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(
            ctld_port=ctld_port,
            slurmd_port=slurmd_port,
            root=root,
            hostname=socket.gethostname(),
        )
    )
    env = dict(os.environ)
    env["SLURM_CONF"] = str(conf)
    for key in list(env):  # a Slurm job running these tests must not leak into ours
        if key.startswith("SLURM_") and key != "SLURM_CONF":
            del env[key]
    cluster = Slurm(env, root)
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for cmd in (
            ["slurmctld", "-D", "-c", "-i", "-f", str(conf)],
            ["slurmd", "-D", "-N", "deisanode", "-f", str(conf)],
        ):
            with open(root / f"{cmd[0]}.stdout.log", "wb") as out:
                daemons.append(
                    subprocess.Popen(
                        cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        state = ""

        def exited() -> bool:
            return any(d.poll() is not None for d in daemons)

        def ready() -> bool:
            nonlocal state
            if exited():
                return True  # skipped below
            info = cluster.run("sinfo", "-h", "-N", "-o", "%T", timeout=STARTUP)
            state = info.stdout.strip()
            return info.returncode == 0 and state.startswith("idle")

        def not_ready() -> None:
            pytest.skip(
                f"Slurm did not become ready in {STARTUP} s (node {state!r}):\n{cluster.logs()}"
            )

        poll_for(ready, STARTUP, not_ready, period=0.5)
        if exited():
            pytest.skip(f"a Slurm daemon exited at start-up:\n{cluster.logs()}")
        yield cluster
    finally:
        for proc in reversed(daemons):
            _stop(proc)


class SlurmCluster(Protocol):
    """What a job needs of a cluster: Slurm commands from the login node, and its logs."""

    def run(self, *cmd: str, timeout: float = STARTUP) -> subprocess.CompletedProcess[str]: ...
    def logs(self) -> str: ...


ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "UNKNOWN")


def _job_state(slurm: SlurmCluster, job: str) -> str:
    out = slurm.run("scontrol", "show", "job", job, timeout=STARTUP).stdout
    match = re.search(r"JobState=(\w+)", out)
    return match.group(1) if match else "UNKNOWN"


@dataclass
class Job:
    id: str
    state: str
    out: Path
    slurm: SlurmCluster

    @property
    def dir(self) -> Path:
        """The job's own directory, ``<output>/<job id>``."""
        return self.out / self.id

    def diagnostics(self) -> str:
        job_logs = "\n".join(
            f"--- {p}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.out.rglob("*.log")) + sorted(self.out.glob("slurm-*.out"))
        )
        return f"job {self.id} ended {self.state}\n{job_logs}\n{self.slurm.logs()}"


def run_job(
    slurm: SlurmCluster,
    tmp_path: Path,
    steps: int,
    *command: str,
    size: int = 64,
    **options: Any,
) -> Job:
    """Submit ``slurm_script(*command, **options)`` (default: 4 ranks, 2 workers) and wait for
    its end."""
    job = submit_job(slurm, tmp_path, steps, *command, size=size, **options)
    return wait_job(slurm, tmp_path, job)


def submit_job(
    slurm: SlurmCluster,
    tmp_path: Path,
    steps: int,
    *command: str,
    size: int = 64,
    **options: Any,
) -> str:
    """Submit ``slurm_script(*command, **options)`` (default: 4 ranks, 2 workers); its ID."""
    out = tmp_path / "out"
    out.mkdir(mode=0o700, exist_ok=True)  # as `deisa-run slurm` makes it (umask 077)
    script = tmp_path / "job.sh"
    settings: dict[str, Any] = {
        "ranks": 4,
        "workers": 2,
        "threads": 1,
        "time": "00:06:00",
        "output": out,
        "workdir": tmp_path,
        "python": sys.executable,
        "simulation": {"global_size": [size, size], "steps": steps, "output_period": 2},
        "n_components": 3,
        "timeout": 120,
    }
    if command:  # the heat demo's settings are refused beside a command of one's own
        del settings["simulation"]
    script.write_text(slurm_script(*command, **(settings | options)))
    submitted = slurm.run("sbatch", "--parsable", str(script))
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


def wait_job(slurm: SlurmCluster, tmp_path: Path, job: str) -> Job:
    """Wait for the end of ``job``, submitted by :func:`submit_job` (cancelled after 300 s)."""
    state = _job_state(slurm, job)

    def ended() -> bool:
        nonlocal state
        state = _job_state(slurm, job)
        return state not in ACTIVE

    def cancel() -> None:
        slurm.run("scancel", job)
        diagnostics = Job(job, state, tmp_path / "out", slurm).diagnostics()
        raise AssertionError(f"job {job} still {state} after 300 s: cancelled\n{diagnostics}")

    if state in ACTIVE:
        poll_for(ended, 300, cancel, period=1)
    return Job(job, state, tmp_path / "out", slurm)


def check_results(job: Job, steps: int, size: int = 64) -> list[dict]:
    """The job completed and its results.json holds a sound PCA of every step; its table."""
    assert job.state == "COMPLETED", job.diagnostics()
    results = json.loads((job.dir / "results.json").read_text())
    assert [s["step"] for s in results["steps"]] == list(range(steps)), job.diagnostics()
    for s in results["steps"]:
        ratio = s["explained_variance_ratio"]
        assert len(ratio) == 3
        assert all(0.0 <= r <= 1.0 for r in ratio)
        assert sum(ratio) <= 1.0 + 1e-9
        assert ratio == sorted(ratio, reverse=True)
        assert s["explained_variance"][0] > 0
    table = results["table"]
    assert [row["step"] for row in table] == list(range(steps))
    assert all(row["nbytes"] == size * size * 8 for row in table)
    assert (job.dir / "explained_variance.png").stat().st_size > 0
    assert (
        "deisa: simulation exit status 0, analytics exit status 0"
        in (job.out / f"slurm-{job.id}.out").read_text()
    )
    return table


@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_job_runs_the_pipeline(slurm: Slurm, tmp_path: Path) -> None:
    job = run_job(slurm, tmp_path, steps=4)
    table = check_results(job, steps=4)
    # the dashboard is off (every account of the node could read it), and says how to turn it on
    assert "Dashboard: off" in (job.out / f"slurm-{job.id}.out").read_text()
    assert all(row["compute_s"] is not None for row in table)  # timings of all 4 ranks
    # the job's analytics asks the scheduler how long flow control held the ranks
    flow = json.loads((job.dir / "results.json").read_text())["phases"]["flow_control"]
    assert 0 <= flow["held_s"] <= flow["open_s"], flow
    # every file of the job in its own directory, every task's log named after its node
    assert sorted(p.name for p in job.out.iterdir()) == [job.id, f"slurm-{job.id}.out"]
    host = socket.gethostname().split(".")[0]  # srun --output's %N: the node's short host name
    logs = sorted(p.name for p in (job.dir / "logs").iterdir())
    assert logs == [
        f"analytics-{host}.log",
        f"scheduler-{host}.log",
        *(f"simulation-{host}-{rank}.log" for rank in range(4)),
        f"workers-{host}-0.log",
        f"workers-{host}-1.log",
    ]


@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_job_runs_user_code(slurm: Slurm, tmp_path: Path) -> None:
    simulation, analytics = write_user_code(tmp_path / "code")
    job = run_job(slurm, tmp_path, 3, str(simulation), "3", "-1", "2",
                  analytics=f"{analytics} 3 4")  # fmt: skip
    assert job.state == "COMPLETED", job.diagnostics()
    host = socket.gethostname().split(".")[0]
    log = (job.dir / "logs" / f"analytics-{host}.log").read_text()
    assert "my analytics: every step is right" in log, job.diagnostics()
    assert "published 3 steps" in (job.dir / "logs" / f"simulation-{host}-0.log").read_text()


@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_job_with_one_failed_rank_fails_at_once(slurm: Slurm, tmp_path: Path) -> None:
    """Rank 1 of 4 exits 7 at step 1: the simulation's step ends, as mpirun's job would, so
    the job fails naming its exit status, rather than leave ranks 0, 2 and 3 hung in MPI while
    rank 0's heartbeat keeps the client waiting for step 1. Open MPI over PMIx ends them
    itself here (the job fails as fast without the step's --kill-on-bad-exit=1, which makes
    sure of it whatever the MPI)."""
    simulation, _ = write_user_code(tmp_path / "code")
    job = run_job(slurm, tmp_path, 3, str(simulation), "3", "1", "2", "fail_rank=1",
                  array="field", n_components=2)  # fmt: skip
    assert job.state == "FAILED", job.diagnostics()  # not CANCELLED by wait_job after 300 s
    out = next(job.out.glob("slurm-*.out")).read_text()
    status = re.search(r"deisa: simulation exit status (\d+), analytics exit status", out)
    assert status is not None and status.group(1) != "0", job.diagnostics()
    host = socket.gethostname().split(".")[0]
    assert "giving up at step 1" in (job.dir / "logs" / f"simulation-{host}-1.log").read_text()


@pytest.mark.slurm
@pytest.mark.pdi
@pytest.mark.timeout(420)
def test_job_runs_the_c_solver(slurm: Slurm, built: Path, tmp_path: Path) -> None:
    problem = solver.c_solver_problem(built, REPO / "configs" / "heat_deisa.yml")
    if problem:
        pytest.skip(problem)
    job = run_job(slurm, tmp_path, steps=4, solver="c", build_dir=built)
    check_results(job, steps=4)
    pdi = yaml.safe_load((job.dir / "pdi.yml").read_text())
    assert pdi["plugins"]["deisa"]["scheduler_file"] == f"{job.dir}/scheduler.json"
    logs = list((job.dir / "logs").glob("simulation-*.log"))
    assert len(logs) == 4 and not any("deisa_simulation" in p.read_text() for p in logs)


def _job_processes(job_dir: Path) -> list[int]:
    """PIDs of the Dask processes and ranks of the job writing to ``job_dir`` (not Slurm's own
    srun and slurmstepd)."""
    import psutil

    pids = []
    scheduler_file = str(job_dir / "scheduler.json")
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            mine = proc.environ().get("DEISA_SCHEDULER_FILE") == scheduler_file
            if not mine or cmdline.startswith("srun"):
                continue
        except psutil.Error:
            continue
        if "dask" in cmdline or "my_simulation.py" in cmdline:
            pids.append(proc.pid)
    return pids


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_job_refuses_strangers_and_keeps_its_files_private(slurm: Slurm, tmp_path: Path) -> None:
    """A running one-node job: its scheduler and a worker refuse a plain client, a TLS client
    without a certificate and one with a foreign certificate; its Dask processes and ranks
    listen on loopback only; it still completes with every step analysed; nothing in its
    output is open to others, and its key is in no script, log or output file."""
    from attack import (
        job_security,
        listening,
        private_key_leaks,
        private_violations,
        refusals,
        wildcard,
    )
    from distributed import Client

    from deisa.bridge.scheduler_file import read_scheduler_address

    simulation, analytics = write_user_code(tmp_path / "code")
    gate, steps = tmp_path / "gate", 3
    job_id = submit_job(slurm, tmp_path, steps, str(simulation), str(steps), "-1", "1",
                        ranks=2, analytics=f"{analytics} {steps} 2 gate={gate}")  # fmt: skip
    job_dir = tmp_path / "out" / job_id
    try:
        address = read_scheduler_address(job_dir / "scheduler.json", wait=STARTUP)
        assert address.startswith("tls://127.0.0.1:"), address
        tls = job_dir / "tls"
        with Client(address, security=job_security(tls), timeout=STARTUP) as client:
            client.wait_for_workers(2, timeout=STARTUP)
            worker = next(iter(workers_of(client)))
        for server in (address, worker):
            assert set(refusals(server, tls)) == {"plain", "no certificate", "foreign certificate"}

        # the Dask processes on loopback only; the ranks: rank 0's notices listener on loopback
        # too (TLS), beside Open MPI's own (srun --mpi=pmix: one per rank, every interface)
        def rank0_listens(sockets: list[tuple[int, str, str, int]]) -> bool:
            return any("my_simulation" in s[1] and s[2] == "127.0.0.1" for s in sockets)

        # the ranks may still be starting: wait until rank 0 has opened its listener
        sockets: list[tuple[int, str, str, int]] = []

        def listens() -> bool:
            sockets[:] = listening(_job_processes(job_dir))
            return rank0_listens(sockets)

        def no_listener() -> None:
            raise AssertionError(f"rank 0 opened no loopback listener: {sockets}")

        poll_for(listens, STARTUP, no_listener, period=0.5)
        dask = [s for s in sockets if "dask" in s[1]]
        assert len(dask) >= 6, sockets  # scheduler, 2 workers, their HTTP servers
        assert wildcard(dask) == [], "\n".join(map(str, dask))
    finally:
        gate.touch()
    job = wait_job(slurm, tmp_path, job_id)
    assert job.state == "COMPLETED", job.diagnostics()
    host = socket.gethostname().split(".")[0]
    log = (job.dir / "logs" / f"analytics-{host}.log").read_text()
    assert "my analytics: every step is right" in log, job.diagnostics()
    assert "TLS handshake failed" in (job.dir / "logs" / f"scheduler-{host}.log").read_text()
    assert not tls.exists(), job.diagnostics()  # removed with the job
    assert private_violations(job.out) == [], job.diagnostics()
    assert private_key_leaks([tmp_path / "job.sh", *job.out.rglob("*")]) == []


def test_script_speaks_tls_on_loopback_unless_insecure(tmp_path: Path) -> None:
    script = slurm_script(output=tmp_path)
    scheduler, workers = srun_steps(script)[:2]
    for step in (script[script.index(scheduler) :], script[script.index(workers) :]):
        command = step[: step.index("&\n")]
        assert "--host 127.0.0.1" in command and "--dashboard-address 127.0.0.1:0" in command
        assert command.endswith(" --protocol tls ")  # the files: from the environment
    assert '"$PYTHON" -P -m deisa.launcher.security "$TLS" || exit 1' in script
    assert 'export DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY="$TLS/key.pem"' in script
    # the same files under deisa's names, for rank 0's notices listener, quoted alike
    for name, file in zip(TLS_FILES_ENV, ("ca", "cert", "key"), strict=True):
        assert f'export {name}="$TLS/{file}.pem"' in script
    assert 'rm -rf "$OUT/tls"' in script and "umask 077" in script
    assert "PRIVATE KEY" not in script
    # several nodes: the servers listen where the others reach them, TLS still on
    multi = slurm_script(output=tmp_path, nodes=3, interface="eth77")
    assert "--host 127.0.0.1" not in multi and "--interface eth77 --protocol tls &" in multi
    # --insecure: plain TCP, and one warning line in the job's output
    insecure = job_script(
        make_plan(
            parse.run_settings("slurm", ["--solver", "python", "--insecure", "-o", str(tmp_path)])
        )
    )
    assert "--protocol tls" not in insecure and "deisa.launcher.security" not in insecure
    assert insecure.count("warning: --insecure") == 1
    assert "--host 127.0.0.1" in insecure  # one node: loopback all the same


# -- real jobs on a multi-node Slurm (network namespaces) -----------------------------------------


@pytest.fixture(scope="module")
def slurm_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[multinode.Cluster]:
    """A 3-node Slurm cluster of network namespaces (tests/multinode.py); skip if it cannot
    start, stop every daemon by PID at the end."""
    try:
        cluster = multinode.start_cluster(tmp_path_factory.mktemp("slurm-nodes"), 3)
    except multinode.ClusterUnavailableError as exc:
        pytest.skip(f"no multi-node Slurm here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def job_tasks(job: Job, step: str) -> dict[str, list[int]]:
    """The tasks of one step of ``job`` per node, from its log files' names."""
    tasks: dict[str, list[int]] = {}
    for path in (job.dir / "logs").glob(f"{step}-*.log"):
        node, _, task = path.stem.removeprefix(f"{step}-").partition("-")
        tasks.setdefault(node, []).append(int(task or 0))
    return {node: sorted(ids) for node, ids in sorted(tasks.items())}


def block_arrivals(
    job: Job, records: list[dict[str, Any]], cluster: multinode.Cluster
) -> dict[tuple[int, int, int], tuple[str, str]]:
    """``(step, i, j)`` -> ``(node, how)`` of every block of ``gtemp`` that entered a worker's
    memory; ``how`` is the state it came from (``"flight"``: fetched from another worker)."""
    arrivals = {}
    for record in records:
        key = record["key"]
        if isinstance(key, list) and re.fullmatch(r"deisa-[0-9a-f]+-gtemp-\d+", key[0]):
            step = int(key[0].rsplit("-", 1)[1])
            where = (cluster.node_of(record["worker"]), record["start"])
            assert record["host"] == where[0], record  # the worker's address is its node's
            arrivals.setdefault((step, int(key[1]), int(key[2])), []).append(where)
    return arrivals


@pytest.mark.integration
@pytest.mark.slurm
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("layout_options", "scheduler", "workers", "ranks"),
    [
        pytest.param(
            {"nodes": 2, "worker_nodes": 0},
            "node0",
            {"node0": [0], "node1": [1]},
            {"node0": [0, 1], "node1": [2, 3]},
            id="colocated",
        ),
        pytest.param(
            {"nodes": 3, "worker_nodes": 1},
            "node0",
            {"node1": [0, 1]},
            {"node2": [0, 1, 2, 3]},
            id="dedicated",
        ),
        pytest.param(
            {"nodes": 2, "worker_nodes": 0, "solver": "c"},
            "node0",
            {"node0": [0], "node1": [1]},
            {"node0": [0, 1], "node1": [2, 3]},
            id="colocated-c-solver",
            marks=pytest.mark.pdi,
        ),
    ],
)
def test_multinode_job_keeps_blocks_on_their_node(
    slurm_nodes: multinode.Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    layout_options: dict[str, Any],
    scheduler: str,
    workers: dict[str, list[int]],
    ranks: dict[str, list[int]],
) -> None:
    """Scheduler, workers and ranks run where the layout says; with node_local placement every
    block reaches a worker on its rank's node (co-located) or the workers' node (dedicated),
    bitwise, and no block is ever fetched from one worker by another. The Python solver, and
    the C solver through PDI and the deisa plugin where it builds."""
    from deisa_simulation.heat import HeatConfig, block_checksum, reference_field

    options = {"solver": "python", **layout_options}
    if options["solver"] == "c":
        built = request.getfixturevalue("built")
        problem = solver.c_solver_problem(built, REPO / "configs" / "heat_deisa.yml")
        if problem:
            pytest.skip(problem)
        options["build_dir"] = built
    keys = tmp_path / "keys"
    keys.mkdir()
    monkeypatch.setitem(slurm_nodes.env, multinode.TRANSFER_LOG_DIR, str(keys))
    steps, size = 3, 32
    # the key log, a preload of the dask configuration where the script is written (as
    # DASK_DISTRIBUTED__WORKER__PRELOAD would give): the job keeps it beside the PCA's warm-up
    with dask.config.set({"distributed.worker.preload": [multinode.__file__]}):
        job = run_job(
            slurm_nodes,
            tmp_path,
            steps=steps,
            size=size,
            placement="node_local",
            interface=slurm_nodes.interface,
            **options,
        )
    check_results(job, steps=steps, size=size)
    # within a node the blocks go through shared memory, across nodes by TCP (each node is a
    # network namespace: the handshake decides, not the host name), and the report says so
    near = sum(len(ids) for node, ids in ranks.items() if node in workers)
    expected_ways = {"shared memory": near, "tcp": 4 - near}
    results = json.loads((job.dir / "results.json").read_text())
    assert results["transports"] == {k: n for k, n in expected_ways.items() if n}, results
    assert job_tasks(job, "scheduler") == {scheduler: [0]}
    assert job_tasks(job, "analytics") == {scheduler: [0]}
    assert job_tasks(job, "workers") == workers
    assert job_tasks(job, "simulation") == ranks
    scheduler_log = next((job.dir / "logs").glob("scheduler-*.log")).read_text()
    address = re.search(r"Scheduler at:\s+(\S+)", scheduler_log)
    assert address and slurm_nodes.node_of(address.group(1)) == scheduler, scheduler_log
    for node, tasks in workers.items():
        for task in tasks:
            log = (job.dir / "logs" / f"workers-{node}-{task}.log").read_text()
            address = re.search(r"Start worker at:\s+(\S+)", log)
            assert address and slurm_nodes.node_of(address.group(1)) == node, log

    rank_node = {rank: node for node, ids in ranks.items() for rank in ids}
    config = HeatConfig(global_size=(size, size), process_grid=(2, 2), steps=steps, output_period=2)
    records = multinode.read_key_log(keys)
    arrivals = block_arrivals(job, records, slurm_nodes)
    assert sorted(arrivals) == [(s, i, j) for s in range(steps) for i in (0, 1) for j in (0, 1)]
    for (step, i, j), where in arrivals.items():
        node = rank_node[2 * i + j]  # Create_cart: ranks in row-major order of their blocks
        expected = {node} if node in workers else set(workers)  # dedicated: the worker node
        assert {n for n, _ in where} <= expected, (step, i, j, where)
        assert all(how != "flight" for _, how in where), (step, i, j, where)  # never fetched
    for record in records:  # bitwise: the blocks the workers hold are the solver's field
        key = record["key"]
        if record.get("checksum") and isinstance(key, list) and "-gtemp-" in key[0]:
            step, i, j = int(key[0].rsplit("-", 1)[1]), int(key[1]), int(key[2])
            block = reference_field(config, step)[
                i * size // 2 : (i + 1) * size // 2, j * size // 2 : (j + 1) * size // 2
            ]
            assert record["checksum"] == block_checksum(block), (step, i, j)
    assert sum(1 for r in records if r.get("checksum")) >= len(arrivals)


@pytest.mark.integration
@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_multinode_job_runs_user_code(slurm_nodes: multinode.Cluster, tmp_path: Path) -> None:
    """Your own simulation and analytics on 2 nodes: the ranks spread by srun, the analytics
    beside the scheduler, both finding the scheduler through DEISA_SCHEDULER_FILE."""
    simulation, analytics = write_user_code(tmp_path / "code")
    job = run_job(
        slurm_nodes, tmp_path, 3, str(simulation), "3", "-1", "2",
        analytics=f"{analytics} 3 4", nodes=2, worker_nodes=0, interface=slurm_nodes.interface,
    )  # fmt: skip
    assert job.state == "COMPLETED", job.diagnostics()
    assert job_tasks(job, "simulation") == {"node0": [0, 1], "node1": [2, 3]}
    assert job_tasks(job, "analytics") == {"node0": [0]}
    log = next((job.dir / "logs").glob("analytics-*.log")).read_text()
    assert "my analytics: every step is right" in log, job.diagnostics()


def wait_for_file(path: Path, job: str, cluster: multinode.Cluster, timeout: float) -> None:
    """Wait until ``path`` exists; fail early, with the logs, if ``job`` ends first."""

    def never_came() -> None:
        state = _job_state(cluster, job)
        raise AssertionError(f"{path.name} never came (job {job}: {state})\n{cluster.logs()}")

    def came() -> bool:
        if path.exists():
            return True
        if _job_state(cluster, job) not in ACTIVE:
            never_came()
        return False

    poll_for(came, timeout, never_came, period=0.5)


@pytest.mark.integration
@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_multinode_job_survives_a_lost_worker_node(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 25, item 5: a worker node's network interface goes down mid-run (no TCP reset: the
    scheduler notices only when its workers miss heartbeats for the job's worker-ttl; slurmctld
    marks the node DOWN after SlurmdTimeout). Node 0 runs the scheduler, the analytics and 2
    workers, node 1 2 workers, node 2 the 4 ranks; node 1 is lost while the analytics holds
    step 5. The job exits 0 on the nodes left; the analytics received every step not lost, in
    order and bitwise; the lost steps are named, with node 1's workers; no key is left. Its own
    cluster: a lost node would spoil the module's."""
    from lost_node_code import digest, write_lost_node_code

    try:  # a node silent 10 s is DOWN: the job outlives that (sbatch/srun --no-kill)
        # a short root: slurmstepd's socket (<root>/spool/node0/node0_1.4294967291) must fit
        # a Unix socket's 108 bytes, which the test's own directory under an xdist worker's
        # (.../popen-gw0/test_multinode_job_survives_a_0/cluster/) does not
        root = tmp_path_factory.mktemp("lost")
        cluster = multinode.start_cluster(root, 3, slurm_conf="SlurmdTimeout=10\n")
    except multinode.ClusterUnavailableError as exc:
        pytest.skip(f"no multi-node Slurm here: {exc}")
    steps, pause_at, lost_node = 30, 5, "node1"
    control = tmp_path / "control"
    control.mkdir()
    simulation, analytics = write_lost_node_code(tmp_path / "code")
    cluster.env["DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"] = "20s"  # the job's default: 60s
    try:
        job_id = submit_job(
            cluster, tmp_path, steps, str(simulation), str(steps), "4",
            analytics=f"{analytics} {control} {pause_at} 2", nodes=3, worker_nodes=2,
            scheduler_node="shared", workers=4, interface=cluster.interface,
        )  # fmt: skip
        wait_for_file(control / "paused", job_id, cluster, 2 * STARTUP)
        down_at = time.time()
        cluster.set_link(lost_node, up=False)
        (control / "down").write_text(str(down_at))
        poll_for(lambda: cluster.node_state(lost_node).startswith("down"), STARTUP, period=0.5)
        node_down_at = time.time()
        job = wait_job(cluster, tmp_path, job_id)
    finally:
        cluster.set_link(lost_node, up=True)  # its slurmd and tasks may end; stop() kills the rest
        cluster.stop()
    slurm_out = (job.out / f"slurm-{job.id}.out").read_text()
    assert "deisa: simulation exit status 0, analytics exit status 0" in slurm_out, (
        job.diagnostics()
    )
    assert job_tasks(job, "workers") == {"node0": [0, 1], "node1": [2, 3]}
    assert job_tasks(job, "simulation") == {"node2": [0, 1, 2, 3]}
    for rank in range(4):
        log = (job.dir / "logs" / f"simulation-node2-{rank}.log").read_text()
        assert f"rank {rank} published {steps} steps" in log, job.diagnostics()
    report = json.loads((control / "report.json").read_text())
    received = report["received"]
    lost = sorted({step for step, _ in report["lost"]})  # (step, worker): a step per worker
    print(
        f"lost node: the scheduler dropped its workers {report['removed_at'] - down_at:.1f} s "
        f"after the interface went down (worker-ttl 20s), slurmctld marked it DOWN after "
        f"{node_down_at - down_at:.1f} s; job {job.state}; steps lost: {lost}"
    )
    assert received == sorted(set(received)), received  # in order, each once
    assert lost and sorted(received + lost) == list(range(steps)), (received, lost)
    for step in received:  # bitwise
        assert report["digests"][str(step)] == digest(step, 4), step
    assert {cluster.node_of(worker) for _, worker in report["lost"]} == {lost_node}, report
    assert len(report["warnings"]) == len(lost), report["warnings"]  # each named once
    assert report["keys_left"] == 0, report["tasks_left"]
