"""When a callback of ``deisa.insitu.Deisa`` runs: its windows and its AND/OR trigger.

Pure bookkeeping, no Dask: each registered callback keeps, per array it names, a sliding
window of the last ``size`` steps received, and decides at each arrival whether to run:

- ``when="OR"``: at every arrival of any of its arrays;
- ``when="AND"`` (default): at each timestep that every one of its arrays has received
  (deisa-dask's rule, issue #128 of deisa-dask: never a temperature of step 3 with a pressure
  of step 2). Steps are matched by timestep, not by order of arrival: each array is read by
  a thread of its own, so a temperature may arrive at step 3 before the pressure of step 2;
  the run of step 2 still comes when the pressure of step 2 does, with the windows as they
  stood at step 2. An array's steps received after the last run wait for the others (at most
  :data:`AND_AHEAD` of them; beyond, the oldest can no longer be matched).

A run gets one list per array, in the order the arrays were named, oldest step first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["DEFAULT_SLIDING_WINDOW_SIZE", "Registration", "parse_windows"]

DEFAULT_SLIDING_WINDOW_SIZE = 1
"""The window of an array named without a size (deisa-dask's default)."""

AND_AHEAD = 64
"""The most steps of one array an ``AND`` callback keeps beyond its last run, waiting for the
other arrays to reach them (each holds its step's blocks on the workers)."""


def parse_windows(callback_args: Sequence[Any]) -> list[tuple[str, int]]:
    """``(name, size)`` per argument: an array name (the default window), or deisa-core's
    ``Window(name, size)`` (any ``(name, size)`` pair; a size of ``None``: the default).

    Raises
    ------
    TypeError
        No argument, or one that is neither.
    ValueError
        A size below 1, or an array named twice.

    Examples
    --------
    >>> parse_windows(["t", ("p", 3)])
    [('t', 1), ('p', 3)]
    """
    if not callback_args:
        raise TypeError(
            "register_callback requires at least one array name or a list of Window(name, "
            "window_size)"
        )
    parsed: list[tuple[str, int]] = []
    for arg in callback_args:
        if isinstance(arg, str):
            parsed.append((arg, DEFAULT_SLIDING_WINDOW_SIZE))
        elif isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[0], str):
            size = DEFAULT_SLIDING_WINDOW_SIZE if arg[1] is None else arg[1]
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"window size of {arg[0]!r} must be a positive integer: {size!r}")
            parsed.append((arg[0], size))
        else:
            raise TypeError(f"callback_args must be str or Window(name, size), got {arg!r}")
    names = [name for name, _ in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"an array is named twice in {names}")
    return parsed


@dataclass
class Registration:
    """One registered callback, its windows and its trigger.

    Parameters
    ----------
    callback_id
        Its id (``deisa_cb_<n>``, as deisa-dask numbers them).
    callback
        Called with one list of steps per array.
    windows
        ``(name, size)`` per array, in the callback's argument order.
    when
        ``"AND"`` or ``"OR"``.
    exception_handler
        Called with what the callback (or a bad arrival) raised.
    """

    callback_id: str
    callback: Callable[..., Any]
    windows: list[tuple[str, int]]
    when: Literal["AND", "OR"] = "AND"
    exception_handler: Callable[[BaseException], Any] | None = None
    _steps: dict[str, deque[tuple[int, Any]]] = field(init=False, repr=False)
    _ran: int | None = field(init=False, repr=False, default=None)  # AND: its last run's step
    _last: dict[str, int | None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.when not in ("AND", "OR"):
            raise ValueError(f"when must be 'AND' or 'OR', got {self.when!r}")
        # OR: the window; AND: the window as of the last run, then the steps waiting for a run
        self._steps = {
            name: deque(maxlen=size if self.when == "OR" else None) for name, size in self.windows
        }
        self._last = dict.fromkeys(self._steps, None)

    @property
    def names(self) -> list[str]:
        """The arrays, in the callback's argument order."""
        return [name for name, _ in self.windows]

    def arrive(self, name: str, timestep: int, item: Any) -> list[list[Any]] | None:
        """Take ``item``, step ``timestep`` of ``name``; the windows to run the callback with
        now, or ``None``.

        Raises
        ------
        ValueError
            A timestep before the last one received for ``name`` (steps arrive in order).
        """
        last = self._last[name]
        if last is not None and timestep < last:
            raise ValueError(
                f"callback {self.callback_id}: array {name} received iteration {timestep} "
                f"which is before last seen iteration {last}. Iterations must be "
                "monotonically increasing."
            )
        self._steps[name].append((timestep, item))
        self._last[name] = timestep
        if self.when == "OR":
            return self._snapshot(None)
        due = self._ran is None or timestep > self._ran
        if not due or not all(any(t == timestep for t, _ in self._steps[n]) for n in self.names):
            self._bound(name)
            return None
        # every array has reached ``timestep`` (this one last): run with the windows as of it
        windows = self._snapshot(timestep)
        self._ran = timestep
        for n, size in self.windows:
            steps = self._steps[n]
            ahead = [entry for entry in steps if entry[0] > timestep]
            upto = [entry for entry in steps if entry[0] <= timestep][-size:]
            steps.clear()
            steps.extend(upto + ahead)
        return windows

    def _bound(self, name: str) -> None:
        """Forget the oldest of ``name``'s steps beyond the window once :data:`AND_AHEAD` of
        them wait for the other arrays."""
        size = dict(self.windows)[name]
        steps = self._steps[name]
        while len(steps) > size + AND_AHEAD:
            steps.popleft()

    def _snapshot(self, upto: int | None) -> list[list[Any]]:
        """The windows: per array, its last steps (up to timestep ``upto``), oldest first."""
        windows = []
        for name, size in self.windows:
            items = [item for t, item in self._steps[name] if upto is None or t <= upto]
            windows.append(items[-size:])
        return windows
