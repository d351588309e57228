"""deisa-core's interface, spoken by this project: the backend ``deisa.insitu``.

A deisa-dask user switches by changing one import on each side::

    from deisa.insitu import Bridge   # was: from deisa.dask import Bridge
    from deisa.insitu import Deisa    # was: from deisa.dask import Deisa

:class:`Bridge` (deisa-core's ``IBridge``: ``send``, ``get``, ``close``) is
:mod:`deisa.insitu.bridge`, built on :class:`deisa.Bridge`; :class:`Deisa` (``IDeisa``:
``register_callback``, windows, AND/OR triggers, ``execute_callbacks``, ``set``, results as
``DeisaArray``) is :mod:`deisa.insitu.analytics`, built on :class:`deisa.Adapter` and steering.
Each half imports only its side; this package only names them, on first use (PEP 562), so a
simulation rank importing ``Bridge`` loads no analytics module.

deisa-core is optional for the rest of ``deisa``: without it, using a name here raises an
:class:`ImportError` that says ``pip install deisa-core``. ``docs/ecosystem.md`` says what
differs from deisa-dask.

Runs in a simulation rank (:mod:`.bridge`, :mod:`.comm`: the rank's main thread) and in the
analytics (:mod:`.analytics`, :mod:`.triggers`: the analytics' thread and a reader thread per
array); each half imports only its side (:mod:`deisa.bridge`, :mod:`deisa.analysis`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:
    from .analytics import DEFAULT_SLIDING_WINDOW_SIZE, Deisa, build_deisa_array, connect
    from .bridge import Bridge

_LAZY = {
    "Bridge": "bridge",
    **dict.fromkeys(
        ["DEFAULT_SLIDING_WINDOW_SIZE", "Deisa", "build_deisa_array", "connect"],
        "analytics",
    ),
}

__all__ = ["DEFAULT_SLIDING_WINDOW_SIZE", "Bridge", "Deisa", "build_deisa_array", "connect"]

__getattr__, __dir__ = attach(__name__, _LAZY)
