"""Names a package imports on first use (PEP 562), shared by ``deisa``, ``deisa.bridge`` and
``deisa.analysis``, so that importing a package does not import what its names need.

Runs in every process, at the first use of a name; imports nothing of deisa.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def attach(
    package: str, lazy: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    lazy : mapping of str to str
        Public name -> the submodule defining it, relative to ``package``.

    Returns
    -------
    tuple of callable
        ``__getattr__`` imports the submodule of a name on its first use and stores the value
        in the package, so that later lookups skip it; ``__dir__`` lists the lazy names too.
    """

    def getattr_(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *lazy})

    return getattr_, dir_
