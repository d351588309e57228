"""The options of a :class:`~deisa.Bridge`, owned and checked in one place.

Every producer of Bridge options builds a :class:`BridgeOptions`: the Bridge itself (from its
keyword arguments), the PDI plugin (from its YAML keys, through :meth:`BridgeOptions.from_mapping`),
the Python solver (from its command line, through :meth:`BridgeOptions.add_arguments` and
:meth:`BridgeOptions.from_namespace`) and the launchers (which write them back as YAML keys with
:meth:`BridgeOptions.to_mapping` or as solver flags with :meth:`BridgeOptions.to_argv`). So each
option has one default, one check and one error message, whoever sets it.

The options are declared once, as the fields of :class:`BridgeOptions`: each field holds its
name, type, default, constraint (:class:`Count`, :class:`Positive` or :class:`Choice`, as
scikit-learn's ``_parameter_constraints``) and help. The checks, the error messages, the
command-line flags and their help all read that table; the launcher checks its own counts and
durations with the same constraints.

``buffer_nb`` is ``None`` for "unbounded"; ``0`` is refused everywhere (it is not a synonym of
unbounded), with a message saying so.

Runs in a simulation rank (and in ``deisa-run``, which reads the same table): checked on the
rank's main thread, at the Bridge's construction (or the plugin's start); read from both threads
after. Imports numpy and the placement policies' names (:mod:`deisa.bridge.arrays.placement`)
only.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arrays.placement import PLACEMENTS

__all__ = [
    "MODES",
    "ON_FULL",
    "ON_LOSS",
    "POOL_SCOPES",
    "BridgeOptionError",
    "BridgeOptions",
    "Choice",
    "Constraint",
    "Count",
    "Positive",
]

ON_FULL = ("block", "drop_oldest")
"""The flow-control policies of ``on_full``."""

MODES = ("async", "sync")
"""The publication modes of ``mode``."""

POOL_SCOPES = ("rank", "node")
"""What ``shm_pool_mib`` counts: each rank's pool, or the node's, shared by its ranks."""

TRANSPORTS = ("auto", "tcp")
"""How blocks reach their workers (``transport``)."""

ON_LOSS = ("continue", "fail")
"""What the Bridge does on losing a worker (``on_worker_loss``) or the scheduler
(``on_scheduler_loss``)."""


class BridgeOptionError(ValueError):
    """A Bridge option has a bad value; :attr:`option` names it.

    Parameters
    ----------
    option
        The option at fault (a field of :class:`BridgeOptions`), so that a caller can point at
        where it was written (a YAML key and its line, a command-line flag).
    message
        The error message, which names the option and its value.
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


# -- the constraints of the table ---------------------------------------------------------------

NONE_WORDS = ("none", "null", "~")
"""How a command line or a defaults file spells ``None`` (the first is written)."""


