"""When a callback of ``deisa.insitu.Deisa`` runs: its windows and its AND/OR trigger.

Pure bookkeeping, no Dask: each registered callback keeps, per array it names, a sliding
window of the last ``size`` steps received, and decides at each arrival whether to run:

- ``when="OR"``: at every arrival of any of its arrays;
- ``when="AND"`` (default): once every one of its arrays has received a step since the last
  run, all at the same timestep (deisa-dask's rule, issue #128 of deisa-dask: never a
  temperature of step 3 with a pressure of step 2).

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
    _steps: dict[str, deque[Any]] = field(init=False, repr=False)
    _changed: dict[str, bool] = field(init=False, repr=False)
    _last: dict[str, int | None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.when not in ("AND", "OR"):
            raise ValueError(f"when must be 'AND' or 'OR', got {self.when!r}")
        self._steps = {name: deque(maxlen=size) for name, size in self.windows}
        self._changed = dict.fromkeys(self._steps, False)
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
        self._steps[name].append(item)
        self._changed[name] = True
        self._last[name] = timestep
        if self.when == "OR":
            self._changed[name] = False
            return self._snapshot()
        if all(self._changed.values()) and len(set(self._last.values())) == 1:
            self._changed = dict.fromkeys(self._changed, False)
            return self._snapshot()
        return None

    def _snapshot(self) -> list[list[Any]]:
        return [list(self._steps[name]) for name in self.names]
