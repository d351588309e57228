"""The scheduler file (``dask scheduler --scheduler-file``): where to find it and what it says.

One owner for the rule that the Bridge and the PDI plugin follow: an explicit scheduler file
(the ``scheduler_file`` argument, or the YAML key) wins; without one, the environment variable
:data:`ENV_VAR` (``DEISA_SCHEDULER_FILE``, which ``deisa-run`` sets) names it.

Runs in a simulation rank: read on its main thread at the Bridge's construction, and again by
rank 0's loop thread while it waits for the file (``connect_timeout``). Imports the standard
library only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "DEISA_SCHEDULER_FILE"
"""The environment variable naming the scheduler file when none is given."""


class SchedulerFileError(RuntimeError):
    """The scheduler file is not given, missing, unreadable or holds no address."""


def resolve_scheduler_file(
    given: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> str:
    """The scheduler file to use: ``given`` if any, else ``$DEISA_SCHEDULER_FILE``.

    Parameters
    ----------
    given
        The explicit value (the Bridge's ``scheduler_file`` argument, the YAML key); ``None``
        or ``""`` for none.
    environ
        Where to look up :data:`ENV_VAR`; ``os.environ`` by default.

    Raises
    ------
    SchedulerFileError
        Neither is set; the message names both.

    Examples
    --------
    >>> resolve_scheduler_file(None, {"DEISA_SCHEDULER_FILE": "/run/scheduler.json"})
    '/run/scheduler.json'
    >>> resolve_scheduler_file("mine.json", {"DEISA_SCHEDULER_FILE": "/run/scheduler.json"})
    'mine.json'
    """
    if given is not None and str(given):
        return str(given)
    found = (os.environ if environ is None else environ).get(ENV_VAR, "")
    if found:
        return found
    raise SchedulerFileError(
        f"no scheduler file: give scheduler_file (the Bridge's argument, or the `scheduler_file' "
        f"key of the plugin's YAML) or set the environment variable {ENV_VAR} (deisa-run sets "
        "it) to the file written by `dask scheduler --scheduler-file FILE'"
    )


def read_scheduler_address(path: str | os.PathLike[str], wait: float = 0.0) -> str:
    """The scheduler address in ``path``, waiting up to ``wait`` seconds for the file to appear
    (and to be whole: the scheduler writes it in place, a reader may find it half-written).

    Raises
    ------
    SchedulerFileError
        Naming the file and what is wrong with it.
    """
    path = Path(path)
    deadline = time.monotonic() + wait
    while True:
        try:
            info = json.loads(path.read_text())
            break
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                raise SchedulerFileError(
                    f"scheduler file {str(path)!r} does not exist"
                    + (f" (waited {wait:g} s)" if wait else "")
                    + "; start one with `dask scheduler --scheduler-file PATH` or point "
                    "scheduler_file at the right place"
                ) from None
        except (OSError, ValueError) as exc:
            if time.monotonic() >= deadline:
                raise SchedulerFileError(
                    f"scheduler file {str(path)!r} is unreadable: {exc}"
                ) from exc
        time.sleep(0.1)
    address = info.get("address") if isinstance(info, dict) else None
    if not isinstance(address, str) or "://" not in address:
        raise SchedulerFileError(
            f"scheduler file {str(path)!r} holds no scheduler address (expected a JSON object "
            'with "address": "tcp://host:port")'
        )
    return address
