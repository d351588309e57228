"""How many steps of a rank's blocks can be alive at once, and so how many shared-memory slots a
channel's ring may hold (:func:`ring_slots`) and how many the worker holds in a steady state
(:data:`STEADY_HELD`): the sizes :mod:`deisa.bridge.shm.pool` and
:mod:`deisa.bridge.shm.channel` work with.

A step of an array is alive from its publish until the analytics lets it go: waiting on the
scheduler (at most ``buffer_nb`` steps, unbounded by default), not registered yet (at most
``max_in_flight``), and held by the analytics (:data:`READ_AHEAD`). A rank's step is one block
(or one parcel of boxes) per array, each in a slot of its own: a step of 20 arrays needs 20
slots, a ring sized for one array sends most of them by TCP (issue 56 item 9).

Plain arithmetic, on whichever thread sizes the pool (the rank's main thread, at the Bridge's
construction and ``declare``).

Runs in a simulation rank, on its main thread. Imports the standard library only.
"""

from __future__ import annotations

import resource

__all__ = ["OPEN_FILES_SHARE", "READ_AHEAD", "STEADY_HELD", "UNBOUNDED_STEPS", "ring_slots"]

UNBOUNDED_STEPS = 4
"""Steps of the rank's blocks the default pool budget holds when ``buffer_nb`` is unbounded."""
OPEN_FILES_SHARE = 4
"""With ``buffer_nb`` unbounded, a ring holds at most the open-file limit over this many slots
(each slot an open memfd here and on the worker, beside their sockets and files)."""
READ_AHEAD = 2
"""Steps of an array the analytics may hold besides those waiting on the scheduler: the one it
works on and the next, which ``Adapter.zip`` takes before letting the first go (each step of
each array then holds its slot on the worker)."""
STEADY_HELD = READ_AHEAD + 1
"""Slots of each of the rank's arrays the worker may hold while the pool grows in 4 KiB pages
between bursts (a steady state's: the steps the analytics holds, :data:`READ_AHEAD`, and the
one just published)."""


def ring_slots(
    arrays: int, buffer_nb: int | None, max_in_flight: int, open_files: int | None = None
) -> int:
    """The slots a channel's ring may hold (at least the channel's ``MAX_SLOTS``): a block of
    each of the rank's ``arrays`` (a fixed array's block or a moving array's parcel, one slot
    each) for every step that can be alive at once: ``buffer_nb`` steps waiting on the
    scheduler, ``max_in_flight`` not registered yet, and :data:`READ_AHEAD` held by the
    analytics. With ``buffer_nb`` unbounded the steps waiting have no bound either (an
    analytics slower than the simulation): the ring may then hold a share of the open files
    this process may have (``open_files``, its ``RLIMIT_NOFILE`` by default; a slot is a
    memfd held here and on the worker), :data:`OPEN_FILES_SHARE`; the same blocks sent by TCP
    would take the same memory on the worker. Only a cap: slots are made as blocks need them,
    and the pool's budget decides which stay warm."""
    if buffer_nb is not None:
        return arrays * (buffer_nb + max_in_flight + READ_AHEAD)
    if open_files is None:
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        open_files = 1024 if open_files == resource.RLIM_INFINITY else open_files
    return max(
        arrays * (UNBOUNDED_STEPS + max_in_flight + READ_AHEAD), open_files // OPEN_FILES_SHARE
    )
