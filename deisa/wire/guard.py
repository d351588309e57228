"""Listeners that another account cannot flood: what every listener deisa opens shares.

A rank 0's notices listener (:mod:`deisa.bridge.registration.notices`), a worker's
shared-memory listener (:mod:`deisa.worker.shm`) and its relay (:mod:`deisa.worker.relay`) all
accept connections from anyone
who can reach them, and learn who the peer is only afterwards (a TLS handshake, ``SO_PEERCRED``,
the job's token). Each therefore:

- holds at most :attr:`Guard.cap` connections not yet authenticated (the peers it expects,
  plus :data:`EXTRA`): one more is closed at once;
- drops a connection not authenticated after :data:`HANDSHAKE_S` (a TLS handshake included);
- keeps :func:`margin` file descriptors free: a connection accepted on a descriptor that high
  is closed at once, and an ``accept`` that fails for want of descriptors or memory pauses the
  listener for :data:`PAUSE_S`, with no traceback;
- counts what it refuses and logs it at most once per :data:`LOG_INTERVAL_S`, in one line.

A listener in trouble never raises into the event loop it shares with the simulation's
transfers or the worker: it logs, and the run goes on (a lost notice is carried by the next
exchange, a rank refused by the shared-memory listener sends by TCP).

:class:`StreamListener` is such a listener for asyncio streams (TLS or not), accepting from a
listening socket itself, so that nothing is spent on a connection before it is admitted; the
shared-memory listener's datagrams use :class:`Guard` directly.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

EXTRA = 8
"""Connections not yet authenticated a listener holds beyond the peers it expects."""
HANDSHAKE_S = 10.0
"""Longest a connection may stay unauthenticated (a TLS handshake or a first message): a few
seconds, however loaded the node (a rank whose connection is dropped tries again)."""
LOG_INTERVAL_S = 60.0
"""Refusals are logged at most once per interval, counted."""
PAUSE_S = 1.0
"""How long a listener stops accepting after ``accept`` failed for want of resources."""
_NO_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def margin() -> int:
    """File descriptors a listener leaves free for the rest of its process: 1/16 of the soft
    ``RLIMIT_NOFILE``, between 16 and 256."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 256
    return max(16, min(256, soft // 16))


def descriptors_short(fd: int) -> bool:
    """Whether the descriptor ``fd``, just allocated, is within :func:`margin` of the soft
    ``RLIMIT_NOFILE``: Linux gives the lowest free number, so every one below it is in use."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft != resource.RLIM_INFINITY and fd >= soft - margin()


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of the Unix socket ``sock``."""
    fmt = "3i"  # struct ucred: pid, uid, gid
    _, uid, _ = struct.unpack(fmt, sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                   struct.calcsize(fmt)))  # fmt: skip
    return int(uid)


def other_account(conn: socket.socket) -> str | None:
    """Why the Unix socket ``conn`` is refused: its peer is a process of another account (or
    gone before its uid could be read); ``None`` for this account's."""
    try:
        uid = peer_uid(conn)
    except OSError as exc:
        return f"no peer credentials: {exc.strerror}"
    return None if uid == os.getuid() else f"a process of uid {uid}"


class Guard:
    """The admission and the refusal count of one listener.

    Parameters
    ----------
    what
        The listener, as log lines name it (``"rank 0's notices listener"``).
    peers
        How many peers it expects: :attr:`cap` is this plus :data:`EXTRA`.
    """

    def __init__(self, what: str, peers: int) -> None:
        self.what = what
        self.cap = max(peers, 1) + EXTRA
        self.pending = 0  # connections accepted and not yet authenticated
        self.refused = 0  # since the last line
        self.total_refused = 0
        self._reasons: dict[str, int] = {}
        self._logged_at = -LOG_INTERVAL_S

    def admit(self, conn: socket.socket) -> bool:
        """Whether to go on with the connection ``conn`` just accepted (closed if not)."""
        if self.pending >= self.cap:
            why = f"{self.cap} connections already unauthenticated"
        elif descriptors_short(conn.fileno()):
            why = "file descriptors short"
        else:
            return True
        conn.close()
        self.refuse(why)
        return False

    def refuse(self, why: str) -> None:
        """Count one connection refused (or dropped) for ``why``; log the count at most once
        per :data:`LOG_INTERVAL_S`."""
        self.refused += 1
        self.total_refused += 1
        self._reasons[why] = self._reasons.get(why, 0) + 1
        if time.monotonic() - self._logged_at >= LOG_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        """Log the refusals not logged yet, in one line (also when the listener closes)."""
        if self.refused:
            reasons = "; ".join(f"{n}: {why}" for why, n in self._reasons.items())
            logger.warning(
                "deisa: %s refused %d connection(s) (%s); logged at most every %.0f s",
                self.what,
                self.refused,
                reasons,
                LOG_INTERVAL_S,
            )
            self._logged_at = time.monotonic()
        self.refused = 0
        self._reasons.clear()

    def accept(self, sock: socket.socket, resume: Callable[[], None]) -> socket.socket | None:
        """The next connection of the non-blocking listening ``sock`` that :meth:`admit`
        lets in; ``None`` when none is waiting, or after a failure for want of resources (the
        caller stops reading ``sock``, and ``resume`` is called after :data:`PAUSE_S`)."""
        while True:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return None
            except OSError as exc:
                if exc.errno not in _NO_RESOURCES:
                    self.refuse(f"accept: {exc.strerror}")
                    return None
                self.refuse(f"accept paused {PAUSE_S:.0f} s: {exc.strerror}")
                asyncio.get_running_loop().call_later(PAUSE_S, resume)
                raise PausedError from exc
            if self.admit(conn):
                return conn


class PausedError(Exception):
    """``accept`` failed for want of resources: stop reading the listening socket a while."""


Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Authorize = Callable[[socket.socket], "str | None"]


class StreamListener:
    """An asyncio stream server guarded by a :class:`Guard` (see the module).

    A connection is authenticated once its TLS handshake succeeds (``ssl``, mutual), once
    ``authorize`` finds nothing against it (``SO_PEERCRED``), or else once ``serve`` calls
    :meth:`trust` (a first valid message); until then it counts against :attr:`Guard.cap`
    and is dropped after :data:`HANDSHAKE_S`.

    Parameters
    ----------
    sock
        A bound, listening socket (made non-blocking here).
    serve
        ``serve(reader, writer)``: one connection, authenticated or on its way to it.
    guard
        The listener's admission.
    ssl_context
        A server TLS context, or ``None``.
    authorize
        ``authorize(conn)``: why the accepted socket ``conn`` is refused, or ``None``.
    limit
        The stream reader's buffer limit.
    """

    def __init__(
        self,
        sock: socket.socket,
        serve: Serve,
        guard: Guard,
        ssl_context: ssl.SSLContext | None = None,
        authorize: Authorize | None = None,
        limit: int = 1 << 16,
    ) -> None:
        self.sock = sock
        self.guard = guard
        self._serve = serve
        self._ssl = ssl_context
        self._authorize = authorize
        self._limit = limit
        self._loop = asyncio.get_running_loop()
        self._untrusted: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.writers: set[asyncio.StreamWriter] = set()
        self._closed = False
        sock.setblocking(False)
        self._resume()

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        try:
            while (conn := self.guard.accept(self.sock, self._resume)) is not None:
                self.guard.pending += 1
                task = self._loop.create_task(self._handle(conn))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except PausedError:
            self._loop.remove_reader(self.sock.fileno())

    async def _handle(self, conn: socket.socket) -> None:
        try:
            problem = self._authorize(conn) if self._authorize else None
            if problem is not None:
                raise PermissionError(problem)
            reader, writer = await asyncio.wait_for(self._open(conn), HANDSHAKE_S)
        except (OSError, ssl.SSLError, asyncio.TimeoutError, EOFError) as exc:
            self.guard.pending -= 1
            self.guard.refuse(str(exc) if isinstance(exc, PermissionError) else
                              f"no handshake: {type(exc).__name__}")  # fmt: skip
            conn.close()
            return
        self.writers.add(writer)
        if self._ssl is not None or self._authorize is not None:
            self.guard.pending -= 1
        else:
            self._untrusted.add(writer)
            self._loop.call_later(HANDSHAKE_S, self._expire, writer)
        try:
            await self._serve(reader, writer)
        except Exception as exc:  # never into the loop, which the run shares
            logger.debug("deisa: %s: %r", self.guard.what, exc)
        finally:
            self.trust(writer)
            self.writers.discard(writer)
            writer.close()

    async def _open(self, conn: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """``conn`` as a stream, after its TLS handshake if any (what ``start_server`` does)."""
        reader = asyncio.StreamReader(limit=self._limit)
        protocol = asyncio.StreamReaderProtocol(reader)
        handshake = {"ssl_handshake_timeout": HANDSHAKE_S} if self._ssl is not None else {}
        transport, _ = await self._loop.connect_accepted_socket(
            lambda: protocol, conn, ssl=self._ssl, **handshake
        )
        return reader, asyncio.StreamWriter(transport, protocol, reader, self._loop)

    def trust(self, writer: asyncio.StreamWriter) -> None:
        """``writer``'s peer is authenticated (by a first valid message)."""
        if writer in self._untrusted:
            self._untrusted.discard(writer)
            self.guard.pending -= 1

    def _expire(self, writer: asyncio.StreamWriter) -> None:
        if writer in self._untrusted:
            self.guard.refuse(f"not authenticated in {HANDSHAKE_S:.0f} s")
            writer.transport.abort()

    def close(self) -> None:
        """Stop accepting, end every connection, log the refusals not logged yet."""
        self._closed = True
        self._loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for writer in list(self.writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        self.guard.flush()
