"""The arrays a Bridge publishes: how the ranks' blocks tile each one, and where each block goes.

Runs in a simulation rank: pure geometry and decisions with no thread of their own, taken on the
rank's main thread (the Bridge's construction, ``publish``) and read from the loop thread (rank 0
builds a step's layout and places again there). Imports numpy, :mod:`deisa.wire` (dims,
attributes, a step's layout) and nothing else of the Bridge: every other room of it imports
these.

- :mod:`.decomposition`: :class:`~.decomposition.ArraySpec` (a rank's block, or a moving array),
  and the :class:`~.decomposition.Decomposition` of every rank's blocks on the global grid;
- :mod:`.boxes`: a rank's boxes of one step of a moving array (checked, packed as one parcel),
  and the step's layout rank 0 builds from every rank's;
- :mod:`.placement`: which worker receives each rank's block (``round_robin``, ``locality``,
  ``node_local``), from the decomposition's grid and the workers (and each rank's host);
- :mod:`.declared`: :class:`~.declared.Arrays`, the arrays one Bridge has declared (a part of
  :class:`~deisa.bridge._parts.BridgeParts`).

:mod:`deisa.wire.layout` holds what the step's layout is on the wire, as the scheduler and the
analytics read it.
"""
