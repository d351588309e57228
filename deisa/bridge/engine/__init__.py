"""The deisa ADIOS2 engine's Python side: what the C++ engine (``plugin/adios2/``) asks Python.

Runs in a simulation rank, on the simulation's thread that calls the engine (its ``Open`` and
``EndStep``, from C++; the one that calls MPI), through pybind11. Mirrors ``plugin/adios2/``:
:mod:`.parameters` reads the engine's parameters at ``Open`` (``deisa_engine.cxx``),
:mod:`.variables` declares the variables first Put in a step as fixed or moving arrays
(``step_blocks.h``), :mod:`.attributes` gives each array its openPMD name and its ADIOS2
attributes (``attributes.h``). Imports the Bridge's flat modules (options, the scheduler
file), its arrays (:mod:`deisa.bridge.arrays`) and :mod:`deisa.wire`; the C++ side then
drives a plain :class:`~deisa.bridge.bridge.Bridge` (``plugin/core/``).
"""
