"""Bad input gets a clear error before anything waits: every case names the key, value or rank
at fault, and leaves nothing running.

In-process cases check the validators directly (ArraySpec, Decomposition, Bridge arguments,
placement, HeatConfig, scheduler file, Bridge connection); the mpirun cases check that a whole
MPI job fails with a non-zero exit and the same message, and leaves no rank behind. No case
times anything: a deadline only turns a hang into a failure.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, STARTUP, left_behind, mpirun, test_env, write_config

from deisa import ArraySpec
from deisa.bridge._collective import check_arrays
from deisa.bridge.arrays.decomposition import Decomposition, DecompositionError
from deisa.bridge.arrays.placement import get_placement
from deisa.bridge.bridge import Bridge, BridgeError
from deisa.bridge.options import BridgeOptionError, BridgeOptions
from deisa.bridge.scheduler_file import SchedulerFileError, read_scheduler_address
from deisa_simulation.heat import HeatConfig

PUBLISHER = REPO / "tests" / "publish_blocks.py"
SPEC = ArraySpec("float64", (8, 6), (0, 0), (8, 6))


def spec(dtype: str = "float64", g: tuple = (8, 6), s: tuple = (0, 0), b: tuple = (4, 6)):
    return ArraySpec(dtype, g, s, b)


def check(arrays: dict[str, Any]) -> None:
    problem = check_arrays(arrays)
    if problem:
        raise BridgeError(problem)


def bridge_with(tmp: Path, **options: Any) -> None:
    from mpi4py import MPI

    Bridge(str(tmp / "nowhere.json"), {"u": SPEC}, comm=MPI.COMM_SELF, **options)


def heat_yaml(tmp: Path, text: str) -> Callable[[], Any]:
    path = tmp / "bad.yml"
    path.write_text(text)
    return lambda: HeatConfig.from_yaml(path)


def scheduler_file(tmp: Path, text: str | None) -> Callable[[], Any]:
    path = tmp / "scheduler.json"
    if text is not None:
        path.write_text(text)
    return lambda: read_scheduler_address(path)


# (id, make(tmp_path) -> callable, exception, regex the message must match)
IN_PROCESS: list[tuple[str, Callable[[Path], Callable[[], Any]], type, str]] = [
    ("spec-dtype", lambda t: lambda: spec(dtype="floaty"), TypeError, "dtype='floaty'"),
    (
        "spec-shape-type",
        lambda t: lambda: ArraySpec("f8", "ab", (0,), (1,)),
        TypeError,
        "global_shape='ab' must be a sequence of integers",
    ),
    (
        "spec-ndim",
        lambda t: lambda: ArraySpec("f8", (8, 6), (0,), (8, 6)),
        ValueError,
        "same, non-zero length",
    ),
    (
        "spec-negative-start",
        lambda t: lambda: spec(s=(-1, 0)),
        ValueError,
        "axis 0: global size 8, start -1",
    ),
    (
        "spec-outside",
        lambda t: lambda: spec(s=(4, 2), b=(4, 6)),
        ValueError,
        r"axis 1: block \[2:8\] lies outside the global size 6",
    ),
    (
        "dec-dtype",
        lambda t: lambda: Decomposition.from_specs("u", [spec(), spec("float32", s=(4, 0))]),
        DecompositionError,
        "array 'u': rank 1 has dtype float32, rank 0 has float64",
    ),
    (
        "dec-global-shape",
        lambda t: lambda: Decomposition.from_specs("u", [spec(), spec(g=(8, 7), s=(4, 0))]),
        DecompositionError,
        r"array 'u': rank 1 has global shape \(8, 7\)",
    ),
    (
        "dec-overlap",
        lambda t: lambda: Decomposition.from_specs("u", [spec(b=(5, 6)), spec(s=(4, 0))]),
        DecompositionError,
        r"array 'u': rank 0's block spans \[0:5\] along axis 0",
    ),
    (
        "dec-duplicate",
        lambda t: lambda: Decomposition.from_specs("u", [spec(), spec(), spec(s=(4, 0))]),
        DecompositionError,
        "ranks 0 and 1 publish the same block",
    ),
    (
        "dec-gap",
        lambda t: (
            lambda: Decomposition.from_specs(
                "u", [spec(b=(4, 3)), spec(s=(0, 3), b=(4, 3)), spec(s=(4, 0), b=(4, 3))]
            )
        ),
        DecompositionError,
        r"1 block\(s\) of the global shape \(8, 6\) are published by no rank: \[4:8, 3:6\]",
    ),
    (
        "dec-empty",
        lambda t: lambda: Decomposition.from_specs("u", []),
        DecompositionError,
        "array 'u': no rank describes a block",
    ),
    (
        "args-empty",
        lambda t: lambda: check({}),
        BridgeError,
        "arrays is empty",
    ),
    (
        "args-name",
        lambda t: lambda: check({"": SPEC}),
        BridgeError,
        "array names must be non-empty strings, got ''",
    ),
    (
        "args-spec",
        lambda t: lambda: check({"u": (8, 6)}),
        BridgeError,
        r"arrays\['u'\] is a tuple, not an ArraySpec",
    ),
    (
        "args-placement",
        lambda t: lambda: BridgeOptions(placement="nearest"),
        BridgeOptionError,
        "placement='nearest' is not a placement policy",
    ),
    (
        "args-buffer-zero",
        lambda t: lambda: BridgeOptions(buffer_nb=0),
        BridgeOptionError,
        r"buffer_nb=0 must be a positive integer or None \(None means unbounded; 0 is refused\)",
    ),
    (
        "args-buffer-bool",
        lambda t: lambda: BridgeOptions(buffer_nb=True),
        BridgeOptionError,
        "buffer_nb=True must be a positive integer",
    ),
    (
        "args-on-full",
        lambda t: lambda: BridgeOptions(buffer_nb=2, on_full="drop"),
        BridgeOptionError,
        "on_full='drop' is not a flow-control policy; choose one of",
    ),
    (
        "args-drop-unbounded",
        lambda t: lambda: BridgeOptions(on_full="drop_oldest"),
        BridgeOptionError,
        "on_full='drop_oldest' needs a buffer_nb",
    ),
    (
        "args-timeout",
        lambda t: lambda: BridgeOptions(buffer_nb=2, timeout=-1),
        BridgeOptionError,
        "timeout=-1 must be a positive number",
    ),
    (
        "args-connect-timeout",
        lambda t: lambda: BridgeOptions(connect_timeout=0),
        BridgeOptionError,
        "connect_timeout=0 must be a positive number",
    ),
    (
        "args-min-workers",
        lambda t: lambda: BridgeOptions(min_workers=0),
        BridgeOptionError,
        "min_workers=0 must be a positive integer",
    ),
    (
        "bridge-option",
        lambda t: lambda: bridge_with(t, buffer_nb=0),
        BridgeError,
        r"rank 0: buffer_nb=0 must be a positive integer or None",
    ),
    (
        "bridge-unknown-option",
        lambda t: lambda: bridge_with(t, bufer_nb=2),
        TypeError,
        "Bridge\\(\\) got an unexpected keyword argument 'bufer_nb'",
    ),
    (
        "placement-name",
        lambda t: lambda: get_placement("random"),
        ValueError,
        r"placement='random' is not a placement policy; choose one of \['locality', "
        r"'node_local', 'round_robin'\]",
    ),
    (
        "heat-unknown-key",
        lambda t: heat_yaml(t, "global_size: [8, 8]\nstep: 3\n"),
        ValueError,
        r"bad.yml: unknown key\(s\) \['step'\]",
    ),
    (
        "heat-size",
        lambda t: heat_yaml(t, "global_size: [0, 8]\n"),
        ValueError,
        "global_size: expected two positive integers, got",
    ),
    (
        "heat-steps",
        lambda t: heat_yaml(t, "steps: ten\n"),
        ValueError,
        "steps: expected a positive integer, got 'ten'",
    ),
    (
        "heat-grid",
        lambda t: heat_yaml(t, "global_size: [4, 4]\nprocess_grid: [8, 1]\n"),
        ValueError,
        r"process_grid: 8 ranks along axis 0 for only 4 cells",
    ),
    (
        "heat-not-mapping",
        lambda t: heat_yaml(t, "- 1\n- 2\n"),
        ValueError,
        "bad.yml: expected a mapping of settings, got list",
    ),
    (
        "heat-yaml-syntax",
        lambda t: heat_yaml(t, "global_size: [4, 4\n"),
        ValueError,
        "bad.yml: cannot read the simulation configuration",
    ),
    (
        "sched-missing",
        lambda t: scheduler_file(t, None),
        SchedulerFileError,
        "scheduler.json' does not exist",
    ),
    (
        "sched-not-json",
        lambda t: scheduler_file(t, "{nope"),
        SchedulerFileError,
        "scheduler.json' is unreadable",
    ),
    (
        "sched-no-address",
        lambda t: scheduler_file(t, '{"id": "x"}'),
        SchedulerFileError,
        "scheduler.json' holds no scheduler address",
    ),
]


@pytest.mark.parametrize(
    ("make", "exc", "message"), [c[1:] for c in IN_PROCESS], ids=[c[0] for c in IN_PROCESS]
)
def test_bad_input_names_what_is_wrong(
    tmp_path: Path, make: Callable[[Path], Callable[[], Any]], exc: type, message: str
) -> None:
    # the Bridge cases point at a scheduler file that does not exist: had the checks waited for
    # it, the error would name the file, not the option
    fn = make(tmp_path)
    before = bridge_threads()
    with pytest.raises(exc, match=message):
        fn()
    assert threads_left(before) == []


def bridge_threads() -> set[threading.Thread]:
    """The event-loop threads of the Bridges alive in this process."""
    return {t for t in threading.enumerate() if t.name.startswith("deisa-bridge")}


def threads_left(before: set[threading.Thread]) -> list[str]:
    """Names of Bridge threads started since ``before`` that do not stop."""
    new = bridge_threads() - before
    for thread in new:
        thread.join(timeout=STARTUP)
    return sorted(t.name for t in new if t.is_alive())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[socket.socket]:
    """A listening TCP socket that accepts connections and never says anything."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server
    server.close()


