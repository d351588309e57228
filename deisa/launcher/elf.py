"""The directories an ELF library or program tells the dynamic loader to search: its
``DT_RPATH`` and ``DT_RUNPATH``, read from its dynamic section.

The loader searches them, in order, for every library the object needs by name; an empty entry
is the process's working directory, and a relative one is taken from it
(:func:`deisa.launcher.libraries.library_problem` refuses both). Read through the program
headers (``PT_DYNAMIC``, and the ``PT_LOAD`` segment holding the string table), as the loader
does: a stripped library, without section headers, is read alike. ELF32 and ELF64, either byte
order.
"""

from __future__ import annotations

import struct
from pathlib import Path

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 5, 15, 29
TAGS = {DT_RPATH: "RPATH", DT_RUNPATH: "RUNPATH"}

# per class (1: ELF32, 2: ELF64): the header's e_phoff, e_phentsize, e_phnum; a program header;
# a dynamic entry
_LAYOUT = {
    1: ("16xHHIIIIIHHHHHH", "IIIIIIII", "iI"),
    2: ("16xHHIQQQIHHHHHH", "IIQQQQQQ", "qQ"),
}


class NotElfError(ValueError):
    """The file is not an ELF object (no loader loads it)."""


class BadElfError(ValueError):
    """An ELF object whose headers point outside it, or that misses what they name."""


def search_paths(path: Path) -> dict[str, list[str]]:
    """``{"RPATH": [...], "RUNPATH": [...]}``: the entries of each tag ``path`` has, as
    written (``$ORIGIN`` unexpanded, empty entries kept); ``{}`` for an object without either
    (a static program too).

    Raises
    ------
    NotElfError
        ``path`` is not an ELF file.
    BadElfError
        Its headers point outside it.
    OSError
        It cannot be read.
    """
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] not in _LAYOUT or data[5] not in (1, 2):
        raise NotElfError(f"{path} is not an ELF file")
    order = "<" if data[5] == 1 else ">"
    header, program, dynamic = (order + f for f in _LAYOUT[data[4]])
    try:
        fields = struct.unpack_from(header, data)
        phoff, phentsize, phnum = fields[4], fields[8], fields[9]
        segments = [struct.unpack_from(program, data, phoff + i * phentsize) for i in range(phnum)]
        if data[4] == 1:  # ELF32: type, offset, vaddr, paddr, filesz, ...
            segments = [(s[0], s[1], s[2], s[4]) for s in segments]
        else:  # ELF64: type, flags, offset, vaddr, paddr, filesz, ...
            segments = [(s[0], s[2], s[3], s[5]) for s in segments]
        entries: list[tuple[int, int]] = []
        for kind, offset, _, size in segments:
            if kind == PT_DYNAMIC:
                step = struct.calcsize(dynamic)
                for at in range(offset, offset + size - step + 1, step):
                    tag, value = struct.unpack_from(dynamic, data, at)
                    if tag == DT_NULL:
                        break
                    entries.append((tag, value))
    except struct.error:
        raise BadElfError(f"{path}: its headers point outside the file") from None
    strtab = next((value for tag, value in entries if tag == DT_STRTAB), None)
    found: dict[str, list[str]] = {}
    for tag, value in entries:
        if tag in TAGS:
            if strtab is None:
                raise BadElfError(f"{path}: a {TAGS[tag]} without a string table")
            text = _string(data, _file_offset(path, segments, strtab) + value, path)
            found.setdefault(TAGS[tag], []).extend(text.split(":"))
    return found


def _file_offset(path: Path, segments: list[tuple[int, int, int, int]], address: int) -> int:
    """Where in the file the loaded ``address`` lies (the ``PT_LOAD`` segment holding it)."""
    for kind, offset, vaddr, size in segments:
        if kind == PT_LOAD and vaddr <= address < vaddr + size:
            return address - vaddr + offset
    raise BadElfError(f"{path}: its string table is in no loaded segment")


def _string(data: bytes, at: int, path: Path) -> str:
    end = data.find(b"\0", at)
    if at >= len(data) or end < 0:
        raise BadElfError(f"{path}: a string past its end")
    return data[at:end].decode("utf-8", "surrogateescape")
