"""Abstract socket names another account cannot guess, nor take first.

The shared-memory listener (:mod:`deisa.worker.shm`) and the relay
(:mod:`deisa.worker.relay`) listen
on abstract Unix sockets, which any account of the node can bind, and connect to, by name.
Their names are an HMAC of the listener's address and the account's uid under a secret of the
run: the SHA-256 of the job's TLS key, named by ``DEISA_TLS_KEY`` (:mod:`.tls_files`), which
``deisa-run`` sets for every process it starts, workers and ranks alike. Another account
cannot compute them, so it cannot bind them first.

Each listener has :data:`TRIES` names, in order. It binds the first one free; one held by
another account is skipped (whoever holds it), so a name found taken is replaced by the next,
not given up for TCP. A rank connects to them in order: a name no one holds ends the search
(its listener would have taken it), a name held by another account is skipped, the first held
by this account is the listener; a rank with a secret then tries the names without one (a
worker started without ``DEISA_TLS_KEY``: safe, since the uid is checked all the same). Without
the variable (``deisa-run --no-tls``, or processes started otherwise: set it, for the workers
and the ranks, to the same key file) the secret is empty: the names are then as public as the
address and uid, and an account that binds all of them sends the ranks by TCP, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import hmac
import logging
import os
import socket

from .guard import other_account
from .tls_files import TLS_FILES_ENV

logger = logging.getLogger(__name__)

TRIES = 4
"""Names of a listener, in the order it tries to bind them."""


def names(kind: str, address: str, secret: bytes = b"", uid: int | None = None) -> list[bytes]:
    """The :data:`TRIES` abstract names of the ``kind`` listener (``"shm"``, ``"relay"``) at
    ``address``, for account ``uid`` (this one by default) and the run's ``secret``."""
    uid = os.getuid() if uid is None else uid
    return [
        f"\0deisa-{kind}-".encode()
        + hmac.new(secret, f"{uid}\0{kind}\0{address}\0{i}".encode(), hashlib.sha256)
        .hexdigest()[:32]
        .encode()
        for i in range(TRIES)
    ]


def run_secret() -> bytes:
    """The run's secret: the SHA-256 of the job's TLS key (``DEISA_TLS_KEY``); empty without."""
    return _key_secret(os.environ.get(TLS_FILES_ENV[2]) or "")


def rank_secrets() -> list[bytes]:
    """The secrets a rank tries the names of, in order: the run's, then none (a worker started
    without the run's key binds the names without a secret)."""
    secret = run_secret()
    return [secret, b""] if secret else [b""]


@functools.lru_cache(maxsize=8)
def _key_secret(key: str) -> bytes:
    """The SHA-256 of a TLS key, given as a file or as its PEM text; empty for none, or a
    file that cannot be read (logged at debug level)."""
    if not key:
        return b""
    if "-----BEGIN" in key:
        return hashlib.sha256(key.strip().encode()).digest()
    try:
        with open(key, "rb") as file:
            return hashlib.sha256(file.read().strip()).digest()
    except OSError as exc:
        logger.debug("deisa: no socket-name secret from %s: %s", key, exc)
        return b""


def bind_first(sock: socket.socket, candidates: list[bytes]) -> bytes | None:
    """Bind ``sock`` to the first of ``candidates`` free, skipping those another account
    holds; the name bound, or ``None`` when one is held by this account (another listener of
    it serves) and the names before it are another account's."""
    for name in candidates:
        try:
            sock.bind(name)
            return name
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
        if _holder_is_other(name, sock.type):
            logger.warning("deisa: a socket name of this run is held by another account: skipped")
            continue
        return None
    raise OSError(errno.EADDRINUSE, f"all {len(candidates)} socket names of this run are held")


def _holder_is_other(name: bytes, kind: int) -> bool:
    probe = socket.socket(socket.AF_UNIX, kind | socket.SOCK_CLOEXEC)
    probe.settimeout(1.0)
    try:
        probe.connect(name)
    except OSError:  # held by a socket that does not listen: not ours to use either
        return True
    try:
        return other_account(probe) is not None
    finally:
        probe.close()


async def connect_own(kind: int, groups: list[list[bytes]]) -> socket.socket | None:
    """A non-blocking socket of type ``kind`` connected to the first name held by this account
    of the first of ``groups`` (the names of a listener under each of :func:`rank_secrets`)
    that has one (see the module); ``None`` when there is none."""
    for candidates in groups:
        sock = await _connect_first(kind, candidates)
        if sock is not None:
            return sock
    return None


async def _connect_first(kind: int, candidates: list[bytes]) -> socket.socket | None:
    loop = asyncio.get_running_loop()
    for name in candidates:
        sock = socket.socket(socket.AF_UNIX, kind | socket.SOCK_CLOEXEC)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, name)
        except OSError:  # no one holds it (ECONNREFUSED): the listener would have
            sock.close()
            return None
        problem = other_account(sock)
        if problem is None:
            return sock
        logger.warning("deisa bridge: a socket name of this run is held by %s: skipped", problem)
        with contextlib.suppress(OSError):
            sock.close()
    return None