def bridge_to(tmp_path: Path, address: str, connect_timeout: float) -> None:
    from mpi4py import MPI

    path = tmp_path / "scheduler.json"
    path.write_text(f'{{"address": "{address}"}}')
    # mode="async" (the default) connects in the background: close() raises what it found
    Bridge(str(path), {"u": SPEC}, comm=MPI.COMM_SELF, connect_timeout=connect_timeout).close()


# The timeout the message names is the one that ended the wait: the Bridge gave up on its own,
# and a Bridge that ignored connect_timeout would hang until pytest's timeout reports it.
def test_bridge_stale_scheduler_file_fails_within_connect_timeout(tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    before = bridge_threads()
    with pytest.raises(
        BridgeError,
        match=f"no Dask scheduler answered at {address} .* within connect_timeout=2 s "
        r"\(TimeoutError: .*the scheduler file may be stale",
    ):
        bridge_to(tmp_path, address, connect_timeout=2)
    assert threads_left(before) == []


def test_bridge_silent_scheduler_fails_within_connect_timeout(
    tmp_path: Path, silent_server: socket.socket
) -> None:
    address = "tcp://{}:{}".format(*silent_server.getsockname())
    before = bridge_threads()
    with pytest.raises(
        BridgeError,
        match=f"no Dask scheduler answered at {address} .* within connect_timeout=2 s "
        r"\(TimeoutError: ",
    ):
        bridge_to(tmp_path, address, connect_timeout=2)
    assert threads_left(before) == []
    # it did connect: the silence, not a refusal, is what it gave up on
    silent_server.setblocking(False)
    silent_server.accept()[0].close()


def test_adapter_unopened_array_times_out_naming_it() -> None:
    from distributed import Client, LocalCluster

    from deisa import Adapter

    # the timeout named is the Adapter's own: it gave up, rather than hang
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
        pytest.raises(TimeoutError, match=r"no simulation has opened array 'ghost' within 0\.5 s"),
    ):
        Adapter(client, timeout=0.5)["ghost"][0]


