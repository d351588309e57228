"""A rank's link to the scheduler: its connections, the calls it makes there, its relay.

Runs in a simulation rank (rank 0 makes the calls). Mirrors :mod:`deisa.worker.relay` (the
worker that relays rank 0's calls) and :mod:`deisa.wire.relay` (their frames).
"""
