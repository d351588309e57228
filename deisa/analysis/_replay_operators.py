"""What an ADIOS2 BP file says of the operators its arrays were written with, without running
them: for :class:`deisa.Replay`'s refusal of an array whose reading would run code the file
chooses (``Replay(trust_operators=...)``, docs/security.md "Replay's inputs").

BP5's metadata says that an array was written with an operator (``Variable.Operations()`` holds
a placeholder), not which; BP4's says which, in the transform characteristic of each block in
``md.0``, which the Python ``adios2`` API does not show: :func:`bp4_operators` reads it. The
library of ADIOS2's ``plugin`` operator is in the header of each block's data, read here for
the message only.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Collection

__all__ = ["bp4_operators", "checked_trust", "describe"]

#: how many bytes of the data files a refusal reads for the library a plugin operator names
_PLUGIN_SCAN_BYTES = 64 * 2**20


def checked_trust(trust_operators: object) -> bool | frozenset[str]:
    """``Replay(trust_operators=...)`` checked: ``True``, ``False``, or the names of arrays."""
    if isinstance(trust_operators, bool):
        return trust_operators
    if (
        isinstance(trust_operators, str)
        or not isinstance(trust_operators, Collection)
        or not all(isinstance(n, str) for n in trust_operators)
    ):
        raise TypeError(
            f"trust_operators={trust_operators!r} must be True, False or a collection of "
            "array names, e.g. ['U']"
        )
    return frozenset(trust_operators)


def _plugin_libraries(path: str) -> list[str]:
    """The libraries the plugin-operator headers in the first ``_PLUGIN_SCAN_BYTES`` of the
    data files of ``path`` name (``PluginLibrary``, a length byte and the name): for a
    refusal's message only; the refusal itself comes from the metadata."""
    key = b"\x0dPluginLibrary"
    found: set[str] = set()
    budget = _PLUGIN_SCAN_BYTES
    with os.scandir(path) as entries:
        names = sorted(e.path for e in entries if e.name.startswith("data.") and e.is_file())
    for name in names:
        if budget <= 0:
            break
        with open(name, "rb") as f:
            head = f.read(budget)
        budget -= len(head)
        for match in re.finditer(re.escape(key), head):
            at = match.end()
            size = head[at] if at < len(head) else 0
            found.add(head[at + 1 : at + 1 + size].decode("utf-8", "replace"))
    return sorted(found)


#: BP4's data types: the bytes of one value (strings: 9, string arrays: 12, apart)
_BP4_SIZES = {0: 1, 1: 2, 2: 4, 4: 8, 50: 1, 51: 2, 52: 4, 54: 8, 5: 4, 6: 8, 7: 16, 10: 8,
              11: 16, 55: 1}  # fmt: skip
_BP4_TRANSFORM = 11  # the characteristic of a block written with an operator
_UNPARSED = "(characteristics this reader cannot parse, counted as an operator)"


def bp4_operators(path: str) -> dict[str, str]:
    """The variables of the BP4 output ``path`` that some block wrote with an operator, and the
    operator's name as the metadata gives it (the Python ``adios2`` API does not say so for
    BP4, where BP5 does). Read from ``md.idx`` and ``md.0`` (no data); a set of characteristics
    this parser does not know counts as an operator, so a crafted file cannot hide one (an
    index entry whose name cannot be read is the key ``""``: every array's)."""
    with open(os.path.join(path, "md.idx"), "rb") as f:
        index = f.read()
    with open(os.path.join(path, "md.0"), "rb") as f:
        meta = f.read()
    found: dict[str, str] = {}
    for record in range(64, len(index) - 63, 64):
        start = struct.unpack_from("<Q", index, record + 24)[0]  # the variables index
        if start + 12 > len(meta):
            continue  # a truncated md.0: ADIOS2's own open fails, naming it
        length = struct.unpack_from("<Q", meta, start + 4)[0]
        at, end = start + 12, min(start + 12 + length, len(meta))
        while at + 4 <= end:
            element_end = at + 4 + struct.unpack_from("<I", meta, at)[0]
            try:
                name, operator = _bp4_element(meta, at + 8, min(element_end, end))
            except (struct.error, IndexError, ValueError):
                name, operator = "", _UNPARSED  # whose, unknown: every array's
            if operator is not None:
                found.setdefault(name, operator)
            at = element_end
    return found


def _bp4_element(meta: bytes, at: int, end: int) -> tuple[str, str | None]:
    """The name of the variable whose index element spans ``meta[at:end]`` (past its length
    and id), and the operator of its first block written with one (None: none)."""
    names = []
    for _ in range(2):  # group, name
        size = struct.unpack_from("<H", meta, at)[0]
        names.append(meta[at + 2 : at + 2 + size].decode("utf-8", "replace"))
        at += 2 + size
    name, kind = names[1], meta[at + 2]  # past the order and a byte unused
    at += 3 + 8  # the type, the count of characteristic sets
    while at + 5 <= end:
        length = struct.unpack_from("<I", meta, at + 1)[0]
        operator = _bp4_characteristics(meta, at + 5, at + 5 + length, kind)
        if operator is not None:
            return name, operator
        at += 5 + length
    return name, None


def _bp4_characteristics(meta: bytes, at: int, end: int, kind: int) -> str | None:
    """The operator of one block's characteristics (None: written without one)."""
    size, dims = _BP4_SIZES.get(kind), 0
    while at < end:
        key, at = meta[at], at + 1
        if key == _BP4_TRANSFORM:
            return meta[at + 1 : at + 1 + meta[at]].decode("utf-8", "replace")
        if key in (7, 8):  # file index, step
            at += 4
        elif key in (3, 6):  # offsets
            at += 8
        elif key == 4:  # dimensions
            dims = meta[at]
            at += 3 + 24 * dims
        elif key == 0 and kind == 9:  # a string value
            at += 2 + struct.unpack_from("<H", meta, at)[0]
        elif key in (0, 1, 2) and size is not None:  # a value, a minimum, a maximum
            at += size
        elif key == 12 and size is not None:  # minimum and maximum, per sub-block
            blocks = struct.unpack_from("<H", meta, at)[0]
            at += 2 + 2 * size
            if blocks > 1:
                at += 9 + 2 * dims + 2 * blocks * size
        else:
            return _UNPARSED
    return None


def describe(operator: str, path: str) -> str:
    """The operator of a refusal (``operator``: as :func:`bp4_operators` names it, ``""`` where
    BP5's metadata says only "an operator"), and the library of a plugin operator, as far as
    the file ``path`` tells."""
    if operator == _UNPARSED:
        return f"or {operator[1:-1]}"
    if operator not in ("", "plugin"):  # BP4 names it
        return f"the operator {operator!r}"
    libraries = _plugin_libraries(path)
    if libraries:
        return f"the plugin operator, library {', '.join(libraries)} (as the file names it)"
    if operator == "plugin":
        return "the plugin operator, with a library its data blocks name"
    return (
        "an operator its metadata does not name (a compressor, or a plugin library named "
        "in its data blocks)"
    )
