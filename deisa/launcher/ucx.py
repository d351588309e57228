"""``deisa-run --protocol ucx``: the Dask processes of a run speak UCX (distributed-ucxx).

UCX moves bytes over InfiniBand, RoCE or shared memory where the cluster has them. distributed
reaches it through the ``distributed-ucxx`` package (the ``ucx`` extra of ``deisa-insitu``),
which registers the ``ucx://`` scheme.

What it costs in security (``docs/security.md``): distributed has no TLS over UCX, so nothing
authenticates a peer, and distributed-ucxx's listener takes every interface
(``0.0.0.0:<port>``) whatever ``--host`` says. Whoever reaches a port of the run can send Dask
messages and run code as you. :func:`check_protocol` therefore refuses ``--protocol ucx``
unless ``--insecure`` is given too, and names the missing package when it is not installed,
before anything starts. In a local run, :meth:`UCX.env` keeps UCX's data interfaces on
loopback (``UCX_NET_DEVICES=lo``, unless set): the listener itself cannot be kept there.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from .defaults import UsageError

UCX_MODULE = "distributed_ucxx"
"""The module that distributed-ucxx installs (its entry point registers ``ucx://``)."""

UCX_DISTRIBUTION = "distributed-ucxx-cu12"
"""The distribution that provides :data:`UCX_MODULE` on the package index: RAPIDS publishes it
once per CUDA major version (``-cu12``, ``-cu13``), none under the plain name; the CUDA
libraries it pulls in load without a GPU."""

UCX_INSTALL = f"pip install 'deisa-insitu[ucx]' (it installs {UCX_DISTRIBUTION})"


def ucx_available() -> bool:
    """Whether :data:`UCX_MODULE` can be found (not imported: that starts UCX)."""
    return importlib.util.find_spec(UCX_MODULE) is not None


def check_protocol(protocol: str, tls: bool, name: str, *, local: bool) -> str:
    """``protocol`` if the run can speak it; the reason in a :class:`UsageError` otherwise.

    Parameters
    ----------
    protocol
        ``"tcp"`` or ``"ucx"``.
    tls
        Whether the run speaks TLS (``False``: ``--insecure``).
    name
        How the error names the option (``--protocol``, or its key in the defaults file).
    local
        Whether the Dask processes start from this interpreter (the local run, or a Slurm job
        without ``--python``): then :data:`UCX_MODULE` must be found here.

    Raises
    ------
    UsageError
        An unknown protocol; ``ucx`` with TLS (distributed has none over UCX); ``ucx``
        without distributed-ucxx.
    """
    if protocol not in ("tcp", "ucx"):
        raise UsageError(f"{name}={protocol!r} must be tcp or ucx")
    if protocol == "tcp":
        return protocol
    if tls:
        raise UsageError(
            f"{name} ucx: distributed has no TLS over UCX, and distributed-ucxx listens on "
            "every interface whatever --host says: anyone who reaches a port of the run could "
            "connect without credentials and run code as you. Give --insecure as well to accept "
            "that (docs/security.md), or keep --protocol tcp"
        )
    if local and not ucx_available():
        raise UsageError(
            f"{name} ucx: distributed-ucxx is not installed (no module {UCX_MODULE!r} in this "
            f"Python); {UCX_INSTALL}"
        )
    return protocol


class UCX:
    """What ``dask scheduler`` and ``dask worker`` are given to speak UCX: the counterpart of
    :class:`~deisa.launcher.security.Credentials` for a run without TLS (``cli_args`` and
    ``env``, no ``security``)."""

    def cli_args(self) -> list[str]:
        """``--protocol ucx``."""
        return ["--protocol", "ucx"]

    def env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of every process of a local run: UCX's network devices kept to
        loopback (``UCX_NET_DEVICES=lo``), unless ``environ`` (this process's by default)
        sets them."""
        environ = os.environ if environ is None else environ
        return {} if "UCX_NET_DEVICES" in environ else {"UCX_NET_DEVICES": "lo"}