def _integer(value: object) -> int | None:
    """``value`` as an int if it is an integer (numpy's included) and not a bool."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def _or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_or_none(text: str) -> Any:
        return None if text.strip().lower() in NONE_WORDS else parse(text)

    parse_or_none.__name__ = parse.__name__  # argparse names the type in its messages
    return parse_or_none


@dataclass(frozen=True)
class Count:
    """A positive integer, or ``None`` where :attr:`none` says what ``None`` means.

    :meth:`check` returns the value as an int (numpy integers included, bools refused).
    """

    none: str | None = None
    refuse_zero: str = ""  # appended to the message of 0, e.g. why it is not "unbounded"

    @property
    def metavar(self) -> str:
        return "N|none" if self.none else "N"

    @property
    def parse(self) -> Callable[[str], Any]:
        return _or_none(int) if self.none else int

    def check(self, name: str, value: Any) -> int | None:
        if value is None and self.none:
            return None
        count = _integer(value)
        if count is None or count < 1:
            or_none = " or None" if self.none else ""
            zero = self.refuse_zero if count == 0 else ""
            raise BridgeOptionError(
                name, f"{name}={value!r} must be a positive integer{or_none}{zero}"
            )
        return count


@dataclass(frozen=True)
class Positive:
    """A positive number of :attr:`unit`, or ``None`` where :attr:`none` says what ``None``
    means; infinity is allowed unless :attr:`finite`. :meth:`check` returns it as a float."""

    unit: str = ""
    none: str | None = None
    finite: bool = False  # refuse infinity: a duration written out as a number, or counted
    zero: str = ""  # what 0 means, where it is allowed ("no pool")

    @property
    def metavar(self) -> str:
        word = self.unit.upper() or "X"
        return f"{word}|none" if self.none else word

    @property
    def parse(self) -> Callable[[str], Any]:
        return _or_none(float) if self.none else float

    def check(self, name: str, value: Any) -> float | None:
        if value is None and self.none:
            return None
        number = value if _integer(value) is not None else None
        if isinstance(value, (float, np.floating)):
            number = value
        unit = f" of {self.unit}" if self.unit else ""
        if number is None or not (float(number) > 0 or (self.zero and float(number) == 0)):
            or_none = (" or 0" if self.zero else "") + (" or None" if self.none else "")
            raise BridgeOptionError(
                name, f"{name}={value!r} must be a positive number{unit}{or_none}"
            )
        if self.finite and math.isinf(number):
            message = f"{name}={value!r} must be a finite positive number{unit}"
            raise BridgeOptionError(name, message)
        return float(number)


@dataclass(frozen=True)
class Choice:
    """One of :attr:`values`, a :attr:`what` (``"publication mode"``)."""

    values: tuple[str, ...]
    what: str

    metavar = None
    parse = str

    def check(self, name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in self.values:
            raise BridgeOptionError(
                name, f"{name}={value!r} is not a {self.what}; choose one of {list(self.values)}"
            )
        return value


Constraint = Count | Positive | Choice


def _option(default: Any, constraint: Constraint, help: str) -> Any:
    """A field of :class:`BridgeOptions`: its default, its constraint, its help."""
    return field(default=default, metadata={"constraint": constraint, "help": help})


@dataclass(frozen=True)
class BridgeOptions:
    """How a :class:`~deisa.Bridge` connects, places blocks and applies flow control.

    Frozen and checked at construction: an instance always holds valid options. Integers given
    for the timeouts are stored as floats; numpy integers as ints.

    Parameters
    ----------
    placement
        ``"round_robin"`` (rank ``r`` sends to worker ``r % W``), ``"locality"`` (the blocks
        of a row band share a worker) or ``"node_local"`` (each rank sends to a worker on its
        own node). See :mod:`deisa.bridge.arrays.placement`.
    buffer_nb
        At most this many steps of an array wait on the scheduler for the analytics; the next
        publication blocks until the analytics takes one. ``None``: unbounded. ``0`` is refused.
    timeout
        Seconds a publication may block on flow control before failing (the step is then
        dropped). ``None``: wait forever.
    connect_timeout
        Seconds to wait for the scheduler file, the scheduler and at least ``min_workers``.
    min_workers
        Workers that must be connected before the placement is fixed.
    on_full
        What a publication does when ``buffer_nb`` steps are waiting: ``"block"`` (wait up to
        ``timeout``, then fail) or ``"drop_oldest"`` (release the oldest waiting step and queue
        the new one; needs ``buffer_nb``). See ``docs/reliability.md``.
    mode
        ``"async"``: :meth:`~deisa.Bridge.publish` copies the block into a buffer the Bridge
        owns and returns; the transfer and the step's registration proceed in the background,
        and a failure there is raised by a later ``publish`` or by ``close``. ``"sync"``:
        ``publish`` returns once the block is on its worker and the step registered on the
        scheduler (flow-control waits included), as before 0.2. See ``docs/architecture.md``.
    max_in_flight
        ``mode="async"`` only: blocks of an array this rank has published that are not yet
        known to be registered on the scheduler, at most; the next ``publish`` of the array
        waits. The Bridge holds at most this many copies of a block per array.
    on_worker_loss
        When a Dask worker dies mid-run: ``"continue"`` on the remaining workers, or ``"fail"``
        (raise :class:`~deisa.bridge.BridgeError` on every rank).
    transport
        ``"auto"``: blocks go through shared memory to the workers of the rank's node that
        answer the handshake, over the Dask connection (TCP or TLS) to the others; ``"tcp"``:
        over the Dask connection only. See :mod:`deisa.bridge.shm.transport`.
    shm_pool_mib
        The warm pool of shared memory (:mod:`deisa.bridge.shm.pool`): MiB of slots kept
        mapped and populated for the run, reused before anything new is allocated (as Ray's
        ``object_store_memory``). ``None``: ``buffer_nb`` steps of the rank's blocks plus one
        (5 steps when ``buffer_nb`` is unbounded), each block with its slot's header page;
        ``0``: no pool. A cap: a burst deeper than it takes fresh slots beyond it, given back
        once free (size it to the bursts expected).
    shm_pool_scope
        ``"rank"``: ``shm_pool_mib`` is each rank's; ``"node"``: the node's, shared equally by
        its ranks.
    on_scheduler_loss
        When the scheduler is unreachable for ``connect_timeout``: ``"continue"`` the
        simulation without in situ output (one error line is logged), or ``"fail"`` (raise).
    consumers
        The analytics that read every step (Adapters of their own, or groups, each counting
        as one): the scheduler holds each step for those not attached yet, so that one
        starting late (under load, a second analytics process) still receives the run from
        its first step; flow control waits for them. With the default ``1``, a consumer that
        attaches while another reads starts at the next step. See ``docs/streams.md``.

    Raises
    ------
    BridgeOptionError
        A :class:`ValueError` whose message starts with ``<option>=<value>`` and whose
        ``option`` attribute names the option at fault.

    See Also
    --------
    deisa.Bridge : takes these options as keyword arguments or as ``options=``.

    Examples
    --------
    >>> options = BridgeOptions.from_mapping({"buffer_nb": 2, "on_full": "drop_oldest"})
    >>> options.to_argv()
    ['--placement', 'round_robin', '--buffer-nb', '2', '--timeout', '600.0', \
'--connect-timeout', '30.0', '--min-workers', '1', '--on-full', 'drop_oldest', '--mode', \
'async', '--max-in-flight', '2', '--on-worker-loss', 'continue', '--transport', 'auto', \
'--on-scheduler-loss', 'continue', '--shm-pool-mib', 'none', '--shm-pool-scope', 'rank', \
'--consumers', '1']
    >>> BridgeOptions(buffer_nb=0)
    Traceback (most recent call last):
    ...
    deisa.bridge.options.BridgeOptionError: buffer_nb=0 must be a positive integer or None \
