"""deisa.analysis.compat: the released DEISA client API over the Adapter and contracts.

The analytics scripts below are the released ones (pdidev/deisa's example/derivative.py, the
deisa_example client.py of the ``Initialization`` adaptor), as their users wrote them; each runs
in a thread against a real scheduler and two workers in process (``gen_cluster``), while a real
one-rank Bridge (``MPI.COMM_SELF``, in another thread) or rank 0 of a two-block Bridge
(``stream_driver.Rank0``) publishes, and its results are checked against the data published.
"""

from __future__ import annotations

import asyncio
import json
import logging
import runpy
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import STARTUP
from distributed.utils_test import gen_cluster, poll_for
from stream_driver import META, Rank0, block, install

from deisa.analysis import _compat_client
from deisa.analysis._released import Config, Selection, read_config
from deisa.analysis.compat import Deisa, Initialization, NotSupportedError
from deisa.contract import Contract, ContractError

SHAPE, NSTEPS = (8, 6), 6  # the one-rank Bridge's global_t

# prescript.py of the released example writes this file, read by the simulation and the script
CONFIG = {
    "global_size": {"height": SHAPE[0], "width": SHAPE[1]},
    "parallelism": {"height": 1, "width": 1},
    "MaxtimeSteps": NSTEPS,
    "workers": 2,
}

# the released plugin's grammar: pdidev/deisa example/simulation.yml (1 x 1 ranks here)
PDI_YAML = """
pdi:
  metadata:
    pcoord: {type: array, subtype: int, size: 2}
    psize: {type: array, subtype: int, size: 2}
    dsize: {type: array, subtype: int, size: 2}
    MaxtimeSteps: int
    timestep: int
  data:
    local_t: {type: array, subtype: double, size: ['$dsize[0]', '$dsize[1]'],
              subsize: ['$dsize[0] - 2', '$dsize[1] - 2'], start: [1, 1]}
  plugins:
    mpi:
    deisa:
      scheduler_info: scheduler.json
      init_on: init
      time_step: $timestep
      deisa_arrays:
        global_t:
          type: array
          subtype: double
          size: [SIZE, '($dsize[0] - 2) * $psize[0]', '($dsize[1] - 2) * $psize[1]']
          subsize: [1, '$dsize[0] - 2', '$dsize[1] - 2']
          start: [$timestep, '($dsize[0] - 2) * $pcoord[0]', '($dsize[1] - 2) * $pcoord[1]']
          +timedim: TIMEDIM
      map_in:
        local_t: global_t
"""

# pdidev/deisa example/derivative.py as released in 0.3.0 and 0.3.1 (commit 124c5e9), verbatim
DERIVATIVE_0_3_1 = '''
from deisa import Deisa
from dask.distributed import performance_report, wait
import os

os.environ["DASK_DISTRIBUTED__COMM__UCX__INFINIBAND"] = "True"

# Scheduler file name and configuration file
scheduler_info = 'scheduler.json'
config_file = 'config.yml'

# Initialize Deisa
Deisa = Deisa(scheduler_info, config_file)

# Get client
client = Deisa.get_client()

# either: Get data descriptor as a list of Deisa arrays object
arrays = Deisa.get_deisa_arrays()
# or: Get data descriptor as a dict of Dask array
# arrays = Deisa.get_dask_arrays()

# Select data
gt = arrays["global_t"][...]
print(gt, flush=True)

# Check contract
arrays.check_contract()


def Derivee(F, dx):
    """
    First Derivative
       Input: F        = function to be derivate
              dx       = step of the variable for derivative
       Output: dFdx = first derivative of F
    """
    c0 = 2. / 3.
    dFdx = c0 / dx * (F[3: - 1] - F[1: - 3] - (F[4:] - F[:- 4]) / 8.)
    return dFdx


# py-bokeh is needed if you wanna see the perf report
with performance_report(filename="dask-report.html"):

    # Construct a lazy task graph
    cpt = Derivee(gt, 1).mean()

    # Submit the task graph to the scheduler
    s = client.persist(cpt, release=True)

    # Sign contract
    arrays.validate_contract()
    del gt
    # Print the result, note that "s" is a future object, to get the result of the computation,
    # we call `s.result()` to retreive it.
    print(client.compute(s).result(), flush=True)

print("Done", flush=True)
client.shutdown()
'''

