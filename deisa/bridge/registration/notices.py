"""Early registration of asynchronous publications: "block sent" notices to rank 0.

In ``mode="async"`` rank 0 learns that every rank has sent its block of a step from the
exchange of the next :meth:`~deisa.Bridge.publish` (:mod:`deisa.bridge._publisher`), which would
leave the analytics one output period behind. To register a step as soon as its blocks are on
their workers, each rank's loop thread also sends rank 0 a small notice when one of its sends
completes, over one connection per rank to a listener that rank 0 opens beside its scheduler
connection. This is not MPI (the C simulation owns MPI, usually at ``MPI_THREAD_SINGLE``) and
not the scheduler (which still gets one message per step and array).

The notices only make registration earlier: they carry no failure, and a notice lost, refused
or never sent (no listener) only means that the step is registered at the next exchange, as
without them. Both ways feed rank 0's step accounting
(:class:`~deisa.bridge.registration.registrar.EarlyRegistration`, on its loop thread), which
hands each publication to the registrar once, in order; this module holds only the conversation:
the line format, rank 0's :class:`NoticeListener` and the other ranks' :class:`Notifier`.

The listener runs no code it receives: a notice is one line of JSON (:func:`encode_notice`),
at most :data:`MAX_LINE` bytes, with four fields checked by type and the job's token (and, for
a rank's boxes of a moving step, their geometry: plain integers, checked once the token is,
:func:`deisa.bridge.arrays.boxes.check_geometry`; a rank whose geometry would not fit a notice sends
none, the exchange carries it) (a random
string that reaches the ranks through the exchange, never the network); anything else is
dropped, and its connection closed (counted, and logged at most once a minute). Connections
not yet authenticated are capped and dropped after a few seconds (:mod:`deisa.wire.guard`); a rank
refused meanwhile sends its notices again later. A Bridge of one rank opens none (its
own sends feed the registrar's accounting directly). Where it listens follows the scheduler's
address, read without distributed (:mod:`deisa.bridge.link.net`; rank 0 need not import it):

- ``tls://``: on the interface that reaches the scheduler, speaking TLS with the job's client
  credentials, mutually: a peer without a certificate signed by the job's CA is refused
  during the handshake, before any byte of it is read. The credentials are the files that
  ``deisa-run`` names under deisa's own variables (``DEISA_TLS_CA_FILE``, ``DEISA_TLS_CERT``,
  ``DEISA_TLS_KEY``: :mod:`deisa.wire.tls_files`), read without dask or distributed; without
  them, the
  dask configuration's (``distributed.comm.tls.ca-file``, ``.client.cert``, ``.client.key``),
  through distributed's ``Security`` (:func:`_listen_tls`);
- ``tcp://`` on a loopback address (``deisa-run``'s local mode): on ``127.0.0.1`` only;
- anything else (``tcp://`` between nodes): no listener, with one info line saying why, since
  any host could then reach it; steps are registered at the next exchange.

Runs on each simulation rank's loop thread (:mod:`deisa.bridge._loop`). Imports
:mod:`deisa.wire` (the guard, the job's TLS files), the Bridge's
:mod:`~deisa.bridge.arrays.boxes` and :mod:`deisa.bridge.link.net`; distributed only for a TLS
configuration given to dask alone.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import logging
import os
import secrets
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from ..._dask_internals import import_distributed
from ...wire import guard as wire_guard
from ...wire.guard import Guard, StreamListener
from ...wire.tls_files import TLS_FILES_ENV
from ..arrays.boxes import Geometry, check_geometry
from ..link.net import host_port, interface_to, split_address

logger = logging.getLogger(__name__)

MAX_LINE = 1024
"""Longest notice accepted, newline included (a notice is about 150 bytes; one with the
geometry of a few boxes a few hundred)."""

NOTICE_RETRY_S = 5.0
"""A rank whose connection to the listener failed tries again after this long, with the notices
not sent meanwhile."""

CONNECT_S = 30.0
"""Longest a rank waits to open its connection to the listener (TLS handshake included)."""

MAX_UNSENT = 256
"""Notices a rank keeps to send again, at most (the oldest go first: the exchange has them)."""

IDLE_S = 600.0
"""A rank's connection that brings no notice for this long after its last one is closed (the
rank opens another at its next notice). Its first notice, which opens it, may take as long as
any first message to a guarded listener (:data:`~deisa.wire.guard.HANDSHAKE_S`), if longer."""

LISTEN_BACKLOG = 128

ADMITTED = b"+"
"""What the listener sends first on a connection it serves (a refused one is closed first)."""

_FIELDS = {"token": str, "seq": int, "rank": int, "nbytes": int, "worker": str}


def encode_notice(
    token: str, seq: int, rank: int, nbytes: int, worker: str, geometry: Geometry | None = None
) -> bytes:
    """The line telling rank 0 that ``rank`` has sent its block of publication ``seq`` (its
    boxes, of ``geometry``, for a moving step: :mod:`deisa.bridge.arrays.boxes`)."""
    shape = {} if geometry is None else {"geometry": geometry}
    notice = dict(token=token, seq=seq, rank=rank, nbytes=nbytes, worker=worker, **shape)
    return json.dumps(notice, separators=(",", ":")).encode() + b"\n"


def decode_notice(
    line: bytes, token: str, nranks: int
) -> tuple[int, int, int, str, Geometry | None]:
    """``(seq, rank, nbytes, worker, geometry)`` of a notice line (``geometry``: ``None`` for a
    plain block); :class:`ValueError` saying why a line is not a notice of this job (malformed,
    a field missing or of another type, a rank out of range, another token, a geometry that is
    not one)."""
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        raise ValueError(
            f"not a notice line ({len(line)} bytes, newline-terminated at most {MAX_LINE})"
        )
    notice = json.loads(line)  # a ValueError (JSONDecodeError, UnicodeDecodeError) if not JSON
    if not isinstance(notice, dict) or notice.keys() - {"geometry"} != _FIELDS.keys():
        raise ValueError(f"a notice has the fields {sorted(_FIELDS)} (and maybe geometry)")
    for field, kind in _FIELDS.items():
        value = notice[field]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"a notice's {field} is a {kind.__name__}, got {type(value).__name__}")
    if not secrets.compare_digest(notice["token"].encode(), token.encode()):
        raise ValueError("another job's token (or a stale rank's)")
    if not 0 <= notice["rank"] < nranks or notice["seq"] < 0 or notice["nbytes"] < 0:
        raise ValueError(
            f"out of range: rank {notice['rank']} of {nranks}, seq {notice['seq']}, "
            f"nbytes {notice['nbytes']}"
        )
    geometry = check_geometry(notice.get("geometry"))
    return notice["seq"], notice["rank"], notice["nbytes"], notice["worker"], geometry


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return False


class NoticeListener:
    """Rank 0: the listener for the other ranks' notices, each handed on as it comes.

    Every method runs on rank 0's loop thread, which hands each notice to ``on_notice``
    (rank 0's :class:`~deisa.bridge.registration.registrar.EarlyRegistration`, which counts a
    step's blocks); a NoticeListener keeps no step of its own.

    Parameters
    ----------
    nranks
        Ranks of the Bridge's communicator.
    on_notice
        ``on_notice(seq, rank, nbytes, worker, geometry)``: a rank's block of publication
        ``seq`` is on ``worker`` (its boxes of ``geometry`` for a moving step, else ``None``).
    """

    def __init__(self, nranks: int, on_notice: Callable[..., None]) -> None:
        self.nranks = nranks
        self._on_notice = on_notice
        self.token = secrets.token_hex(16)
        self._server: StreamListener | None = None
        self.address: str | None = None
        self.client_files: tuple[str, str, str | None] | None = None  # TLS: CA, cert, key

    async def listen(self, scheduler_address: str) -> str | None:
        """Open the listener where the scheduler's address allows it (see the module
        docstring); its address, or ``None`` (no early registration)."""
        if self.nranks == 1:
            logger.debug("deisa bridge: a single rank, no notices to listen for")
            return None
        protocol, location = split_address(scheduler_address)
        if protocol not in ("tcp", "tls"):
            return self._none(scheduler_address, f"no notices over {protocol}://")
        host = host_port(location)[0]
        ssl_context = None
        if protocol == "tls":
            ssl_context, self.client_files = _listen_tls()
            if ssl_context is None:
                return self._none(
                    scheduler_address, "no client certificate in the dask configuration"
                )
            bind = interface_to(host)
        elif _is_loopback(host):
            bind = "127.0.0.1"
        else:
            return self._none(
                scheduler_address,
                "plain TCP between hosts, where anyone could send notices (use tls:// for them)",
            )
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        sock = socket.create_server((bind, 0), family=family, backlog=LISTEN_BACKLOG)
        guard = Guard("rank 0's notices listener", self.nranks - 1)
        self._server = StreamListener(sock, self._serve, guard, ssl_context, limit=MAX_LINE)
        port = sock.getsockname()[1]
        self.address = f"{protocol}://{bind}:{port}"
        logger.debug("deisa bridge: listening for notices at %s", self.address)
        return self.address

    @staticmethod
    def _none(scheduler_address: str, why: str) -> None:
        logger.info(
            "deisa bridge: steps are registered at the next publish, without early notices "
            "(scheduler %s: %s)",
            scheduler_address,
            why,
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One rank's connection (TLS, if any, already verified): its notices, line by line,
        until one is not a notice of this job (the connection is then refused, counted by the
        listener's :class:`~deisa.wire.guard.Guard`), or none came for :data:`IDLE_S` (the rank
        opens another at its next notice; the first notice may take
        :data:`~deisa.wire.guard.HANDSHAKE_S`). Over plain TCP, the first notice authenticates
        it. It starts with :data:`ADMITTED`: a rank whose connection the listener refused (too
        many unauthenticated, during a flood) reads none, and sends its notices again later."""
        assert self._server is not None
        try:
            writer.write(ADMITTED)
            idle = max(IDLE_S, wire_guard.HANDSHAKE_S)  # the rank writes its first notice now
            while line := await asyncio.wait_for(reader.readline(), idle):
                if not self.notice(line):
                    self._server.guard.refuse("not a notice of this job")
                    return
                self._server.trust(writer)
                idle = IDLE_S
        except Exception as exc:  # a line over MAX_LINE, a connection reset, idle...
            logger.debug(
                "deisa bridge: notices from %s: %r", writer.get_extra_info("peername"), exc
            )

    async def close(self) -> None:
        """Stop listening and close the ranks' connections."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def notice(self, line: bytes) -> bool:
        """Take one line from a rank's connection; ``False`` (dropped, logged at debug level)
        for anything but a notice of this job (:func:`decode_notice`)."""
        try:
            seq, rank, nbytes, worker, geometry = decode_notice(line, self.token, self.nranks)
        except ValueError as exc:
            logger.debug("deisa bridge: dropped %d bytes, not a notice: %s", len(line), exc)
            return False
        self._on_notice(seq, rank, nbytes, worker, geometry)
        return True


class Notifier:
    """A rank's notices to rank 0's listener, over one connection opened by the first notice.

    Every coroutine runs on the rank's loop thread; making a Notifier costs nothing, and it
    needs neither distributed nor dask (a rank whose blocks all go through shared memory
    imports neither). A notice that cannot be sent (rank 0's listener refused the connection,
    flooded by another account, or is gone) is sent again after :data:`NOTICE_RETRY_S`, with those
    after it, until the Notifier closes (the last :data:`MAX_UNSENT` kept): a refusal only
    delays it, and rank 0 takes a notice twice as once. Failures are logged at debug level;
    the exchange carries the same facts, later.

    Parameters
    ----------
    address
        The listener's, ``tcp://127.0.0.1:<port>`` or ``tls://<host>:<port>``.
    token
        What rank 0 expects in every notice.
    rank
        This rank.
    tls
        For a ``tls://`` listener: the files of rank 0's client TLS settings (CA, certificate,
        key or ``None`` when the certificate file holds it), from the connection; ``None``:
        this process's dask configuration (through distributed).
    """

    def __init__(
        self, address: str, token: str, rank: int, tls: tuple[str, str, str | None] | None = None
    ) -> None:
        self.address = address
        self.token = token
        self.rank = rank
        self.tls = tls
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None  # at EOF: the listener closed it
        self._opening = asyncio.Lock()
        self._sending = asyncio.Lock()
        self._retry_at = 0.0
        self._unsent: collections.deque[bytes] = collections.deque(maxlen=MAX_UNSENT)
        self._again: asyncio.TimerHandle | None = None
        self._resending: asyncio.Task[None] | None = None
        self._closed = False

    async def notify(
        self, seq: int, nbytes: int, worker: str, geometry: Geometry | None = None
    ) -> None:
        """Tell rank 0 that this rank's block of publication ``seq`` (its boxes of
        ``geometry``) is on ``worker``; nothing if longer than :data:`MAX_LINE` (the exchange
        tells it)."""
        line = encode_notice(self.token, seq, self.rank, nbytes, worker, geometry)
        if len(line) > MAX_LINE:
            return
        self._unsent.append(line)
        await self._send()

    async def _send(self) -> None:
        """Send the notices not sent yet, in order; on a failure, try again later."""
        async with self._sending:
            try:
                writer = await self._connection()
                while writer is not None and self._unsent:
                    writer.write(self._unsent[0])
                    await writer.drain()
                    self._unsent.popleft()
            except Exception as exc:
                logger.debug("deisa bridge: notices to %s: %r", self.address, exc)
                await self._drop()
            if self._unsent and self._again is None and not self._closed:
                delay = max(self._retry_at - time.monotonic(), 0.0) + 0.05
                self._again = asyncio.get_running_loop().call_later(delay, self._resend)

    def _resend(self) -> None:
        self._again = None
        self._resending = asyncio.ensure_future(self._send())

    @property
    def connected(self) -> bool:
        """Whether this rank holds a connection to the listener that it has not seen closed
        (rank 0 closes one idle for :data:`IDLE_S`; the next notice then opens another). A
        notice written on a connection rank 0 is closing at that moment is lost: the exchange
        carries its step, later."""
        writer, reader = self._writer, self._reader
        if writer is None or reader is None:
            return False
        return not (writer.is_closing() or reader.at_eof())

    async def _connection(self) -> asyncio.StreamWriter | None:
        async with self._opening:
            if self.connected:
                return self._writer
            if self._writer is not None:
                await self._drop()  # closed by rank 0 (idle, or gone): another one
            if time.monotonic() < self._retry_at:
                return None
            self._retry_at = time.monotonic() + NOTICE_RETRY_S
            protocol, _, location = self.address.partition("://")
            host, _, port = location.rpartition(":")
            ssl_context = None
            if protocol == "tls":
                ssl_context = client_context(*self.tls) if self.tls else _configured_context()
                if ssl_context is None:
                    logger.debug(
                        "deisa bridge: no client certificate for notices to %s", self.address
                    )
                    return None
            reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(host.strip("[]"), int(port), ssl=ssl_context), CONNECT_S
            )
            if await asyncio.wait_for(reader.read(len(ADMITTED)), CONNECT_S) != ADMITTED:
                raise ConnectionRefusedError("rank 0's listener did not admit the connection")
            self._reader = reader
            return self._writer

    async def close(self) -> None:
        """Close the connection, if open, and send nothing more."""
        self._closed = True
        if self._again is not None:
            self._again.cancel()
        await self._drop()

    async def _drop(self) -> None:
        """Close the connection, if open (the next notice opens another)."""
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except Exception:  # reset by rank 0, which may be gone
                logger.debug("deisa bridge: closing the notices' connection", exc_info=True)


def client_context(ca_file: str, cert: str, key: str | None) -> ssl.SSLContext:
    """A TLS client context that verifies the listener against ``ca_file`` and presents
    ``cert`` (mutual TLS, no host name check, the CA being the run's own)."""
    return _context(ssl.Purpose.SERVER_AUTH, ca_file, cert, key)


def _context(purpose: ssl.Purpose, ca_file: str, cert: str, key: str | None) -> ssl.SSLContext:
    """A context of either end as distributed's ``Security`` makes it from files, with dask's
    default settings (TLS 1.2 or later, OpenSSL's ciphers)."""
    context = ssl.create_default_context(purpose, cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = False
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def _configured_context() -> ssl.SSLContext | None:
    """The client TLS context of this process's dask configuration (a certificate given as its
    contents, not as files: rank 0 could not pass them on)."""
    import_distributed()
    from distributed import Security

    context: ssl.SSLContext | None = Security().get_connection_args("client")["ssl_context"]
    return context


def _listen_tls() -> tuple[ssl.SSLContext | None, tuple[str, str, str | None] | None]:
    """Rank 0: the listener's TLS context, from the job's client credentials (``None`` without
    them), and their files for the other ranks (``None`` unless all are files). From the files
    that deisa-run names under deisa's own variables (:func:`_job_files`), without dask or
    distributed (0.4 s of imports); through distributed's ``Security`` otherwise (the dask
    configuration)."""
    files = _job_files()
    if files is not None:
        return _context(ssl.Purpose.CLIENT_AUTH, *files), files
    import_distributed()
    from distributed import Security

    security = Security()
    context = security.get_listen_args("client")["ssl_context"]
    return context, _files(*(getattr(security, f"tls_{name}", None)
                             for name in ("ca_file", "client_cert", "client_key")))  # fmt: skip


def _job_files() -> tuple[str, str, str | None] | None:
    """The job's TLS files (CA, certificate, key) that deisa-run names in the environment
    (:data:`~deisa.wire.tls_files.TLS_FILES_ENV`, the same files as its Dask variables);
    ``None`` where they are not set, or do not name files (logged at debug level): the dask
    configuration's settings then."""
    ca, cert, key = (os.environ.get(name) or None for name in TLS_FILES_ENV)
    if ca is None and cert is None and key is None:
        return None
    files = _files(ca, cert, key)
    if files is None:
        logger.debug(
            "deisa bridge: %s do not name the job's TLS files (%r, %r, %r): the dask "
            "configuration's instead",
            ", ".join(TLS_FILES_ENV),
            ca,
            cert,
            key,
        )
    return files


def _files(ca: Any, cert: Any, key: Any) -> tuple[str, str, str | None] | None:
    """The client TLS settings (CA, certificate, key) when they name files, which the other
    ranks connect to the listener with (carried in the connection, so that a rank sending over
    shared memory need not import distributed for them); ``None`` when they are not all files
    (a certificate given as its contents): those ranks then take their own configuration's."""

    def is_file(path: Any) -> bool:
        return isinstance(path, str) and "\n" not in path and os.path.isfile(path)

    if not (is_file(ca) and is_file(cert)) or not (key is None or is_file(key)):
        return None
    return ca, cert, key