(None means unbounded; 0 is refused)
    """

    placement: str = _option(
        "round_robin", Choice(tuple(sorted(PLACEMENTS)), "placement policy"),
        "block-to-worker placement",
    )  # fmt: skip
    buffer_nb: int | None = _option(
        None, Count(none="unbounded", refuse_zero=" (None means unbounded; 0 is refused)"),
        "steps in flight per array at most; none: unbounded",
    )  # fmt: skip
    timeout: float | None = _option(
        600.0, Positive("seconds", none="forever"), "wait on flow control at most; none: forever"
    )
    connect_timeout: float = _option(
        30.0, Positive("seconds"), "wait for the scheduler file, scheduler and workers"
    )
    min_workers: int = _option(1, Count(), "workers needed before the placement is fixed")
    on_full: str = _option(
        "block", Choice(ON_FULL, "flow-control policy"),
        "when buffer-nb steps wait: block or drop_oldest",
    )  # fmt: skip
    mode: str = _option(
        "async", Choice(MODES, "publication mode"),
        "async: publish returns once the block is copied; sync: once registered",
    )  # fmt: skip
    max_in_flight: int = _option(
        2, Count(), "async: blocks per array in flight at most, then publish waits"
    )
    on_worker_loss: str = _option(
        "continue", Choice(ON_LOSS, "loss policy"), "a worker dies: continue on the others, or fail"
    )
    transport: str = _option(
        "auto", Choice(TRANSPORTS, "transport"),
        "auto: shared memory with the workers of the rank's node, TCP otherwise; tcp: TCP only",
    )  # fmt: skip
    on_scheduler_loss: str = _option(
        "continue", Choice(ON_LOSS, "loss policy"),
        "the scheduler is lost: continue without output, or fail",
    )  # fmt: skip
    shm_pool_mib: float | None = _option(
        None, Positive("MiB", none="auto", zero="no pool"),
        "shared-memory slots kept warm; none: buffer-nb steps + 1 of the rank's blocks; 0: none",
    )  # fmt: skip
    shm_pool_scope: str = _option(
        "rank", Choice(POOL_SCOPES, "pool scope"), "shm-pool-mib per rank, or per node"
    )
    consumers: int = _option(
        1, Count(), "analytics (Adapters or groups) each step is held for until they attach"
    )

    def __post_init__(self) -> None:
        for option in dataclasses.fields(self):
            value = option.metadata["constraint"].check(option.name, getattr(self, option.name))
            object.__setattr__(self, option.name, value)
        if self.on_full == "drop_oldest" and self.buffer_nb is None:
            raise BridgeOptionError(
                "on_full", "on_full='drop_oldest' needs a buffer_nb (the number of steps kept)"
            )

    # -- mappings (YAML keys, keyword arguments) ---------------------------------------------

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order (also the YAML keys and keyword arguments)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def constraint(cls, name: str) -> Constraint:
        """The constraint of option ``name`` (its type and range)."""
        option = next(f for f in dataclasses.fields(cls) if f.name == name)
        constraint: Constraint = option.metadata["constraint"]
        return constraint

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], *, source: str = "") -> BridgeOptions:
        """Build options from ``{option: value}``; absent options keep their defaults.

        Parameters
        ----------
        mapping
            Option names to values, e.g. the plugin's YAML keys or a launcher's settings.
        source
            Where the mapping comes from (a file, ``"deisa configuration"``), prefixed to the
            messages as ``"<source>: "``.

        Raises
        ------
        BridgeOptionError
            For an unknown key (``option`` is the first unknown key; the message lists them
            all and the valid ones) or a bad value.
        """
        prefix = f"{source}: " if source else ""
        names = cls.names()
        unknown = sorted(str(key) for key in mapping if key not in names)
        if unknown:
            raise BridgeOptionError(
                unknown[0],
                f"{prefix}unknown Bridge option(s) {unknown}; valid options are {sorted(names)}",
            )
        try:
            return cls(**mapping)
        except BridgeOptionError as exc:
            if not prefix:
                raise
            raise BridgeOptionError(exc.option, f"{prefix}{exc}") from None

    def to_mapping(self) -> dict[str, Any]:
        """Every option by name, ``None`` included; ``from_mapping`` of it gives back ``self``."""
        return {name: getattr(self, name) for name in self.names()}

    def replace(self, **changes: Any) -> BridgeOptions:
        """A copy with ``changes`` applied, checked like a new instance."""
        return dataclasses.replace(self, **changes)

    # -- command line (python -m deisa_simulation.heat) --------------------------------------

    def to_argv(self) -> list[str]:
        """The flags of ``python -m deisa_simulation.heat`` that give these options.

        Every option is written, so the solver's defaults do not matter; ``None`` is written
        ``none``. :meth:`add_arguments` and :meth:`from_namespace` read them back.
        """
        argv: list[str] = []
        for name in self.names():
            value = getattr(self, name)
            argv += [_flag(name), NONE_WORDS[0] if value is None else str(value)]
        return argv

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser | Any) -> None:
        """Declare one flag per option (``--buffer-nb`` for ``buffer_nb``) on ``parser`` (or an
        argument group), with the type, choices and help of the table.

        An absent flag leaves no attribute on the namespace, so :meth:`from_namespace` falls
        back to the default of :class:`BridgeOptions`. The parser checks the choices;
        :meth:`from_namespace` checks the values.
        """
        for option in dataclasses.fields(cls):
            constraint: Constraint = option.metadata["constraint"]
            shown = NONE_WORDS[0] if option.default is None else option.default
            parser.add_argument(
                _flag(option.name),
                dest=option.name,
                type=constraint.parse,
                choices=list(constraint.values) if isinstance(constraint, Choice) else None,
                metavar=constraint.metavar,
                default=argparse.SUPPRESS,
                help=f"{option.metadata['help']} (default: {shown})",
            )

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> BridgeOptions:
        """Build options from the attributes that :meth:`add_arguments` declared.

        Raises
        ------
        BridgeOptionError
            For a bad value; the message names the option as a flag, e.g. ``--buffer-nb=0``.
        """
        given = {name: getattr(namespace, name) for name in cls.names() if hasattr(namespace, name)}
        try:
            return cls(**given)
        except BridgeOptionError as exc:
            option = exc.option
            message = str(exc)
            if message.startswith(f"{option}="):
                message = _flag(option) + message[len(option) :]
            raise BridgeOptionError(option, message) from None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
