"""The options of a :class:`~deisa.Bridge`, owned and checked in one place.

Every producer of Bridge options builds a :class:`BridgeOptions`: the Bridge itself (from its
keyword arguments), the PDI plugin (from its YAML keys, through :meth:`BridgeOptions.from_mapping`),
the Python solver (from its command line, through :meth:`BridgeOptions.add_arguments` and
:meth:`BridgeOptions.from_namespace`) and the launchers (which write them back as YAML keys with
:meth:`BridgeOptions.to_mapping` or as solver flags with :meth:`BridgeOptions.to_argv`). So each
option has one default, one check and one error message, whoever sets it.

``buffer_nb`` is ``None`` for "unbounded"; ``0`` is refused everywhere (it is not a synonym of
unbounded), with a message saying so.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .placement import PLACEMENTS, get_placement

__all__ = ["MODES", "ON_FULL", "ON_LOSS", "BridgeOptionError", "BridgeOptions"]

ON_FULL = ("block", "drop_oldest")
"""The flow-control policies of ``on_full``."""

MODES = ("async", "sync")
"""The publication modes of ``mode``."""

ON_LOSS = ("continue", "fail")
"""What the Bridge does on losing a worker (``on_worker_loss``) or the scheduler
(``on_scheduler_loss``)."""

# command-line spelling of "no value" for the options that accept None
_NONE = "none"


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
        own node). See :mod:`deisa.bridge.placement`.
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
    on_scheduler_loss
        When the scheduler is unreachable for ``connect_timeout``: ``"continue"`` the
        simulation without in situ output (one error line is logged), or ``"fail"`` (raise).

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
'async', '--max-in-flight', '2', '--on-worker-loss', 'continue', '--on-scheduler-loss', \
'continue']
    >>> BridgeOptions(buffer_nb=0)
    Traceback (most recent call last):
    ...
    deisa.bridge.options.BridgeOptionError: buffer_nb=0 must be a positive integer or None \
(None means unbounded; 0 is refused)
    """

    placement: str = "round_robin"
    buffer_nb: int | None = None
    timeout: float | None = 600.0
    connect_timeout: float = 30.0
    min_workers: int = 1
    on_full: str = "block"
    mode: str = "async"
    max_in_flight: int = 2
    on_worker_loss: str = "continue"
    on_scheduler_loss: str = "continue"

    def __post_init__(self) -> None:
        try:
            get_placement(self.placement)
        except ValueError as exc:
            raise BridgeOptionError("placement", str(exc)) from None
        if self.buffer_nb is not None:
            buffer_nb = _integer(self.buffer_nb)
            if buffer_nb is None or buffer_nb < 1:
                zero = " (None means unbounded; 0 is refused)" if buffer_nb == 0 else ""
                raise BridgeOptionError(
                    "buffer_nb",
                    f"buffer_nb={self.buffer_nb!r} must be a positive integer or None{zero}",
                )
            object.__setattr__(self, "buffer_nb", buffer_nb)
        if not isinstance(self.on_full, str) or self.on_full not in ON_FULL:
            raise BridgeOptionError(
                "on_full",
                f"on_full={self.on_full!r} is not a flow-control policy; choose one of "
                f"{list(ON_FULL)}",
            )
        if self.on_full == "drop_oldest" and self.buffer_nb is None:
            raise BridgeOptionError(
                "on_full", "on_full='drop_oldest' needs a buffer_nb (the number of steps kept)"
            )
        if self.timeout is not None:
            timeout = _seconds(self.timeout)
            if timeout is None:
                raise BridgeOptionError(
                    "timeout",
                    f"timeout={self.timeout!r} must be a positive number of seconds or None",
                )
            object.__setattr__(self, "timeout", timeout)
        connect_timeout = _seconds(self.connect_timeout)
        if connect_timeout is None:
            raise BridgeOptionError(
                "connect_timeout",
                f"connect_timeout={self.connect_timeout!r} must be a positive number of seconds",
            )
        object.__setattr__(self, "connect_timeout", connect_timeout)
        min_workers = _integer(self.min_workers)
        if min_workers is None or min_workers < 1:
            raise BridgeOptionError(
                "min_workers", f"min_workers={self.min_workers!r} must be a positive integer"
            )
        object.__setattr__(self, "min_workers", min_workers)
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise BridgeOptionError(
                "mode", f"mode={self.mode!r} is not a publication mode; choose one of {list(MODES)}"
            )
        max_in_flight = _integer(self.max_in_flight)
        if max_in_flight is None or max_in_flight < 1:
            raise BridgeOptionError(
                "max_in_flight",
                f"max_in_flight={self.max_in_flight!r} must be a positive integer (blocks per "
                "array a rank may have in flight)",
            )
        object.__setattr__(self, "max_in_flight", max_in_flight)
        for name in ("on_worker_loss", "on_scheduler_loss"):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in ON_LOSS:
                raise BridgeOptionError(
                    name, f"{name}={value!r} is not a loss policy; choose one of {list(ON_LOSS)}"
                )

    # -- mappings (YAML keys, keyword arguments) ---------------------------------------------

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order (also the YAML keys and keyword arguments)."""
        return tuple(f.name for f in dataclasses.fields(cls))

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
            argv += [_flag(name), _NONE if value is None else str(value)]
        return argv

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser | Any) -> None:
        """Declare ``--placement``, ``--buffer-nb``, ``--timeout``, ``--connect-timeout``,
        ``--min-workers``, ``--on-full``, ``--mode`` and ``--max-in-flight`` on ``parser`` (or
        an argument group).

        An absent flag leaves no attribute on the namespace, so :meth:`from_namespace` falls
        back to the default of :class:`BridgeOptions`. The parser checks the choices of
        ``placement``, ``on_full`` and ``mode``; :meth:`from_namespace` checks the values.
        """
        defaults = cls()
        choices: dict[str, Any] = {
            "placement": sorted(PLACEMENTS),
            "on_full": list(ON_FULL),
            "mode": list(MODES),
            "on_worker_loss": list(ON_LOSS),
            "on_scheduler_loss": list(ON_LOSS),
        }
        for name, kind, metavar, help_text in _ARGUMENTS:
            default = getattr(defaults, name)
            shown = _NONE if default is None else default
            parser.add_argument(
                _flag(name),
                dest=name,
                type=kind,
                choices=choices.get(name),
                metavar=metavar,
                default=argparse.SUPPRESS,
                help=f"{help_text} (default: {shown})",
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


def _integer(value: object) -> int | None:
    """``value`` as an int if it is an integer (numpy's included) and not a bool."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def _seconds(value: object) -> float | None:
    """``value`` as a positive float (infinity allowed), or None if it is not one."""
    if _integer(value) is None and not isinstance(value, (float, np.floating)):
        return None
    seconds = float(value)  # type: ignore[arg-type]
    return seconds if seconds > 0 else None  # False for NaN too


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _optional(parse: Any) -> Any:
    def parse_or_none(text: str) -> Any:
        if text.strip().lower() in (_NONE, "null", "~"):
            return None
        return parse(text)

    parse_or_none.__name__ = parse.__name__  # argparse names the type in its messages
    return parse_or_none


# (option, argparse type, metavar, help), in the order of the fields
_ARGUMENTS: tuple[tuple[str, Any, str | None, str], ...] = (
    ("placement", str, None, "block-to-worker placement"),
    ("buffer_nb", _optional(int), "N|none", "steps in flight per array at most; none: unbounded"),
    ("timeout", _optional(float), "SECONDS|none", "wait on flow control at most; none: forever"),
    ("connect_timeout", float, "SECONDS", "wait for the scheduler file, scheduler and workers"),
    ("min_workers", int, "N", "workers needed before the placement is fixed"),
    ("on_full", str, None, "when buffer-nb steps wait: block or drop_oldest"),
    ("mode", str, None, "async: publish returns once the block is copied; sync: once registered"),
    ("max_in_flight", int, "N", "async: blocks per array in flight at most, then publish waits"),
    ("on_worker_loss", str, None, "a worker dies: continue on the others, or fail"),
    ("on_scheduler_loss", str, None, "the scheduler is lost: continue without output, or fail"),
)
