"""A rank's link to the scheduler: its connections, the calls it makes there, its relay.

Runs in a simulation rank (rank 0 makes the calls). Mirrors :mod:`deisa.worker.relay` (the
worker that relays rank 0's calls) and :mod:`deisa.wire.relay` (their frames). Imports the
Bridge's flat modules (options, contracts, the scheduler file), its arrays (decomposition,
placement), the registration's early notices, wire and :mod:`deisa._dask_internals`; rank 0's
install imports the :mod:`deisa.worker` package (never its modules), which imports
:mod:`deisa.scheduler`.
"""
