"""One shared-memory slot of a rank's ring (:mod:`deisa.bridge.shm.channel`): a sealed ``memfd``,
mapped here.

The slot's fields are written here only: its channel (:class:`~deisa.bridge.shm.channel.Channel`)
and the warm pool (:mod:`deisa.bridge.shm.pool`) lend it, keep it warm, fill it or hand it over
through its methods.

Used from three threads, each through its own methods: the main thread copies a block in, the
loop thread hands it to the worker, the channel's thread maps a slot the worker gave back.

Runs in a simulation rank. Imports :mod:`deisa.wire.shm` and :mod:`.pool`'s page helpers.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
from typing import Any, Protocol

import numpy as np

from ...wire.shm import FREE, HEADER, HELD, memfd
from .pool import HUGETLB, SMALL, huge_memfd, populate

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class Ring(Protocol):
    """What a slot knows of its channel (:class:`~deisa.bridge.shm.channel.Channel`)."""

    def untake(self, slot: Slot) -> None: ...


class Slot:
    """One slot of this rank's ring: a memfd, its data after :data:`HEADER`.

    Its first page (the state) stays mapped here; the whole slot only while it is prepared for
    or written with a block (:meth:`map`, :meth:`unmap`): a slot the worker holds costs this
    rank no resident memory.
    """

    def __init__(self, channel: Ring, ident: int, size: int, kind: str = SMALL) -> None:
        self.channel = channel
        self.id = ident
        self.size = size
        self.kind = kind  # its pages (._shm_pool.page_kind): a hugetlb slot takes no pwrite
        self.warm = False  # in the pool: stays mapped and populated for the run
        make = huge_memfd if kind == HUGETLB else memfd
        self.fd = make(f"deisa-slot-{ident}", size)  # sealed against shrinking and growing
        try:
            self.head = mmap.mmap(self.fd, HEADER)
        except BaseException:
            os.close(self.fd)
            raise
        self.data: mmap.mmap | None = None
        self.populated = False  # data's page tables were filled when it was mapped
        self.shared = False  # its fd went to the worker
        self.taken = False  # lent out (take(), or being prepared), not handed to the worker
        self.blocks = 0  # blocks copied into it and not given back yet (Transport.give_back)
        self.packing = False  # a step's pack still taking blocks (deisa.bridge.shm.pack)

    @property
    def capacity(self) -> int:
        return self.size - HEADER

    @property
    def free(self) -> bool:
        return not self.taken and self.head[0] == FREE

    def fits(self, nbytes: int) -> bool:
        return nbytes <= self.capacity <= 2 * nbytes + HEADER

    @property
    def prepared(self) -> bool:
        """Mapped with its page tables filled: a copy into it takes no page fault."""
        return self.data is not None and self.populated

    def map(self, populate: bool = True) -> None:
        """Map the whole slot; ``populate``: with its page tables filled at once, here (a write
        fault per page of a shared mapping costs several times the copy of the page). A slot
        mapped without them is mapped again with them, unless a view of it lives."""
        if self.data is not None and (self.populated or not populate):
            return
        self.unmap()
        if self.data is None:
            flags = mmap.MAP_SHARED | (_POPULATE if populate else 0)
            self.data = mmap.mmap(self.fd, self.size, flags=flags)
            self.populated = populate

    def lend(self, lent: bool = True) -> None:
        """Lend the slot out (to the caller, or to the channel's thread while it maps or
        populates it: no one else takes it meanwhile), or, ``lent=False``, take it back."""
        self.taken = lent

    def keep_warm(self) -> None:
        """Count the slot in the warm pool: it stays mapped, populated, for the run."""
        self.warm = True

    def fill(self) -> None:
        """Allocate the slot's pages and map them with their page tables, written (the pool's
        warm-up, on the channel's thread: :func:`deisa.bridge.shm.pool.populate`); a hugetlb slot
        reserves its huge pages first. An ``OSError`` when memory is short."""
        if self.kind == HUGETLB:
            os.posix_fallocate(self.fd, 0, self.size)
        self.map(populate=False)
        assert self.data is not None
        populate(self.data, self.fd, self.kind)
        self.populated = True

    def mark_shared(self) -> None:
        """Note that the slot's file descriptor went to the worker."""
        self.shared = True

    def hand_over(self, held: bool = True) -> None:
        """Mark the slot held by the worker (its state byte; the worker frees it), or free
        again (``held=False``: the hand-over failed)."""
        self.head[0] = HELD if held else FREE

    def write(self, block: np.ndarray, offset: int = 0) -> None:
        """Write the C-contiguous ``block`` at ``offset`` bytes into the data with ``pwrite``,
        unmapped here: the kernel allocates a fresh slot's pages as it fills them, without
        zeroing them first, where a first touch through a mapping zeroes each page then copies
        into it (docs/benchmarks.md, section 11: 2.6 against 6.9 ms for a fresh 16 MiB slot)."""
        if self.kind == HUGETLB:  # hugetlbfs has no write(): through the mapping
            np.copyto(self.view(block.shape, block.dtype, offset=offset), block)
            return
        data = block.reshape(-1).view(np.uint8).data
        done = 0
        while done < len(data):  # Linux writes at most about 2 GiB per call
            done += os.pwrite(self.fd, data[done:], HEADER + offset + done)

    def unmap(self) -> None:
        """Unmap the slot's data, unless a view of it is still alive here."""
        if self.data is not None:
            with contextlib.suppress(BufferError):
                self.data.close()
                self.data = None
                self.populated = False

    def view(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], populate: bool = True, offset: int = 0
    ) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` over this slot's data, ``offset`` bytes into it
        (mapped if need be, with its page tables filled unless ``populate`` is false: a view of
        a block written with :meth:`write`, read only if the block goes by TCP after all).

        It holds a buffer export of the mapping (``np.frombuffer``'s memoryview), so that
        :meth:`unmap` fails while it lives: ``np.ndarray(buffer=...)`` keeps the mapping
        object but releases its export, and the mapping could then be closed under the array
        (a rank's segmentation fault, once, when a worker died mid-run)."""
        self.map(populate)
        assert self.data is not None
        count = math.prod(shape)  # np.prod is a ufunc reduction: 8 µs a publish
        return np.frombuffer(self.data, dtype=dtype, count=count, offset=HEADER + offset).reshape(
            shape
        )

    def close(self) -> None:
        self.unmap()
        with contextlib.suppress(BufferError):
            self.head.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
