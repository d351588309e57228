"""The job's TLS files under deisa's own names: what ``deisa-run`` hands every rank.

``deisa-run`` gives every process of a job its credentials as files, in Dask's configuration
variables (``DASK_DISTRIBUTED__COMM__TLS__*``: :func:`deisa.launcher.security.tls_env`), and the
same files again under the names of :data:`TLS_FILES_ENV`. Rank 0's notices listener
(:mod:`deisa.bridge.registration.notices`) reads these, so that it needs neither dask nor
distributed (their import costs a rank up to 0.4 s of CPU): Dask's variables are only a part of
Dask's configuration, which files and other variables may change, and only dask can read it. Both
sides import the names from here (the library never imports the launcher).
"""

from __future__ import annotations

TLS_FILES_ENV = ("DEISA_TLS_CA_FILE", "DEISA_TLS_CERT", "DEISA_TLS_KEY")
"""The environment variables naming the job's CA file, certificate and key (a path each, as
Dask's ``distributed.comm.tls.ca-file``, ``.client.cert`` and ``.client.key``)."""


def tls_files_env(ca_file: str, cert: str, key: str) -> dict[str, str]:
    """The variables of :data:`TLS_FILES_ENV` for these files (paths, or shell words such as
    ``"$TLS/key.pem"`` in a job script; never the key itself)."""
    return dict(zip(TLS_FILES_ENV, (ca_file, cert, key), strict=True))
