"""Imports of a simulation rank, started in a background thread so that they overlap its compute.

The PDI plugin calls :func:`start` right after it has started the embedded interpreter, then
releases the GIL: while the C code computes, this thread imports what the rank needs, in
stages. The plugin waits for a stage only when it needs it (:meth:`Preload.wait`): the
options at ``PDI_init`` (``deisa.bridge.options``: numpy, the placements), the Bridge at the first
publication (``deisa.bridge.bridge``, which does not import distributed). distributed is not
preloaded: a rank whose blocks go through shared memory, and a rank 0 whose calls a worker of
its node relays (:mod:`deisa.bridge.link.relay`), never import it (0.4 s of CPU and 27 MiB each,
docs/benchmarks.md, section 11); a rank that sends by TCP imports it on the Bridge's
event-loop thread at its first send, off the simulation's thread.

No MPI call happens here: ``mpi4py.MPI`` initializes MPI (or queries it) when imported, and a
C simulation usually owns MPI at thread level ``MPI_THREAD_SINGLE``, so the plugin imports it
on the simulation's thread. No signal handler is installed either.

Runs in a simulation rank: :func:`start` on the simulation's main thread (the PDI plugin's, from
C++), the imports on one background thread of its own.

Examples
--------
>>> preload = start()
>>> preload.wait("options")  # returns once deisa.bridge.options is imported; raises its ImportError
>>> preload.join()
>>> sorted(preload.seconds)  # doctest: +SKIP
['bridge', 'options']
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Sequence

logger = logging.getLogger(__name__)

#: The stages, in import order: the name the plugin waits for, and its modules.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("options", ("numpy", "deisa.bridge.options", "deisa.bridge.arrays.decomposition")),
    ("bridge", ("deisa.bridge.bridge", "mpi4py")),
)


class Preload:
    """The background imports of one process; see :func:`start`.

    Attributes
    ----------
    seconds
        Wall time of each finished stage, by stage name (imports only: time in the thread).
    modules
        Wall time of each module's import, by module name (0 for one already imported).
    waited
        Seconds the callers of :meth:`wait` spent blocked, by stage name.
    """

    def __init__(self, stages: Sequence[tuple[str, Sequence[str]]] = STAGES) -> None:
        self._stages = [(name, tuple(modules)) for name, modules in stages]
        self._done = {name: threading.Event() for name, _ in self._stages}
        self._errors: dict[str, BaseException] = {}
        self.seconds: dict[str, float] = {}
        self.modules: dict[str, float] = {}
        self.waited: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="deisa-preload", daemon=True)

    def _run(self) -> None:
        failed: BaseException | None = None
        for name, modules in self._stages:
            t0 = self._started[name] = time.perf_counter()
            try:
                if failed is None:
                    for module in modules:
                        m0 = time.perf_counter()
                        importlib.import_module(module)
                        self.modules[module] = time.perf_counter() - m0
            except BaseException as exc:  # re-raised on the waiting thread
                failed = exc
            if failed is not None:
                self._errors[name] = failed
            self.seconds[name] = time.perf_counter() - t0
            self._done[name].set()

    def wait(self, stage: str) -> None:
        """Block until ``stage`` and those before it are imported (releases the GIL meanwhile).

        Raises
        ------
        KeyError
            ``stage`` is not one of the stages.
        BaseException
            What the import of that stage (or of an earlier one) raised, with its traceback.
        """
        done = self._done[stage]
        t0 = time.perf_counter()
        done.wait()
        self.waited[stage] = self.waited.get(stage, 0.0) + time.perf_counter() - t0
        if stage in self._errors:
            raise self._errors[stage]

    def join(self) -> None:
        """Wait for every stage (before the interpreter is finalized)."""
        self._thread.join()

    def summary(self) -> str:
        """One line: each stage's import time and how long the simulation waited for it (a
        stage still importing: the seconds since it started)."""
        parts = []
        for name, _ in self._stages:
            if name in self.seconds:
                parts.append(
                    f"{name} {self.seconds[name]:.2f} s (waited {self.waited.get(name, 0.0):.2f} s)"
                )
            elif name in self._started:
                seconds = time.perf_counter() - self._started[name]
                parts.append(f"{name} still importing after {seconds:.2f} s")
        return ", ".join(parts)


def start(stages: Sequence[tuple[str, Sequence[str]]] = STAGES) -> Preload:
    """Start importing ``stages`` in a daemon thread and return its handle.

    Parameters
    ----------
    stages
        ``(name, modules)`` pairs, imported in order; :data:`STAGES` by default.
    """
    preload = Preload(stages)
    preload._thread.start()
    return preload
