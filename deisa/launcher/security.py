"""A job's security: its TLS credentials and its private files.

Every run that ``deisa-run`` starts (locally or as a Slurm job) makes fresh credentials, a
self-signed certificate that is its own CA and the certificate of every process of the job
(scheduler, workers, the simulation's ranks, the analytics client), in a 0700 directory under
the job's output (:func:`make_credentials`), and removes them at the end. Dask then speaks
mutual TLS only: a process without the job's key cannot connect to the scheduler, nor to a
worker, and cannot be connected to (distributed sets ``CERT_REQUIRED`` on both sides once a CA
file and a certificate are configured).

The credentials travel as file paths in Dask's own configuration variables
(:meth:`Credentials.env`): the Bridge, the PDI plugin and ``Adapter.from_env()`` read them
through ``distributed.Security()``, so a user's code needs no change. The same paths also go
under deisa's own names (:mod:`deisa.bridge.tls_files`), for rank 0's notices listener, which
reads them without importing dask. The private key itself never appears on a command line, in
the job script or in a log.

``python -m deisa.launcher.security DIR`` makes the credentials in ``DIR`` (what the Slurm job
runs on its first node) and prints nothing. See ``docs/security.md``.
"""

from __future__ import annotations

import datetime
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..bridge.tls_files import tls_files_env
from ..pca_app.failures import naming_path
from .defaults import UsageError

CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "cert.pem", "key.pem"
"""The files of a job's credentials directory."""

COMMON_NAME = "dask-internal"
"""Subject of the job's certificate (distributed does not check host names)."""

VALID_DAYS = 7
"""Lifetime of a job's certificate: longer than any job, short if a copy leaks."""


