"""Attacks from another account, for the security tests: connect to a job's Dask servers
without its credentials, and list what its processes listen on.

Every probe has a positive control: the same call made with the job's own credentials must
succeed, so that a refusal means the server refused the stranger, not that the probe is broken.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from deisa.launcher.security import make_credentials


def job_security(tls_dir: Path) -> Any:
    """A client :class:`distributed.Security` holding a job's own credentials (its owner)."""
    from distributed import Security

    return Security(
        tls_ca_file=str(tls_dir / "ca.pem"),
        tls_client_cert=str(tls_dir / "cert.pem"),
        tls_client_key=str(tls_dir / "key.pem"),
        require_encryption=True,
    )


async def _identity(address: str, connection_args: dict[str, Any]) -> Any:
    from distributed.comm import connect

    comm = await connect(address, timeout=60, **connection_args)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await asyncio.wait_for(comm.read(), 60)
    finally:
        comm.abort()


def identity(address: str, connection_args: dict[str, Any] | None = None) -> Any:
    """The ``identity`` RPC of the Dask server at ``address``: its answer, or the exception
    that ended the attempt (returned, not raised)."""
    try:
        return asyncio.run(_identity(address, connection_args or {}))
    except Exception as exc:
        return exc


def strangers(tls_dir: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """The clients of another account: ``{who: (scheme, connection_args)}``.

    - ``plain``: no TLS at all;
    - ``no certificate``: TLS, trusting the job's CA (so that only the server can refuse),
      without a client certificate;
    - ``foreign certificate``: the same with a self-signed certificate of its own.
    """
    import ssl

    ca = str(tls_dir / "ca.pem")

    def context(cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False  # as distributed: the job's certificate names no host
        ctx.load_verify_locations(ca)
        if cert is not None:
            ctx.load_cert_chain(str(cert), str(key))
        return ctx

    foreign = make_credentials(Path(tempfile.mkdtemp(prefix="stranger-")) / "tls")
    return {
        "plain": ("tcp", {}),
        "no certificate": ("tls", {"ssl_context": context()}),
        "foreign certificate": ("tls", {"ssl_context": context(foreign.cert, foreign.key)}),
    }


def refusals(address: str, tls_dir: Path) -> dict[str, str]:
    """Each stranger's attempt on the TLS server at ``address``: ``{who: how it ended}``.

    Raises ``AssertionError`` if the job's own credentials do not get an answer there (the
    positive control) or if any stranger does.
    """
    host_port = address.split("://", 1)[1]
    own = identity(address, job_security(tls_dir).get_connection_args("client"))
    assert isinstance(own, dict) and "type" in own, f"the job's own client failed: {own!r}"
    outcome = {}
    for who, (scheme, args) in strangers(tls_dir).items():
        answer = identity(f"{scheme}://{host_port}", args)
        assert isinstance(answer, Exception), f"{who} got an answer from {address}: {answer!r}"
        outcome[who] = f"{type(answer).__name__}: {answer}"
    return outcome


def listening(pids: Iterable[int]) -> list[tuple[int, str, str, int]]:
    """``(pid, name, ip, port)`` of every listening TCP socket of the processes ``pids``."""
    wanted = set(pids)
    found = []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in wanted:
            try:
                name = " ".join(psutil.Process(conn.pid).cmdline()[:4])
            except psutil.Error:
                name = "?"
            found.append((conn.pid, name, conn.laddr.ip, conn.laddr.port))
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    root = psutil.Process(pid)
    return [pid, *(p.pid for p in root.children(recursive=True))]


def wildcard(sockets: Iterable[tuple[int, str, str, int]]) -> list[tuple[int, str, str, int]]:
    """The sockets of :func:`listening` bound to every interface (``0.0.0.0`` or ``::``)."""
    return [s for s in sockets if s[2] in ("0.0.0.0", "::")]


def private_violations(root: Path) -> list[str]:
    """What ``find ROOT -perm /077`` prints: files and directories under ``root`` (itself
    included) that the group or others may read, write or enter."""
    paths = [root, *root.rglob("*")]
    return [f"{p} {p.lstat().st_mode & 0o777:o}" for p in paths if p.lstat().st_mode & 0o077]


def private_key_leaks(paths: Iterable[Path]) -> list[Path]:
    """The files among ``paths`` that hold a PEM private key."""
    return [p for p in paths if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
