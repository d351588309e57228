"""The released DEISA client APIs on top of the :class:`~deisa.analysis.adapter.Adapter` and
contracts, so that analytics scripts written for them run here unchanged.

Three generations (each call's new form: ``docs/migrating.md``):

- pdidev/deisa 0.3.0-0.3.2: ``Deisa(scheduler_info, config)``, ``get_deisa_arrays()``,
  selections as contracts (:mod:`deisa.analysis._compat_v03`);
- the older ``dask_interface`` adaptor: ``Initialization(nb_workers, scheduler_info)``,
  ``get_data()`` (the same module);
- pdidev/deisa main (2024-2025): ``Deisa(nb_workers, scheduler_file_name=None,
  scheduler_address=None, cluster=None, use_ucx=False)``, whose ``get_deisa_arrays()`` gives
  each array as one lazy dask array of its whole declared time axis
  (:mod:`deisa.analysis._compat_main`).

>>> from deisa import Deisa                                   # doctest: +SKIP
>>> arrays = Deisa("scheduler.json", "config.yml").get_deisa_arrays()  # doctest: +SKIP
>>> arrays = Deisa(2, scheduler_file_name="scheduler.json").get_deisa_arrays()  # doctest: +SKIP

**Which generation a call to** :class:`Deisa` **is.** Chosen by the arguments, never by
reading a file: a keyword of main's (``nb_workers``, ``scheduler_file_name``,
``scheduler_address``, ``cluster``) makes it main's, one of 0.3.x's (``scheduler_info``,
``config``) 0.3.x's; else the first positional argument decides by its type: an integer (the
number of workers) is main's, a path (the scheduler file) 0.3.x's. A call mixing both kinds of
keywords, or with no argument that decides, is a :class:`TypeError` naming both forms.

**What blocks when (0.3.x).** A time axis has as many steps as the simulation publishes, so an
array of several steps is built once they have arrived: a selection (and ``get_data()``...)
returns when the last step it selects has arrived, or when the simulation closes the stream
(for an open-ended selection, ``[...]``, a negative index or bound). The steps are dask arrays
on the workers' blocks (no copy); the computation runs when asked, as with the released
library. A fixed-length time axis ends the selection at that length, without waiting for the
end of the stream: the length of a PDI YAML given as ``config`` (``+timedim`` with an integer
size), else the one the simulation declared (its YAML's fixed time size, evaluated by the
plugin: :attr:`~deisa.analysis.adapter.ArrayDescriptor.time_length`).

**What blocks when (main).** ``get_deisa_arrays()`` returns once the simulation has opened its
arrays, each the lazy dask array of its declared time length (``len(gt[:, 0])`` is that length
at once); a computation on it (``compute``, ``persist``) reads the steps first, and is sent
once every step of the time axis has arrived or the stream has ended; a step that never came
fails, when computed, with an :class:`~deisa.analysis._reading.EndOfStreamError` that says so.

A call with no one-to-one form raises :class:`NotSupportedError`, whose message says what to
write. The first object built emits one :class:`FutureWarning` pointing to
``docs/migrating.md``; the rest logs at debug level only (loggers
``deisa.analysis._compat_main`` and ``deisa.analysis._compat_v03``, one per generation).
"""

from __future__ import annotations

import os
from typing import Any

from . import _compat_main, _compat_v03
from ._compat_v03 import Adaptor, DeisaArray, DeisaArrays, Initialization
from ._released import NotSupportedError, is_int

__all__ = [
    "Adaptor",
    "Deisa",
    "DeisaArray",
    "DeisaArrays",
    "Initialization",
    "MainDeisa",
    "NotSupportedError",
]

MainDeisa = _compat_main.Deisa
"""pdidev/deisa main's ``Deisa``, which :class:`Deisa` builds for a call of that form."""

_MAIN_KEYWORDS = frozenset({"nb_workers", "scheduler_file_name", "scheduler_address", "cluster"})
_V03_KEYWORDS = frozenset({"scheduler_info", "config"})
_FORMS = (
    "Deisa(scheduler_info, config) (pdidev/deisa 0.3.x: the scheduler file, then a YAML file or "
    "a number of workers) or Deisa(nb_workers, scheduler_file_name=None, scheduler_address=None, "
    "cluster=None, use_ucx=False) (pdidev/deisa main)"
)


def generation(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``"main"`` or ``"0.3"``: which generation a call ``Deisa(*args, **kwargs)`` is (see the
    module docstring).

    Raises
    ------
    TypeError
        Keywords of both generations, or no argument that decides.
    """
    main, v03 = _MAIN_KEYWORDS & kwargs.keys(), _V03_KEYWORDS & kwargs.keys()
    if main and v03:
        raise TypeError(f"Deisa(): {sorted(main)} and {sorted(v03)} mix two forms; write {_FORMS}")
    if main or v03:
        return "main" if main else "0.3"
    if args and is_int(args[0]):
        return "main"
    if args and isinstance(args[0], (str, os.PathLike)):
        return "0.3"
    raise TypeError(f"Deisa{args!r}: cannot tell the form; write {_FORMS}")


class Deisa(_compat_v03.Deisa):
    """The released ``Deisa``: pdidev/deisa 0.3.x's (this class), or main's
    (:data:`MainDeisa`, built instead for a call of that form), chosen by the arguments as the
    module docstring says.

    Examples
    --------
    >>> arrays = Deisa("scheduler.json", "config.yml").get_deisa_arrays()  # doctest: +SKIP
    >>> deisa = Deisa(scheduler_file_name="scheduler.json", nb_workers=2)  # doctest: +SKIP
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if generation(args, kwargs) == "main":
            return MainDeisa(*args, **kwargs)
        return super().__new__(cls)
