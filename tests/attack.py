"""Attacks from another account, for the security tests: connect to a job's Dask servers
without its credentials, list what its processes listen on, and act as a real second account
of the machine (:func:`stranger`: plant packages and libraries).

Every probe has a positive control: the same call made with the job's own credentials must
succeed, so that a refusal means the server refused the stranger, not that the probe is broken.
"""

from __future__ import annotations

import asyncio
import functools
import os
import pwd
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

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


# -- a real second account on this machine -----------------------------------------------------

STRANGER = "deisa-stranger"
"""The other account of the attack tests: a system account made by :func:`stranger` if absent."""

PLANTED_LIBRARY = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    FILE *out = fopen(MARKER, "w");
    if (out) { fprintf(out, "%d", (int)getuid()); fclose(out); }
}
"""
"""An attacker's library: loaded, it writes the uid that loaded it to ``MARKER``."""


@dataclass(frozen=True)
class Stranger:
    """Another account of this machine: :attr:`run` runs a Python script as it (no group of
    ours), in a Python it may run."""

    name: str
    uid: int
    gid: int
    python: str

    def run(self, script: str, cwd: Path | None = None) -> str:
        """What ``script`` (dedented) printed, run as this account; it must succeed."""
        done = subprocess.run(
            [self.python, "-c", textwrap.dedent(script)], cwd=cwd, capture_output=True,
            text=True, timeout=120, user=self.uid, group=self.gid, extra_groups=[],
        )  # fmt: skip
        assert done.returncode == 0, f"{self.name}: {done.stderr}"
        return done.stdout

    def command(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        """``args`` run as this account (no group of ours), text output captured."""
        return subprocess.run(
            args, capture_output=True, text=True, timeout=120, user=self.uid, group=self.gid,
            extra_groups=[],
        )  # fmt: skip

    def copy(self, source: Path, target: Path) -> None:
        """``cp -R source target`` as this account: a file it writes, from bytes made
        anywhere, as an attacker drops a crafted file."""
        for path in [source, *source.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
        done = self.command(["cp", "-R", str(source), str(target)])
        assert done.returncode == 0, done.stderr

    @contextmanager
    def directory(self) -> Iterator[Path]:
        """A fresh directory of this account's (mode 0755, in the system's temporary
        directory: pytest's are private to ours), removed afterwards."""
        path = Path(tempfile.mkdtemp(prefix="deisa-stranger-"))
        try:
            path.chmod(0o755)
            os.chown(path, self.uid, self.gid)
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def plant_library(self, path: Path, marker: Path, extra: str = "") -> Path:
        """A library of this account at ``path`` (in a directory it may write) that writes
        the uid that loads it into ``marker`` (and defines the C of ``extra``); compiled here,
        copied there by the account."""
        made = planted_library(Path(tempfile.mkdtemp(prefix="planted-")), marker, extra)
        made.parent.chmod(0o755)
        try:
            self.run(f"import shutil; shutil.copy({str(made)!r}, {str(path)!r})")
        finally:
            shutil.rmtree(made.parent, ignore_errors=True)
        return path

    def plant_package(self, directory: Path, name: str, marker: Path) -> None:
        """A package ``name`` in ``directory`` whose import writes the importer's uid into
        ``marker``, made by this account."""
        code = f"import os\nopen({str(marker)!r}, 'w').write(str(os.getuid()))\n"
        self.run(
            f"""
            import os
            os.mkdir({str(directory / name)!r}, 0o755)
            open({str(directory / name / "__init__.py")!r}, "w").write({code!r})
            """
        )


def planted_library(directory: Path, marker: Path, extra: str = "") -> Path:
    """:data:`PLANTED_LIBRARY` (and the C of ``extra``) built as ``directory/planted.so``
    (``cc``; the test skips without one)."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler to build the attacker's library")
    source = directory / "planted.c"
    source.write_text(PLANTED_LIBRARY + extra)
    made = directory / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(made),
                    str(source)], check=True, timeout=120)  # fmt: skip
    made.chmod(0o755)
    return made


@functools.cache
def stranger() -> Stranger:
    """The account :data:`STRANGER`, made (``useradd --system``) if absent; the test skips
    where it cannot be (not root, no ``useradd``) or no Python is open to it."""
    from bridge.shm.test_transport import FOREIGN_PYTHON

    if os.geteuid() != 0:
        pytest.skip("needs root, to act as another account")
    if FOREIGN_PYTHON is None:
        pytest.skip("no Python that another account may run")
    try:
        entry = pwd.getpwnam(STRANGER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            pytest.skip(f"no useradd, to make the account {STRANGER}")
        # (exit status 9 if another test worker made it meanwhile)
        subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", STRANGER],
            capture_output=True, timeout=120,
        )  # fmt: skip
        try:
            entry = pwd.getpwnam(STRANGER)
        except KeyError:
            pytest.skip(f"useradd could not make the account {STRANGER}")
    return Stranger(STRANGER, entry.pw_uid, entry.pw_gid, FOREIGN_PYTHON)
