"""The simulation side: one :class:`Bridge` per MPI rank publishes its blocks to Dask workers.

Importing this package is cheap (PEP 562): the PDI plugin imports :mod:`deisa.bridge._preload`
on the simulation's main thread and loads the rest in the background. Nothing here imports
:mod:`deisa.analysis` (no dask.array, scipy or scikit-learn on a rank) nor :mod:`deisa.launcher`.

Modules: :mod:`~deisa.bridge.bridge` (the Bridge), :mod:`~deisa.bridge.group` (BridgeGroup),
:mod:`~deisa.bridge.options` (its options, declared once), :mod:`~deisa.bridge.decomposition`
(ArraySpec, the global grid), :mod:`~deisa.bridge.placement` (rank to worker),
:mod:`~deisa.bridge.scheduler_file`, :mod:`~deisa.bridge.tls_files` (deisa's names of the job's
TLS files, which ``deisa-run`` sets: :mod:`deisa.wire.tls_files`),
:mod:`~deisa.bridge.contracts` (the contracts in force);
private: the collective error protocol and exchange fields (``_collective``), rank 0's
connection (``_connect``), the scheduler link and its routes (``_link``), the Bridge's parts,
each owning its fields (``_parts``: ``_arrays``, ``_steps``, ``_workers``, ``_loop``...), how
it opens and closes (``_opening``, ``_closing``), the two publish modes (``_async`` and its
rank 0 side ``_registrar``, ``_sync``), the exchange's decisions (``_publisher``), the worker
list and the placement in use (``_workers``), what a lost worker or scheduler does
(``_losses``), the event-loop thread (``_loop``), early registration (``_notices``), the
plugin's background imports (``_preload``). What runs inside the Dask workers is
:mod:`deisa.worker`; what the two sides exchange, :mod:`deisa.wire`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:
    from .bridge import Bridge, BridgeError, PublishTiming
    from .decomposition import ArraySpec, Decomposition, DecompositionError
    from .group import BridgeGroup
    from .options import BridgeOptionError, BridgeOptions

_LAZY = {
    **dict.fromkeys(["Bridge", "BridgeError", "PublishTiming"], "bridge"),
    "BridgeGroup": "group",
    **dict.fromkeys(["ArraySpec", "Decomposition", "DecompositionError"], "decomposition"),
    **dict.fromkeys(["BridgeOptionError", "BridgeOptions"], "options"),
}

__all__ = [
    "ArraySpec",
    "Bridge",
    "BridgeError",
    "BridgeGroup",
    "BridgeOptionError",
    "BridgeOptions",
    "Decomposition",
    "DecompositionError",
    "PublishTiming",
]


__getattr__, __dir__ = attach(__name__, _LAZY)
