"""The RPATH and RUNPATH of ELF objects (deisa.launcher.elf), read as ``readelf -d`` reads
them, from libraries built here with each kind of entry."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deisa.launcher.elf import BadElfError, NotElfError, search_paths

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def shared_library(path: Path, *link: str) -> Path:
    """A small shared library ``path``, linked with the options ``link``."""
    source = path.with_suffix(".c")
    source.write_text("int deisa_probe(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(path), str(source), *link],
                   check=True, timeout=120)  # fmt: skip
    return path


def readelf(path: Path) -> dict[str, list[str]]:
    """What ``readelf -d`` says of ``path``'s RPATH and RUNPATH."""
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    found: dict[str, list[str]] = {}
    for tag, value in re.findall(r"\((RPATH|RUNPATH)\)\s+Library \w+: \[(.*)\]", out):
        found.setdefault(tag, []).extend(value.split(":"))
    return found


@needs_cc
@pytest.mark.parametrize(
    ("rpath", "tags"),
    [
        ("/opt/x::lib:$ORIGIN/../y", "--enable-new-dtags"),
        ("/opt/x:", "--disable-new-dtags"),  # RPATH, as older linkers write
        (None, None),
    ],
)
def test_the_entries_are_read_as_written(
    rpath: str | None, tags: str | None, tmp_path: Path
) -> None:
    link = [f"-Wl,-rpath,{rpath}", f"-Wl,{tags}"] if rpath else []
    lib = shared_library(tmp_path / "libprobe.so", *link)
    found = search_paths(lib)
    if rpath is None:
        assert found == {}
    else:
        tag = "RUNPATH" if tags == "--enable-new-dtags" else "RPATH"
        assert found == {tag: rpath.split(":")}  # the empty entries kept
    if shutil.which("readelf"):
        assert found == readelf(lib)


def test_the_libraries_of_this_python_read_as_readelf_reads_them() -> None:
    """Every ELF object of this Python's installed extension modules and libraries."""
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf")
    import numpy

    objects = sorted(Path(numpy.__file__).parent.rglob("*.so"))[:40]
    assert objects
    for path in objects:
        assert search_paths(path) == readelf(path), path


def test_a_file_that_is_not_elf_or_is_cut_short(tmp_path: Path) -> None:
    text = tmp_path / "libc.so"
    text.write_text("/* GNU ld script */\nGROUP ( libc.so.6 )\n")
    with pytest.raises(NotElfError, match="is not an ELF file"):
        search_paths(text)
    if shutil.which("cc") is None:
        return
    lib = shared_library(tmp_path / "libprobe.so", "-Wl,-rpath,/opt/x")
    cut = tmp_path / "cut.so"
    cut.write_bytes(lib.read_bytes()[:200])
    with pytest.raises(BadElfError):
        search_paths(cut)