@dataclass(frozen=True)
class Credentials:
    """The TLS files of one job, all roles sharing one key and certificate.

    Attributes
    ----------
    directory
        The 0700 directory holding :data:`CA_FILE`, :data:`CERT_FILE` and :data:`KEY_FILE`
        (0600).
    """

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / CA_FILE

    @property
    def cert(self) -> Path:
        return self.directory / CERT_FILE

    @property
    def key(self) -> Path:
        return self.directory / KEY_FILE

    def env(self) -> dict[str, str]:
        """Dask's configuration variables that make a process use these credentials in every
        role (scheduler, worker, client) and refuse plain ``tcp://``, and deisa's names of the
        same files (:func:`tls_env`)."""
        return tls_env(str(self.ca_file), str(self.cert), str(self.key))

    def cli_args(self) -> list[str]:
        """``dask scheduler`` and ``dask worker`` options: TLS with these files."""
        return [
            "--protocol", "tls",
            "--tls-ca-file", str(self.ca_file),
            "--tls-cert", str(self.cert),
            "--tls-key", str(self.key),
        ]  # fmt: skip

    def security(self) -> Any:
        """A :class:`distributed.Security` for a client of this job."""
        from distributed import Security

        return Security(
            tls_ca_file=str(self.ca_file),
            tls_client_cert=str(self.cert),
            tls_client_key=str(self.key),
            require_encryption=True,
        )

    def remove(self) -> None:
        """Delete the directory and its files (the job is over)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def tls_env(ca_file: str, cert: str, key: str) -> dict[str, str]:
    """The Dask configuration variables for mutual TLS with these files, in every role, and
    the same files under deisa's own names (:data:`deisa.bridge.tls_files.TLS_FILES_ENV`:
    ``DEISA_TLS_CA_FILE``, ``DEISA_TLS_CERT``, ``DEISA_TLS_KEY``), which rank 0's notices
    listener reads without dask.

    The values are paths (or shell words such as ``"$TLS/key.pem"`` in a job script), never
    the key itself.
    """
    env = {
        "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": ca_file,
        "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
        "DASK_DISTRIBUTED__COMM__DEFAULT_SCHEME": "tls",
    }
    for role in ("SCHEDULER", "WORKER", "CLIENT"):
        env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__CERT"] = cert
        env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__KEY"] = key
    env.update(tls_files_env(ca_file, cert, key))
    return env


def make_credentials(directory: Path) -> Credentials:
    """Fresh credentials in ``directory`` (made 0700; a previous run's is replaced).

    The key is an EC P-256 key (its generation and the handshakes cost less than RSA's), the
    certificate self-signed, valid :data:`VALID_DAYS` days. ``distributed.Security.temporary``
    does the same in memory, with RSA, but processes started apart need files.

    Raises
    ------
    UsageError
        ``directory`` is a symbolic link or belongs to another account.
    OSError
        A file could not be written (a full disk), naming it; ``directory`` is removed.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    _fresh_private_dir(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, COMMON_NAME)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # nodes' clocks differ
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(COMMON_NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    credentials = Credentials(directory)
    try:
        write_private(credentials.ca_file, pem)
        write_private(credentials.cert, pem)
        write_private(
            credentials.key,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
    except BaseException:  # a full disk: no empty or partial file left behind
        credentials.remove()
        raise
    return credentials


def _fresh_private_dir(directory: Path) -> None:
    """``directory`` made anew, empty and 0700."""
    try:
        info = directory.lstat()
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
            raise UsageError(
                f"{directory}: a symbolic link or another account's directory where the job's "
                "TLS credentials go; remove it"
            )
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.mkdir(mode=0o700)
    os.chmod(directory, 0o700)  # whatever the umask


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path``, 0600, refusing to follow a symbolic link; an
    ``OSError`` names ``path`` (a full disk included)."""
    with naming_path(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)


def open_log(path: Path) -> IO[bytes]:
    """``path`` opened for writing, truncated, 0600 if new; a symbolic link is refused
    (``OSError``, naming it), so that another account cannot point a log at a file of ours."""
    with naming_path(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, "wb")


def path_problem(path: Path) -> str | None:
    """Why another account could change what ``path`` names, or ``None``.

    Every existing one of ``path`` and its ancestors must belong to this account or to root
    and be writable by neither group nor others, unless it is a directory with the sticky bit
    (as ``/tmp``, where nobody renames another's entries): otherwise whoever may write there
    can rename what comes below it and put their own in its place, or change the file itself
    (an interpreter, a library). Both ways to ``path`` are checked: as written (made absolute:
    the directories holding its symbolic links, as a virtual environment's ``bin/python``)
    and resolved (the directories the links lead to). A part that does not exist yet is made
    by the run, private; the caller checks it again once made.
    """
    uid = os.geteuid()
    try:
        ways = dict.fromkeys([path.absolute(), path.resolve()])
    except (OSError, RuntimeError) as exc:  # a loop of symbolic links
        return f"{path}: {exc}"
    for part in (part for way in ways for part in [way, *way.parents]):
        try:
            info = part.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{part}: {exc.strerror}"
        if info.st_uid not in (uid, 0):
            return f"{part} belongs to another account (uid {info.st_uid})"
        directory = stat.S_ISDIR(info.st_mode)
        if info.st_mode & 0o022 and not (directory and info.st_mode & stat.S_ISVTX):
            mode = f"{part} is writable by other accounts (mode {stat.S_IMODE(info.st_mode):o})"
            if not directory:
                return f"{mode}: they could change it"
            return f"{mode} without the sticky bit: pick a directory of your own"
    return None


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot hold a job's output, or ``None``.

    Refused: a path where another account could change the job's files
    (:func:`path_problem`, every existing ancestor included), or an existing ``path`` that is
    not a directory of this account.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return path_problem(path)  # made by the run, private
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to another account (uid {info.st_uid})"
    return path_problem(path)


def main(argv: list[str] | None = None) -> int:
    """``python -m deisa.launcher.security DIR``: make a job's credentials in ``DIR``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m deisa.launcher.security DIR", file=sys.stderr)
        return 2
    os.umask(0o077)
    try:
        make_credentials(Path(args[0]))
    except (OSError, UsageError) as exc:
        print(f"deisa: cannot make the job's TLS credentials: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
