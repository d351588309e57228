"""Reading a Dask scheduler file (``dask scheduler --scheduler-file``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


class SchedulerFileError(RuntimeError):
    """The scheduler file is missing, unreadable or holds no address."""


def read_scheduler_address(path: str | os.PathLike[str], wait: float = 0.0) -> str:
    """The scheduler address in ``path``, waiting up to ``wait`` seconds for the file to appear.

    Raises
    ------
    SchedulerFileError
        Naming the file and what is wrong with it.
    """
    path = Path(path)
    deadline = time.monotonic() + wait
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not path.exists():
        raise SchedulerFileError(
            f"scheduler file {str(path)!r} does not exist"
            + (f" (waited {wait:g} s)" if wait else "")
            + "; start one with `dask scheduler --scheduler-file PATH` or point scheduler_file "
            "at the right place"
        )
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SchedulerFileError(f"scheduler file {str(path)!r} is unreadable: {exc}") from exc
    address = info.get("address") if isinstance(info, dict) else None
    if not isinstance(address, str) or "://" not in address:
        raise SchedulerFileError(
            f"scheduler file {str(path)!r} holds no scheduler address (expected a JSON object "
            'with "address": "tcp://host:port")'
        )
    return address
