"""The registration of a step's blocks on the scheduler (``mode="async"``): rank 0's registrar
with its step accounting (:mod:`.registrar`), and the "block sent" notices the other ranks send
it (:mod:`.notices`, the conversation alone).

Runs in a simulation rank (each module says on which of its threads). Imports the Bridge's flat
modules (its parts), its arrays (boxes, decomposition), :mod:`deisa.bridge.link` (the scheduler
link, the socket helpers), wire, :mod:`deisa.contract` and :mod:`deisa._dask_internals`.
"""
