"""Iterating several arrays' steps together: what ``Adapter.zip`` and ``Replay.zip`` do.

Runs in the analytics' process; :mod:`._reading` re-exports these for its readers. Imports
nothing of deisa.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, Protocol

logger = logging.getLogger(__name__)


class Stepped(Protocol):
    """What :func:`zip_steps` needs of an array (a :class:`~._reading.StepArray`)."""

    name: str

    def _items(self, as_xarray: bool) -> Iterator[tuple[int, Any]]: ...


def check_zip(names: Sequence[str], how: str) -> None:
    """The arguments of a ``zip``: at least two distinct names, ``how`` "all" or "any"."""
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"zip needs at least two distinct array names, got {tuple(names)!r}")
    if how not in ("all", "any"):
        raise ValueError(f"how={how!r} must be 'all' or 'any'")


def zip_steps(
    arrays: Sequence[Stepped],
    how: Literal["all", "any"] = "all",
    *,
    as_xarray: bool = False,
    together: Callable[[list[Any]], None] | None = None,
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Iterate the steps of several arrays together, in step order (see ``Adapter.zip``).

    ``how="all"`` yields the steps every array has, and ends when any array ends;
    ``how="any"`` yields every step some array has, ``None`` for the others, until all ended.
    A step is yielded once each array has it or a later step (or ended). ``as_xarray``: the
    arrays labelled (:meth:`StepArray.items`). ``together``: called with the arrays about to
    advance, before they do, so that it can fetch their next steps in one go (the live
    Adapter's one read a step: :meth:`~deisa.analysis.adapter.Adapter._read_together`).
    """
    check_zip([a.name for a in arrays], how)
    iterators = [array._items(as_xarray) for array in arrays]
    if together is not None:
        together(list(arrays))
    heads = [next(it, None) for it in iterators]
    while True:
        live = [head for head in heads if head is not None]
        if not live or (how == "all" and len(live) < len(heads)):
            return
        step = min(head[0] for head in live)
        here = [head is not None and head[0] == step for head in heads]
        if how == "any" or all(here):
            chosen = [
                h[1] if h is not None and at else None for h, at in zip(heads, here, strict=True)
            ]
            yield step, tuple(chosen)
            del chosen
        else:
            logger.debug(
                "deisa: step %d of %s skipped by zip(how='all'): not in %s",
                step,
                ", ".join(a.name for a, at in zip(arrays, here, strict=True) if at),
                ", ".join(a.name for a, at in zip(arrays, here, strict=True) if not at),
            )
        if together is not None:
            together([a for a, at in zip(arrays, here, strict=True) if at])
        heads = [
            next(it, None) if at else head
            for it, head, at in zip(iterators, heads, here, strict=True)
        ]
