"""The scheduler's routes and their replies: route names, reply statuses, the protocol version,
the names of a step's keys.

Shared by every process (imports nothing of deisa). Routes are RPC handlers that the
:class:`~deisa.scheduler.StreamExtension` registers on the Dask scheduler; a caller reaches one
as ``rpc.<name>(**kwargs)`` (``getattr(rpc, Route.PUBLISH)``) and gets a :data:`Reply` back.

Every reply is a dict with a ``"status"`` (a :class:`Status` value, sent as its string) and,
unless it is ``OK``, a ``"message"`` for a person. Build replies with :func:`ok` and
:func:`error` and read them with :func:`status` and :func:`is_ok`, so that the status values
live here only. Two routes answer plain data, not a reply, as they cannot fail:
``deisa_workers`` (``[[address, nthreads], ...]``) and ``deisa_stats``.
"""

from __future__ import annotations

import enum
from typing import Any

EXTENSION_NAME = "deisa"
"""The name the scheduler extension (:class:`~deisa.scheduler.StreamExtension`) is registered
under (``scheduler.plugins[EXTENSION_NAME]``)."""

PROTOCOL = 2
"""The version of the routes' arguments and replies, raised when one changes. The extension
answers ``deisa_open`` with it, and a Bridge of another protocol stops there, saying so: the
first Bridge installs the extension on a scheduler and it stays, so a long-lived scheduler may
hold the extension of an older deisa (protocol 1 did not send it)."""

SCHEDULER_FILE_ENV = "DEISA_SCHEDULER_FILE"
"""The environment variable naming the scheduler file (``deisa-run`` sets it) for every side:
the Bridge and the plugin when no ``scheduler_file`` is given, ``Adapter.from_env()``."""


class Route(str, enum.Enum):
    """Names of the scheduler routes; see :mod:`deisa.scheduler.extension` for each one."""

    WORKERS = "deisa_workers"
    OPEN = "deisa_open"
    PUBLISH = "deisa_publish"
    PUBLISH_MANY = "deisa_publish_many"
    CLOSE = "deisa_close"
    META = "deisa_meta"
    GET = "deisa_get"
    ATTACH = "deisa_attach"
    DETACH = "deisa_detach"
    STATS = "deisa_stats"
    SET_VALUE = "deisa_set_value"
    GET_VALUE = "deisa_get_value"
    SET_CONTRACT = "deisa_set_contract"
    GET_CONTRACT = "deisa_get_contract"
    WATCH_CONTRACTS = "deisa_watch_contracts"
    WATCH_WORKERS = "deisa_watch_workers"
    STEP_TAKEN = "deisa_step_taken"
    """A batched-stream message (``client.scheduler_comm``), not an RPC: no reply."""

    def __str__(self) -> str:
        return self.value


class Status(str, enum.Enum):
    """The ``"status"`` of a reply."""

    OK = "OK"
    ERROR = "error"
    TIMEOUT = "timeout"
    DROPPED = "dropped"
    """``deisa_publish``: a repeated step the analytics has passed; not a failure."""
    END = "end"
    """``deisa_get``: the end of the stream (``nsteps``, ``run``)."""
    LOST = "lost"
    """A step whose blocks died with a worker (``step``, ``workers``): ``deisa_publish`` refused
    it, or ``deisa_get`` hands its place in the stream to the analytics."""

    def __str__(self) -> str:
        return self.value


Reply = dict[str, Any]
"""What a route returns: ``{"status": Status, "message"?: str, ...fields}``."""


def ok(**fields: Any) -> Reply:
    """A successful reply carrying ``fields``."""
    return {"status": Status.OK.value, **fields}


def error(message: str, status: Status = Status.ERROR, **fields: Any) -> Reply:
    """A reply saying what went wrong (``status`` another than ``OK``)."""
    return {"status": status.value, "message": message, **fields}


def status(reply: Reply) -> Status:
    """The status of ``reply``, raising :class:`ProtocolError` for anything else."""
    try:
        return Status(reply["status"])
    except (TypeError, KeyError, ValueError):
        raise ProtocolError(f"the scheduler answered {reply!r}, not a deisa reply") from None


def is_ok(reply: Reply) -> bool:
    """Whether ``reply`` says ``OK``."""
    return status(reply) is Status.OK


class ProtocolError(RuntimeError):
    """A reply that is not one of this protocol's (another extension, or another version)."""


def step_key_name(run: str, name: str, step: int, revision: int = 0) -> str:
    """The dask name of one step of an array; block keys are ``(name, i, j, ...)``.

    ``revision`` counts the earlier publications of the same step in the run (a step
    published again gets new keys: the earlier ones may still be held); 0 has no suffix.
    """
    suffix = f"-r{revision}" if revision else ""
    return f"deisa-{run}-{name}-{step}{suffix}"


WATCH_SECONDS = 10.0
"""Longest a ``deisa_watch_contracts`` (or, by default, ``deisa_watch_workers``) call waits on
the scheduler before answering "no change"."""