# the same example as 0.3.2 shipped it (Deisa(scheduler_info, nb_workers)), with a selection of
# steps and a region instead of [...], as the contract was meant for
SELECTION_0_3_2 = """
from deisa import Deisa
import yaml

scheduler_info = 'scheduler.json'
config_file = 'config.yml'

with open(config_file, "r") as f:
    cfg = yaml.safe_load(f)
nb_workers = cfg["workers"]

Deisa = Deisa(scheduler_info, nb_workers)
client = Deisa.get_client()
arrays = Deisa.get_deisa_arrays()

gt = arrays["global_t"][1:5:2, 2:6, ::2]
contract = arrays.check_contract()
print(contract, flush=True)
arrays.validate_contract()
print(client.compute(gt.sum(), release=True).result(), flush=True)
"""

# deisa_example's client.py (commit 8f83d55), the Initialization(...) / get_data() adaptor: the
# one line that changes is its import (dask_interface.py was a file beside the script); a long
# comment is wrapped
INITIALIZATION_CLIENT = """
import yaml
from deisa.analysis.compat import Initialization
import dask
import dask.array as da
from dask.distributed import performance_report

# Get configuration
with open(r'config.yml') as file:
    data = yaml.load(file, Loader=yaml.FullLoader)
    Sworkers = data["workers"]

# Scheduler file name
scheduler_info = 'scheduler.json'

# Initialize the Deisa Adaptor
C = Initialization(Sworkers, scheduler_info)

# Check if client version is compatible with scheduler version
C.client.get_versions(check=True)

# Get data descriptor as a dict of Dask arrays
arrays = C.get_data()

# py-bokeh is needed if you wanna see the perf report
with performance_report(filename="dask-report.html"):
    # Get the Dask array global_t
    gt = arrays["global_t"]
    #gt = gt.rechunk({1: 'auto', 2: 'auto'})
    print(gt.chunks)
    # Construct a lazy task graph
    cpt = (gt.sum() - gt.mean())*5.99 /  gt.mean()
    # Submit the task graph to the scheduler
    s = C.client.compute(cpt, release=True)
    # Print the result, note that "s" is a future object, to get the result of the computation,
    # we call `s.result()` to retreive it.
    print(s.result())
"""


@pytest.fixture(autouse=True)
def warned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-time FutureWarning is given (its own test resets this)."""
    monkeypatch.setattr(_compat_client, "_warned", True)


def field(step: int) -> np.ndarray:
    """Step ``step`` of global_t: integers, so that sums are exact in any order."""
    x, y = np.indices(SHAPE)
    return step * 1e6 + x * 1e3 + y


def series() -> np.ndarray:
    return np.stack([field(step) for step in range(NSTEPS)])


def in_thread(fn: Any, *args: Any) -> Any:
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


def run_script(path: Path, text: str) -> dict[str, Any]:
    path.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return runpy.run_path(str(path), run_name="__main__")


def simulate(scheduler_file: Path, wait_for_contract: bool = False) -> list[int]:
    """A one-rank simulation publishing global_t; returns the bytes it sent per step.

    ``wait_for_contract``: wait, before the first step, until rank 0 has the contract, as the
    released simulation waited for the one its analytics signed.
    """
    from mpi4py import MPI

    from deisa import ArraySpec, Bridge

    spec = ArraySpec("float64", SHAPE, (0, 0), SHAPE)
    with Bridge(str(scheduler_file), {"global_t": spec}, comm=MPI.COMM_SELF, mode="sync") as br:
        if wait_for_contract:  # the analytics sets it
            poll_for(
                lambda: bool(br._parts.contracts.known_versions().get("global_t")),
                STARTUP,
                period=0.01,
            )
        for step in range(NSTEPS):
            br.publish("global_t", field(step), step)
    return [t.nbytes for t in br.timings]


def setup_run(tmp_path: Path, s: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The files of a released run in ``tmp_path`` (the working directory): the scheduler file
    and prescript.py's config.yml."""
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_file.write_text(json.dumps({"address": s.address}))
    (tmp_path / "config.yml").write_text(yaml.safe_dump(CONFIG))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DASK_DISTRIBUTED__COMM__UCX__INFINIBAND", raising=False)
    return scheduler_file