# mpirun cases: (id, nranks, command after `python`, message on stderr)
def mpi_cases(tmp: Path) -> dict[str, tuple[int, list[str], str]]:
    missing = str(tmp / "nowhere.json")
    stale = tmp / "stale.json"
    stale_address = f"tcp://127.0.0.1:{free_port()}"
    stale.write_text(f'{{"address": "{stale_address}"}}')
    pub = [str(PUBLISHER), missing, "--connect-timeout", "1", "--grid", "2", "1"]
    return {
        "overlap": (2, [*pub, "--overlap-rank", "0"],
                    r"Error: array 'field': rank 0's block spans \[0:5\] along axis 0"),
        "dtype": (2, [*pub, "--bad-dtype-rank", "1"],
                  "Error: array 'field': rank 1 has dtype float32, rank 0 has float64"),
        "missing-file": (2, pub, "BridgeError: .*nowhere.json' does not exist"),
        "stale-file": (2, [str(PUBLISHER), str(stale), "--connect-timeout", "2",
                           "--grid", "2", "1"],
                       f"no Dask scheduler answered at {stale_address}"),
        "heat-ranks": (2, ["-m", "deisa_simulation.heat",
                           str(write_config(tmp / "sim.yml", process_grid=[2, 2]))],
                       r"process_grid \[2, 2\] needs 4 ranks, mpirun gave 2"),
        "heat-on-full": (1, ["-m", "deisa_simulation.heat", str(tmp / "sim.yml"),
                             "--on-full", "drop"], "--on-full: invalid choice: 'drop'"),
        "heat-buffer-nb": (1, ["-m", "deisa_simulation.heat", str(tmp / "sim.yml"),
                               "--buffer-nb", "0"],
                           r"--buffer-nb=0 must be a positive integer or None \(None means "),
    }  # fmt: skip


MPI_IDS = [
    "overlap",
    "dtype",
    "missing-file",
    "stale-file",
    "heat-ranks",
    "heat-on-full",
    "heat-buffer-nb",
]


def run_to_exit(cmd: list[str], hang: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own process group; a run still going after ``hang`` s is a hang:
    the whole group is killed and the test fails, with what the job wrote."""
    proc = subprocess.Popen(
        cmd,
        env=test_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=hang)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} hung: still running after {hang:g} s\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


# every command line names a file under tmp_path, so a rank left behind is found by it
@pytest.mark.timeout(3 * STARTUP)
@pytest.mark.parametrize("case", MPI_IDS)
def test_mpi_job_with_bad_input_exits_nonzero_naming_it(tmp_path: Path, case: str) -> None:
    nranks, args, message = mpi_cases(tmp_path)[case]
    proc = run_to_exit(mpirun(nranks, sys.executable, *args), hang=2 * STARTUP)
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert re.search(message, proc.stderr), proc.stderr[-3000:]
    assert left_behind(tmp_path) == []
