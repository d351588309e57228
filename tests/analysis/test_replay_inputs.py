"""deisa.Replay's inputs are data, never code, and never hang a reader (issue 53 item 4, issue
54 item 2).

- An ADIOS2 array written with an operator is refused before any data is read: the ``plugin``
  operator makes the reader load the library a block header names. The operator here is a real
  one, a copy built with g++ against the headers of the ``adios2`` wheel, whose constructor
  writes the uid that loaded it where ``DEISA_TEST_MARK`` says; the files are written by the
  wheel, and by a real second account for the attack (tests/attack.py's ``stranger``).
- A crafted file declaring more than it holds is refused in well under a second (the review's
  1.6 KB HDF5 file took 50 s and 4.4 GB); a raised cap is the positive control.
- A truncated or missing part of a real BP4/BP5 file (``os.truncate``) is a ``ReplayError``
  naming the file and the step, where it hung before; the reads that hung run in a child
  process with a timeout (a hang inside ADIOS2 holds the GIL: pytest-timeout cannot end it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from deisa import Replay, ReplayError

adios2 = pytest.importorskip("adios2", reason="the adios2 package (pip install adios2) is absent")
bindings = adios2.bindings

ENGINES = ["BP4", "BP5"]
STEPS = 10
SHAPE = (64, 64)

# A pass-through operator for doubles, as a plugin library of ADIOS2's ``plugin`` operator
# (interface v2 of ADIOS2 2.12: headers only); loading it records the uid that loaded it.
OPERATOR = r"""
#include <adios2/plugin/PluginOperatorInterface.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

__attribute__((constructor)) static void mark()
{
    if (const char *path = std::getenv("DEISA_TEST_MARK"))
        if (FILE *f = std::fopen(path, "w"))
        {
            std::fprintf(f, "%d\n", static_cast<int>(getuid()));
            std::fclose(f);
        }
}

class Copy : public adios2::plugin::PluginOperatorInterface
{
public:
    using PluginOperatorInterface::PluginOperatorInterface;
    size_t Operate(const char *in, const adios2::Dims &, const adios2::Dims &count,
                   const adios2::DataType, char *out) override
    {
        size_t n = sizeof(double);
        for (auto c : count)
            n *= c;
        std::memcpy(out, in, n);
        return n;
    }
    size_t InverseOperate(const char *in, const size_t size, char *out) override
    {
        std::memcpy(out, in, size);
        return size;
    }
    bool IsDataTypeValid(const adios2::DataType) const override { return true; }
};

extern "C" adios2::plugin::PluginOperatorInterface *OperatorCreate(const adios2::Params &p)
{
    return new Copy(p);
}
extern "C" void OperatorDestroy(adios2::plugin::PluginOperatorInterface *op) { delete op; }
"""

# Writes STEPS steps of a float64 array "U" (and a single value "step") with ADIOS2's plugin
# operator naming the library argv[3]; run by this account or by the stranger.
WRITER = """
import sys
import numpy as np
import adios2.bindings as b

engine, path, library = sys.argv[1:4]
adios = b.ADIOS()
io = adios.DeclareIO("w")
io.SetEngine(engine)
u = io.DefineVariable("U", np.zeros(1), [4, 3], [0, 0], [4, 3], False)
if library:
    u.AddOperation(adios.DefineOperator("copy", "plugin", {
        "PluginName": "copy", "PluginLibrary": library}), {})
v = io.DefineVariable("V", np.zeros(1), [4, 3], [0, 0], [4, 3], False)
writer = io.Open(path, b.Mode.Write)
for step in range(3):
    writer.BeginStep()
    writer.Put(u, np.arange(12.0).reshape(4, 3) + step, b.Mode.Sync)
    writer.Put(v, -np.arange(12.0).reshape(4, 3) - step, b.Mode.Sync)
    writer.EndStep()
writer.Close()
"""

# Replays argv[1]'s "U" in a fresh process (so that a library it loads runs its constructor):
# prints {"values": step 2's first row} or {"error": the message}.
READER = """
import json, sys
from deisa import Replay, ReplayError

trust = json.loads(sys.argv[2])
try:
    u = Replay(sys.argv[1], trust_operators=trust)["U"]
    print(json.dumps({"values": u[2].compute()[0].tolist()}))
except ReplayError as exc:
    print(json.dumps({"error": str(exc)}))