# the loggers the released API's modules write to (each its own: deisa.analysis._compat_v03...)
COMPAT_LOGGERS = ("deisa.analysis.compat", "deisa.analysis._compat")


def compat_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines above debug that the released API's modules logged."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(COMPAT_LOGGERS) and r.levelno >= logging.INFO
    ]


# -- the released scripts, unchanged ------------------------------------------------------------


# client.shutdown() at the end of the released example stops the scheduler and the workers
# under gen_cluster: their threads end with them, not with the test's own cleanup
@gen_cluster(client=True, timeout=STARTUP, clean_kwargs={"threads": False})
async def test_released_derivative_example_runs_unchanged(
    c, s, a, b, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, caplog: Any
) -> None:
    caplog.set_level(logging.DEBUG, logger="deisa.analysis")
    scheduler_file = setup_run(tmp_path, s, monkeypatch)
    analytics = in_thread(run_script, tmp_path / "derivative.py", DERIVATIVE_0_3_1)
    sent = await in_thread(simulate, scheduler_file)
    names = await analytics
    assert all(sent)  # [...] asks for everything
    out = capsys.readouterr().out.splitlines()
    assert "shape=(6, 8, 6)" in out[0] and out[-1] == "Done"
    full = series()
    expected = (2.0 / 3.0 * (full[3:-1] - full[1:-3] - (full[4:] - full[:-4]) / 8.0)).mean()
    np.testing.assert_allclose(float(out[-2]), expected, rtol=1e-12)
    assert names["arrays"].check_contract() == {"global_t": [(0, None, 1), (0, 8, 1), (0, 6, 1)]}
    assert compat_records(caplog) == []  # debug lines only
    assert "deisa.analysis._compat_v03" in {r.name for r in caplog.records}  # under its own name


