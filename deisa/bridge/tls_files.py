"""The job's TLS files under deisa's own names: :mod:`deisa.wire.tls_files`, also here.

The launcher, the ranks and the workers share these names; they live with the other names
the sides share, in :mod:`deisa.wire`.

Runs in a simulation rank, names only, no thread of its own. Imports :mod:`deisa.wire.tls_files`
only.
"""

from __future__ import annotations

from ..wire.tls_files import TLS_FILES_ENV, tls_files_env

__all__ = ["TLS_FILES_ENV", "tls_files_env"]
