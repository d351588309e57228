"""The simulation side: one :class:`Bridge` per MPI rank publishes its blocks to Dask workers.

Runs in a simulation rank: its main thread (the simulation's, or PDI's) and the Bridge's event-loop
thread (:mod:`._loop`). Imports :mod:`deisa.wire`, :mod:`deisa.contract`,
:mod:`deisa._dask_internals` and, on rank 0 only, :mod:`deisa.scheduler` (to install the
extension) and the :mod:`deisa.worker` package's installs; never :mod:`deisa.analysis` (no
dask.array, scipy or scikit-learn on a rank) nor :mod:`deisa.launcher`. Importing this package
is cheap (PEP 562): the PDI plugin imports :mod:`deisa.bridge._preload` on the simulation's main
thread and loads the rest in the background.

Public modules: :mod:`~deisa.bridge.bridge` (the Bridge), :mod:`~deisa.bridge.group`
(BridgeGroup), :mod:`~deisa.bridge.options` (its options, declared once),
:mod:`~deisa.bridge.step_scope` (several arrays of a step with one exchange),
:mod:`~deisa.bridge.scheduler_file`, :mod:`~deisa.bridge.tls_files` (deisa's names of the job's
TLS files, which ``deisa-run`` sets: :mod:`deisa.wire.tls_files`),
:mod:`~deisa.bridge.contracts` (the contracts in force), and :mod:`~deisa.bridge.worker` (the older
name of the workers' preload, :mod:`deisa.worker`).

Five wings, sub-packages: ``shm``, ``link`` and ``registration`` mirror :mod:`deisa.worker`
and :mod:`deisa.wire`, ``engine`` mirrors the C++ ``plugin/adios2/``, and ``arrays`` is what
every room imports:

- :mod:`~deisa.bridge.arrays`: the arrays a Bridge publishes (``ArraySpec`` and the
  decomposition of the global grid, a moving step's boxes, the placement of each rank's block
  on a worker, the arrays declared), pure geometry every other room imports;
- :mod:`~deisa.bridge.shm`: how a block reaches a worker on this node (the transport that picks
  shared memory or TCP, a channel per worker, its slots, the warm pool of slots);
- :mod:`~deisa.bridge.link`: rank 0's link to the scheduler (the calls, the connections, the
  relay through a worker, the workers known, Dask addresses);
- :mod:`~deisa.bridge.registration`: how a step's blocks get registered in ``mode="async"``
  (rank 0's registrar and the other ranks' notices);
- :mod:`~deisa.bridge.engine`: the deisa ADIOS2 engine's Python side, which its C++ calls (its
  parameters, its variables declared fixed or moving, its attributes and openPMD names).

The Bridge's other private rooms: its parts, each owning its fields (``_parts``: the arrays
declared, ``_steps``, ``_loop``...), how it opens and closes (``_opening``, ``_closing``), the
two publish modes (``_async``, with its own block buffers ``_buffers`` and its blocks on
their way ``_sends``; ``_sync``), the exchange's decisions (``_publisher``) and transport
(``_exchange``), the collective error protocol (``_collective``), what a lost worker or
scheduler does (``_losses``), the event-loop thread (``_loop``), the plugin's background
imports (``_preload``), the attributes' calls (``_attrs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:
    from .arrays.decomposition import ArraySpec, Decomposition, DecompositionError
    from .bridge import Bridge, BridgeError, PublishTiming
    from .group import BridgeGroup
    from .options import BridgeOptionError, BridgeOptions

_LAZY = {
    **dict.fromkeys(["Bridge", "BridgeError", "PublishTiming"], "bridge"),
    "BridgeGroup": "group",
    **dict.fromkeys(["ArraySpec", "Decomposition", "DecompositionError"], "arrays.decomposition"),
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