@gen_cluster(client=True, timeout=STARTUP)
async def test_released_selection_is_the_contract_and_reads_exactly_the_data(
    c, s, a, b, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    scheduler_file = setup_run(tmp_path, s, monkeypatch)
    simulation = in_thread(simulate, scheduler_file, True)
    names = await in_thread(run_script, tmp_path / "select.py", SELECTION_0_3_2)
    sent = await simulation
    # the steps not selected are not sent once rank 0 has the contract (step 0 may go before)
    assert {step for step, nbytes in enumerate(sent) if nbytes} - {0} == {1, 3}
    assert names["contract"] == {"global_t": [(1, 5, 2), (2, 6, 1), (0, 6, 2)]}
    wanted = Contract.build((slice(2, 6), slice(0, 5)), range(1, 5, 2)).resolved(SHAPE)
    global_t = names["arrays"]["global_t"]
    assert global_t.descriptor.contract_of(1).describe() == wanted.describe()

    def then() -> Any:
        got = names["client"].compute(names["gt"]).result()
        # step 3 came under the contract of rows 2:6: another selection of it cannot be read
        with pytest.raises(
            ContractError,
            match=r"step 3 of 'global_t' was sent under the "
            r"contract region \[2:6, 0:5\].*not the selection \['0:2', '0:6'\]",
        ):
            global_t[3, 0:2]
        names["client"].close()
        return got

    got = await in_thread(then)
    np.testing.assert_array_equal(got, series()[1:5:2, 2:6, ::2])
    assert capsys.readouterr().out.splitlines()[-1] == str(got.sum())


@gen_cluster(client=True, timeout=STARTUP)
async def test_initialization_get_data_adaptor_runs_with_its_import_changed(
    c, s, a, b, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    setup_run(tmp_path, s, monkeypatch)
    await install(c, s)
    rank0 = Rank0(c, [a, b], "global_t", "r1")  # two blocks of (2, 3), steps sent whole
    await rank0.open()
    analytics = in_thread(run_script, tmp_path / "client.py", INITIALIZATION_CLIENT)
    for step in range(3):
        await rank0.publish(step)
    await rank0.close(3)
    names = await analytics
    await in_thread(names["C"].client.close)
    full = np.stack([np.vstack([block(t, 0), block(t, 1)]) for t in range(3)])
    expected = (full.sum() - full.mean()) * 5.99 / full.mean()
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "((1, 1, 1), (2, 2), (3,))"
    assert out[-1] == str(expected)  # integers: the same sums in any order, the same float


# -- the other calls, on rank 0 of a two-block Bridge ----------------------------------------


@gen_cluster(client=True, timeout=STARTUP, clean_kwargs={"threads": False})
async def test_calls_map_to_the_adapter_and_its_contracts(c, s, a, b, tmp_path: Path) -> None:
    await install(c, s)
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_file.write_text(json.dumps({"address": s.address}))
    ranks = {name: Rank0(c, [a, b], name, "r1") for name in ("t", "u")}
    for rank0 in ranks.values():
        await rank0.open()

    def before(deisa: Deisa) -> list[Any]:
        arrays = deisa.get_deisa_arrays()
        u = arrays["u"]
        u.set_selection([(0, None, 2), (0, 2, 1), (None, None, None)])
        arrays.validate_contract()  # set now: the array is open and nothing was read
        signed = deisa.adapter["u"].contract
        arrays.reset_contract()
        arrays.validate_contract()
        return [signed, deisa.adapter["u"].contract, arrays.check_contract()]

    deisa = await in_thread(lambda: Deisa(str(scheduler_file), 2, timeout=STARTUP))
    signed, dropped, checked = await in_thread(before, deisa)
    assert signed.describe() == "region [0:2, 0:3], steps 0::2" and dropped is None
    assert checked == {"u": "All"}
    for step in range(4):
        for rank0 in ranks.values():
            await rank0.publish(step)
    for rank0 in ranks.values():
        await rank0.close(4)
    full = np.stack([np.vstack([block(t, 0), block(t, 1)]) for t in range(4)])

    def after() -> dict[str, Any]:
        whole = deisa.get_dask_arrays()  # both arrays, read side by side to their ends
        arrays = deisa.get_deisa_arrays()
        return {
            "whole": {name: x.compute() for name, x in whole.items()},
            "last": arrays["t"][-1].compute(),
            "cut": arrays["t"][1:, 1:3, ::2].compute(),
            "point": arrays["u"][2, -1, 1].compute(),
            "contract": arrays.check_contract(),
        }

    got = await in_thread(after)
    assert set(got["whole"]) == {"t", "u"}
    for x in got["whole"].values():
        np.testing.assert_array_equal(x, full)
    np.testing.assert_array_equal(got["last"], full[-1])
    np.testing.assert_array_equal(got["cut"], full[1:, 1:3, ::2])
    assert full.shape[1:] == tuple(META["shape"]) and got["point"] == full[2, -1, 1]
    assert got["contract"] == {
        "t": [(1, None, 1), (1, 3, 1), (0, 3, 2)],
        "u": [(2, 3, 1), (3, 4, 1), (1, 2, 1)],
    }
    await in_thread(deisa.wait_for_last_bridge_and_shutdown, 0.05)
    assert s.status.name in ("closing", "closed")


@gen_cluster(client=True, timeout=STARTUP)
async def test_a_fixed_time_length_ends_the_series_without_the_end_of_stream(
    c, s, a, b, tmp_path: Path
) -> None:
    await install(c, s)
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_file.write_text(json.dumps({"address": s.address}))
    pdi_yaml = tmp_path / "simulation.yml"
    declared = PDI_YAML.replace("SIZE", "3").replace("TIMEDIM", "0").replace("global_t", "t")
    pdi_yaml.write_text(declared)
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    for step in range(4):  # one more than the YAML's time length, and no end of stream
        await rank0.publish(step)

    def analytics() -> list[Any]:
        deisa = Deisa(str(scheduler_file), str(pdi_yaml), timeout=STARTUP)
        arrays = deisa.get_deisa_arrays()
        with pytest.raises(ValueError, match=r"nosuch array does not exist.*declares 't'"):
            arrays["nosuch"]
        everything = arrays["t"][...]  # kept: a step is handed out once (the Adapter's rule)
        got = [everything.compute(), arrays["t"][-1].compute()]
        deisa.client.close()
        return got

    everything, last = await in_thread(analytics)
    full = np.stack([np.vstack([block(t, 0), block(t, 1)]) for t in range(3)])
    np.testing.assert_array_equal(everything, full)
    np.testing.assert_array_equal(last, full[-1])
    await rank0.close(4)


# -- refusals ---------------------------------------------------------------------------------


@gen_cluster(client=True, timeout=STARTUP)
async def test_calls_that_do_not_map_raise_saying_what_to_write(c, s, a, b, tmp_path: Path) -> None:
    await install(c, s)
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_file.write_text(json.dumps({"address": s.address}))
    rank0 = Rank0(c, [a, b], "t", "r1")
    await rank0.open()
    for step in range(2):
        await rank0.publish(step)
    await rank0.close(2)

    def analytics() -> None:
        adaptor = Initialization(2, str(scheduler_file), timeout=STARTUP)
        arrays = adaptor.get_deisa_arrays()
        with pytest.raises(NotSupportedError, match=r"as_list=True.*adapter\[name\]\.items\(\)"):
            adaptor.get_data(as_list=True)
        with pytest.raises(NotSupportedError, match="as_list=True"):
            adaptor.get_dask_arrays(as_list=True)
        with pytest.raises(NotSupportedError, match=r"drop_arrays\(\['t'\]\).*plugin's YAML"):
            arrays.drop_arrays(["t"])
        with pytest.raises(NotSupportedError, match=r"add_deisa_array.*keep it in a variable"):
            arrays.add_deisa_array(arrays["t"], "t2")
        with pytest.raises(NotSupportedError, match=r"set_selection\(None\) on 't'"):
            arrays["t"].set_selection(None)
        with pytest.raises(NotSupportedError, match=r"with \[0, 1\].*adapter\['t'\]\[\[0, 5\]"):
            arrays["t"][[0, 1]]
        adaptor.client.close()

    await in_thread(analytics)


def test_initialization_of_the_first_dask_interface_is_refused() -> None:
    with pytest.raises(NotSupportedError, match=r"Initialization\(Ssize, Sworker\).*Initial"):
        Initialization(4, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nb_workers=0 must be a positive integer"):
        Initialization(0, "scheduler.json")
    with pytest.raises(TypeError, match=r"config=2\.5 must be a YAML file or a number"):
        Deisa("scheduler.json", 2.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("index", "error", "match"),
    [
        ([0, 1], NotSupportedError, r"with \[0, 1\]: the released library took integers"),
        ((0, np.arange(2)), NotSupportedError, "with array"),
        ((0, None), NotSupportedError, "with None"),
        (True, NotSupportedError, "with True"),
        (slice(5, 2), NotSupportedError, "selects no step on step"),
        ((0, slice(3, 3)), NotSupportedError, "selects no index on axis 1"),
        (slice(None, None, -1), ValueError, "only positive step values are accepted"),
        ((0, 0, 0, 0), IndexError, "too many indices for 'gt'"),
        ((Ellipsis, 0, Ellipsis), IndexError, "single ellipsis"),
        ((0, 8), IndexError, "index 8 is out of bounds for axis 1 of 'gt'"),
    ],
)
def test_selections_that_do_not_map_are_refused(index: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Selection.parse(index, "gt", SHAPE)


# -- selections and configurations, without a cluster ------------------------------------------


@pytest.mark.parametrize(
    ("index", "length", "released", "contract"),
    [
        (Ellipsis, None, [(0, None, 1), (0, 8, 1), (0, 6, 1)], None),
        (3, None, [(3, 4, 1), (0, 8, 1), (0, 6, 1)], (None, range(3, 4))),
        (-1, None, [(-1, None, 1), (0, 8, 1), (0, 6, 1)], None),
        (-1, 6, [(5, 6, 1), (0, 8, 1), (0, 6, 1)], (None, range(5, 6))),
        (slice(2, None, 3), None, [(2, None, 3), (0, 8, 1), (0, 6, 1)],
         (None, slice(2, None, 3))),
        ((slice(1, 5, 2), slice(2, 6), slice(None, None, 2)), None,
         [(1, 5, 2), (2, 6, 1), (0, 6, 2)], ((slice(2, 6), slice(0, 5)), range(1, 5, 2))),
        ((Ellipsis, -1), None, [(0, None, 1), (0, 8, 1), (5, 6, 1)],
         ((slice(0, 8), slice(5, 6)), None)),
        ((slice(-2, None), 1), None, [(-2, None, 1), (1, 2, 1), (0, 6, 1)],
         ((slice(1, 2), slice(0, 6)), None)),
    ],
)  # fmt: skip
def test_selections_translate_to_contracts(
    index: Any, length: int | None, released: list[Any], contract: Any
) -> None:
    selection = Selection.parse(index, "gt", SHAPE, length)
    assert selection.released() == released
    assert selection.contract(SHAPE) == contract
    if contract is not None:
        Contract.build(*contract).resolved(SHAPE)  # a contract the scheduler accepts


def test_reading_a_slice_waits_for_no_step_past_its_last() -> None:
    assert Selection.parse(slice(1, 12, 4), "gt", SHAPE).steps() == slice(1, 10, 4)  # 1, 5, 9
    assert Selection.parse(slice(1, None, 4), "gt", SHAPE).steps() == slice(1, None, 4)


def test_config_is_the_launch_configuration_or_the_released_pdi_yaml(tmp_path: Path) -> None:
    launch = tmp_path / "config.yml"
    launch.write_text(yaml.safe_dump(CONFIG))
    assert read_config(launch) == Config(2, {})
    pdi = tmp_path / "simulation.yml"
    pdi.write_text(PDI_YAML.replace("SIZE", "$MaxtimeSteps").replace("TIMEDIM", "0"))
    assert read_config(pdi) == Config(None, {"global_t": None})
    pdi.write_text(PDI_YAML.replace("SIZE", "6").replace("TIMEDIM", "0"))
    assert read_config(pdi).arrays == {"global_t": 6}
    pdi.write_text(PDI_YAML.replace("SIZE", "6").replace("TIMEDIM", "2"))
    with pytest.raises(NotSupportedError, match=r"array 'global_t' of .* has `\+timedim: 2'"):
        read_config(pdi)
    launch.write_text(yaml.safe_dump({**CONFIG, "workers": 0}))
    with pytest.raises(ValueError, match="workers=0 must be a positive integer"):
        read_config(launch)
    launch.write_text(yaml.safe_dump({"MaxtimeSteps": 3}))
    with pytest.raises(ValueError, match=r"config\.yml is neither a DEISA launch configuration"):
        read_config(launch)


def test_the_first_object_warns_once_pointing_to_the_guide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_compat_client, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _compat_client.announce("deisa.Deisa")
        _compat_client.announce("deisa.Deisa")
    assert [(w.category, w.filename) for w in caught] == [(FutureWarning, __file__)]
    assert "deisa.Deisa: a released DEISA client API (0.3.x" in str(caught[0].message)
    assert "docs/migrating.md" in str(caught[0].message)