"""


@pytest.fixture(scope="module")
def operator_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The copy operator, built against the wheel's headers."""
    include = Path(adios2.__file__).parent / "include"
    compiler = shutil.which("g++")
    if compiler is None or not (include / "adios2/plugin/PluginOperatorInterface.h").exists():
        pytest.skip("g++ and the adios2 wheel's headers (include/adios2/plugin) are needed")
    build = tmp_path_factory.mktemp("operator")
    (build / "copy.cxx").write_text(OPERATOR)
    library = build / "libcopy_operator.so"
    cmd = [compiler, "-std=c++17", "-shared", "-fPIC", f"-I{include}", "copy.cxx", "-o", library]
    made = subprocess.run(cmd, cwd=build, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    return library


def write_operated(path: Path, engine: str, library: Path | str) -> Path:
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, engine, str(path), str(library)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return path


def replay_in_a_fresh_process(
    path: Path, trust: bool | list[str], mark: Path, **kwargs: object
) -> dict[str, object]:
    env = {**os.environ, "DEISA_TEST_MARK": str(mark)}
    proc = subprocess.run(
        [sys.executable, "-c", READER, str(path), json.dumps(trust)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        **kwargs,  # type: ignore[arg-type]
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- operators -------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_an_array_written_with_an_operator_is_refused_naming_it_the_operator_and_the_library(
    tmp_path: Path, engine: str, operator_library: Path
) -> None:
    path = write_operated(tmp_path / "out.bp", engine, operator_library)
    mark = tmp_path / "loaded"
    start = time.monotonic()
    result = replay_in_a_fresh_process(path, False, mark)
    assert time.monotonic() - start < 120  # a process start and a metadata read
    error = str(result["error"])
    assert error.startswith(f"'U' in {path} was written with an ADIOS2 operator, the plugin ")
    assert f"library {operator_library} (as the file names it)" in error
    assert "trust_operators=['U']" in error and "\n" not in error
    assert not mark.exists()  # nothing of the library ran
    replay = Replay(path)
    assert replay.names == ["U", "V"]  # listed; the array without operator reads as ever
    assert np.array_equal(replay["V"][1].compute(), -np.arange(12.0).reshape(4, 3) - 1)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_trusted_operator_is_read_and_runs(
    tmp_path: Path, engine: str, operator_library: Path
) -> None:
    path = write_operated(tmp_path / "out.bp", engine, operator_library)
    for trust in (["U"], True):
        mark = tmp_path / f"loaded-{trust}"
        result = replay_in_a_fresh_process(path, trust, mark)
        assert result == {"values": [2.0, 3.0, 4.0]}
        assert mark.read_text().strip() == str(os.getuid())  # the file's library ran here


def test_trust_operators_is_checked(tmp_path: Path) -> None:
    path = write_operated(tmp_path / "plain.bp", "BP5", "")
    with pytest.raises(TypeError, match="trust_operators='U' must be True, False or a coll"):
        Replay(path, trust_operators="U")  # type: ignore[arg-type]
    with pytest.raises(ReplayError, match=r"trust_operators: no array 'W' in .*plain\.bp"):
        Replay(path, trust_operators=["W"])
    assert Replay(path, trust_operators=["U"])["U"].steps == [0, 1, 2]


def test_another_accounts_bp_file_is_refused_and_would_run_its_library(
    stranger: object, operator_library: Path, tmp_path: Path
) -> None:
    """The review's attack: another account drops a ``.bp`` whose blocks name its own library;
    replaying it ran that library as the user. Refused by default; trusted (the positive
    control), the library runs with the user's uid."""
    from attack import Stranger

    assert isinstance(stranger, Stranger)
    with stranger.directory() as theirs, stranger.directory() as staging:
        library = theirs / "libplanted.so"
        shutil.copy(operator_library, staging / library.name)
        stranger.copy(staging / library.name, library)
        for engine in ENGINES:
            made = write_operated(staging / f"{engine}.bp", engine, library)
            path = theirs / f"{engine}.bp"
            stranger.copy(made, path)
            assert os.stat(path / "md.idx").st_uid == os.stat(library).st_uid == stranger.uid
            mark = tmp_path / f"{engine}-mark"
            refused = replay_in_a_fresh_process(path, False, mark)
            assert f"library {library} (as the file names it)" in str(refused["error"])
            assert not mark.exists()
            trusted = replay_in_a_fresh_process(path, ["U"], mark)
            assert trusted == {"values": [2.0, 3.0, 4.0]}
            assert mark.read_text().strip() == str(os.getuid())  # their code, our account


def test_a_bp4_array_whose_characteristics_do_not_parse_counts_as_operated(
    tmp_path: Path,
) -> None:
    """A crafted BP4 index entry cannot hide an operator from the parser: a characteristic it
    does not know counts as one."""
    from deisa.analysis import _replay_operators

    path = write_operated(tmp_path / "plain.bp", "BP4", "")
    assert _replay_operators.bp4_operators(str(path)) == {}
    meta = bytearray((path / "md.0").read_bytes())
    at = meta.index(b"\x08\x01\x00\x00\x00\x07")  # the first block's step (1), file index
    meta[at] = 0x2A  # no characteristic of BP4
    (path / "md.0").write_bytes(bytes(meta))
    assert "U" in _replay_operators.bp4_operators(str(path))


# -- what a file declares --------------------------------------------------------------------


def crafted_hdf5(path: Path, entries: int) -> Path:
    """The review's crafted file: a ``step`` dataset declaring ``entries`` int64 values, none
    stored (chunked, no chunk written), beside a small array with a time axis."""
    with h5py.File(path, "w") as f:
        f.create_dataset("step", shape=(entries,), dtype=np.int64, chunks=(1024,))
        f.create_dataset("gtemp", data=np.zeros((2, 3)))
    return path


def test_a_crafted_hdf5_step_dataset_is_refused_in_well_under_a_second(tmp_path: Path) -> None:
    path = crafted_hdf5(tmp_path / "crafted.h5", 2**40)  # 8 TiB declared
    assert path.stat().st_size < 16 * 1024
    start = time.monotonic()
    with pytest.raises(ReplayError) as caught:
        Replay(path)
    assert time.monotonic() - start < 1.0
    assert str(caught.value) == (
        f"the 'step' dataset of {path} declares shape (1099511627776,) (8796093022208 bytes of "
        "int64), over max_metadata_bytes=67108864: a crafted file, or raise the cap for a file "
        "you trust"
    )


def test_positive_control_a_raised_cap_reads_what_the_crafted_file_declares(
    tmp_path: Path,
) -> None:
    """The cap is what stops it: raised, the whole declared dataset is allocated and read."""
    entries = 2**24  # 128 MiB of int64, over the 64 MiB cap
    path = crafted_hdf5(tmp_path / "crafted.h5", entries)
    with pytest.raises(ReplayError, match="over max_metadata_bytes"):
        Replay(path)
    tracemalloc.start()
    try:
        replay = Replay(path, max_metadata_bytes=2**30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak >= entries * 8  # the declared size, allocated
    assert replay.names == []  # gtemp's 2 rows are not the 2**24 steps declared


def test_the_step_dataset_of_another_accounts_file_is_refused(
    stranger: object, tmp_path: Path
) -> None:
    """The review's crafted HDF5 file, dropped by another account: refused in well under a
    second (the control: the raised cap above)."""
    from attack import Stranger

    assert isinstance(stranger, Stranger)
    with stranger.directory() as theirs, stranger.directory() as staging:
        path = theirs / "heat.h5"
        stranger.copy(crafted_hdf5(staging / "heat.h5", 2**40), path)
        assert path.stat().st_uid == stranger.uid and path.stat().st_size < 16 * 1024
        start = time.monotonic()
        with pytest.raises(ReplayError, match=r"'step' dataset of .* over max_metadata_bytes"):
            Replay(path)
        assert time.monotonic() - start < 1.0


def test_a_zarr_step_array_is_capped_too(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    root = zarr.open_group(str(tmp_path / "crafted.zarr"), mode="w")
    root.create_array("step", shape=(2**40,), dtype="int64", chunks=(1024,))
    root.create_array("gtemp", shape=(2, 3), dtype="float64")
    start = time.monotonic()
    with pytest.raises(ReplayError, match=r"'step' dataset of .*crafted.zarr declares shape"):
        Replay(tmp_path / "crafted.zarr")
    assert time.monotonic() - start < 1.0


def write_blocks(path: Path, shape: tuple[int, ...], blocks: list[tuple[Any, Any]]) -> Path:
    """One step of "U", float64, one block at each ``(start, count)`` of ``blocks``, each
    holding its first index's values."""
    adios = bindings.ADIOS()
    io = adios.DeclareIO(f"blocks-{path.name}")
    io.SetEngine("BP5")
    ones = [1] * len(shape)
    u = io.DefineVariable("U", np.zeros(1), list(shape), [0] * len(shape), ones, False)
    writer = io.Open(str(path), bindings.Mode.Write)
    writer.BeginStep()
    for start, count in blocks:
        u.SetSelection([list(start), list(count)])
        writer.Put(u, np.full(count, float(start[0])), bindings.Mode.Sync)
    writer.EndStep()
    writer.Close()
    return path


def test_a_bp_shape_its_data_cannot_hold_is_refused_before_anything_is_sized(
    tmp_path: Path,
) -> None:
    """300 one-cell blocks on the diagonal of a cube of side 600: 1.7 GB declared a step, its
    blocks 600**3 pieces (a 1.7 GB grid to assemble the step), in a file of kilobytes: a level
    that covers part of its domain (issue 56) holds less than its shape, so the grid refuses it."""
    n = 300
    diagonal = [((2 * i,) * 3, (1, 1, 1)) for i in range(n)]
    path = write_blocks(tmp_path / "diagonal.bp", (2 * n,) * 3, diagonal)
    start = time.monotonic()
    with pytest.raises(ReplayError) as caught:
        Replay(path)["U"]
    assert time.monotonic() - start < 1.0
    assert str(caught.value).startswith(
        f"the 300 blocks of 'U' at step 0 in {path} cut its shape (600, 600, 600) into 600 x 600 x "
        "600 pieces: assembling it would take 1728000000 bytes, over max_metadata_bytes=67108864"
    )


def test_a_bp_block_grid_over_the_cap_is_refused(tmp_path: Path) -> None:
    """Row i cut at column i: 40 x 40 pieces, a grid of 12,800 bytes to check they cover the
    array (a trusted operator's data may be smaller than its shape, so this cap still holds)."""
    n = 40
    rows = [((i, 0), (1, i)) for i in range(1, n)] + [((i, i), (1, n - i)) for i in range(n)]
    path = write_blocks(tmp_path / "rows.bp", (n, n), rows)
    with pytest.raises(ReplayError) as caught:
        Replay(path, max_metadata_bytes=4096)["U"]
    assert str(caught.value) == (
        f"the blocks of 'U' in {path} cut it into 40 x 40 pieces: checking that they cover it "
        "would take 12800 bytes, over max_metadata_bytes=4096 (raise it for a file you trust, or "
        "give chunks=)"
    )
    u = Replay(path)["U"]  # the control: under the default cap, read as written
    assert np.array_equal(u[0].compute(), np.repeat(np.arange(float(n))[:, None], n, axis=1))


# -- truncated, missing, not a dataset -------------------------------------------------------


def write_steps(path: Path, engine: str) -> Path:
    adios = bindings.ADIOS()
    io = adios.DeclareIO(f"steps-{path.name}")
    io.SetEngine(engine)
    u = io.DefineVariable("U", np.zeros(1), list(SHAPE), [0, 0], list(SHAPE), False)
    writer = io.Open(str(path), bindings.Mode.Write)
    for step in range(STEPS):
        writer.BeginStep()
        writer.Put(u, np.full(SHAPE, float(step)), bindings.Mode.Sync)
        writer.EndStep()
    writer.Close()
    return path


def cut_in_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


@pytest.fixture(params=ENGINES)
def bp_file(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    yield write_steps(tmp_path / "out.bp", request.param)


# Replays argv[1]'s "U" step by step in a fresh process: a line {"read": step} per step read,
# then {"error": message} if a ReplayError stops it. A hang in ADIOS2 holds the GIL, which
# pytest-timeout's timer needs: only another process can bound it.
STEPPER = """
import json, sys
from deisa import Replay, ReplayError

try:
    u = Replay(sys.argv[1])["U"]
    for step in u.steps:
        assert (u[step].compute() == step).all()
        print(json.dumps({"read": step}), flush=True)
except ReplayError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def replay_steps(path: Path) -> tuple[list[int], str | None]:
    """The steps of ``path`` read, and the ReplayError that stopped the reading (if one did);
    a failure if it takes over STARTUP seconds."""
    from conftest import STARTUP

    try:
        proc = subprocess.run(
            [sys.executable, "-c", STEPPER, str(path)],
            capture_output=True,
            text=True,
            timeout=STARTUP,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"replaying {path} hung: no end after {STARTUP} s ({exc.stdout!r})")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    errors = [line["error"] for line in lines if "error" in line]
    return [line["read"] for line in lines if "read" in line], (errors or [None])[0]


def test_a_truncated_metadata_file_is_an_error_naming_it(bp_file: Path) -> None:
    """It hung (BP5: ADIOS2 waits an hour for the metadata the index announces)."""
    cut_in_half(bp_file / "md.0")
    read, message = replay_steps(bp_file)
    assert read == [] and message is not None
    assert message.startswith(f"{bp_file}: not readable by ADIOS2 (")
    assert "md.0 has not contained enough data" in message
    assert "\x1b" not in message and "\n" not in message


def test_a_truncated_data_file_is_an_error_naming_the_step(bp_file: Path) -> None:
    """Steps 0-4 read, step 5 hung (BP4: for ever; BP5: a minute of retries)."""
    cut_in_half(bp_file / "data.0")
    read, message = replay_steps(bp_file)
    assert read == list(range(len(read))) and 3 <= len(read) <= 5
    step = len(read)
    assert message is not None
    assert message.startswith(f"{bp_file}: step {step} of 'U' cannot be read (")
    assert "data.0" in message and "\x1b" not in message
    u = Replay(bp_file)["U"]  # in this process: the error, and nothing broken behind it
    with pytest.raises(ReplayError, match=f"step {step} of 'U' cannot be read"):
        u[step].compute()
    assert (u[0].compute() == 0).all()


def test_a_missing_data_file_is_an_error_naming_it(bp_file: Path) -> None:
    os.remove(bp_file / "data.0")
    with pytest.raises(ReplayError) as caught:
        Replay(bp_file)["U"]
    assert str(caught.value) == (
        f"'U' in {bp_file} declares shape (64, 64) (32768 bytes a step), more than the 0 bytes "
        "of its data files (data.*): step 0 cannot be read (a data file missing, truncated or "
        "crafted)"
    )


def test_a_data_file_gone_after_the_replay_is_made_names_the_step(bp_file: Path) -> None:
    u = Replay(bp_file, steps=range(100, 100 + STEPS))["U"]
    os.remove(bp_file / "data.0")
    with pytest.raises(ReplayError) as caught:
        u[103].compute()
    message = str(caught.value)
    assert message.startswith(f"{bp_file}: step 103 of 'U' cannot be read (")
    assert f"couldn't open file {bp_file}/data.0" in message and "\x1b" not in message


def test_a_pipe_in_place_of_a_file_is_refused_not_waited_on(bp_file: Path, tmp_path: Path) -> None:
    """Opening a pipe blocks until someone writes to it: another account's crafted BP output
    (or HDF5 file) could hold a reader for ever."""
    os.remove(bp_file / "md.0")
    os.mkfifo(bp_file / "md.0")
    read, message = replay_steps(bp_file)
    assert read == [] and message == (
        f"{bp_file}/md.0 is not a regular file (a pipe, a device, a directory or a dangling "
        "link): not BP output a Replay reads"
    )
    os.mkfifo(tmp_path / "heat.h5")
    with pytest.raises(ReplayError, match=r"heat\.h5: not a regular file"):
        Replay(tmp_path / "heat.h5")


def test_a_directory_that_is_no_dataset_says_what_replay_reads(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not data")
    with pytest.raises(ReplayError) as caught:
        Replay(tmp_path / "notes")
    assert str(caught.value) == (
        f"{tmp_path / 'notes'} is a directory but no dataset: not ADIOS2 BP output (no md.idx) "
        "nor a Zarr store (no zarr.json, .zgroup, .zarray); Replay reads an HDF5 file, a Zarr "
        "store, a .bp directory, or one file per step"
    )


def test_adios2_messages_lose_their_colour_codes() -> None:
    from deisa.analysis._replay_bp import adios2_message

    raw = RuntimeError(
        "\x1b[1;36m[Wed Dec 02 01:19:18 2026]\x1b[1;34m [ADIOS2 EXCEPTION]\x1b[0m <Toolkit> "
        "<transport::file::FilePOSIX> <CheckFile> : couldn't open file x/data.0\x1b[0m\n"
        ": iostream error"
    )
    assert adios2_message(raw) == (
        "[ADIOS2 EXCEPTION] <Toolkit> <transport::file::FilePOSIX> <CheckFile> : couldn't "
        "open file x/data.0"
    )
