"""The rank's side of the shared-memory path: how a block reaches a worker on this node.

Runs in a simulation rank. Mirrors :mod:`deisa.worker.shm` (the worker's side) and
:mod:`deisa.wire.shm` (what the two agree on). Imports the Bridge's flat modules (options,
placement, boxes), :mod:`deisa.wire.shm`, :mod:`deisa.wire.names` and
:mod:`deisa._dask_internals`; nothing of the other wings.
"""
