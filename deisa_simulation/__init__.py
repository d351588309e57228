"""Heat solvers (installed as the ``deisa_simulation`` package; ``heat.c`` is built by CMake)."""
