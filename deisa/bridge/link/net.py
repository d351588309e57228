"""Dask addresses read without distributed, for rank 0, which need not import it.

Rank 0 calls the scheduler through a relay on a worker of its node (:mod:`deisa.bridge.link.relay`),
so that what it still needs of an address, where its notices listener binds
(:mod:`deisa.bridge.registration.notices`) and whether a worker still listens
(:func:`deisa.bridge.link.workers.refuses_connections`), is done here with the standard library, as
distributed does it: :func:`split_address` and :func:`host_port` are
``distributed.comm.parse_address`` and ``parse_host_port``, :func:`interface_to` is
``distributed.utils.get_ip``.

Runs in a simulation rank: pure functions, called from either of its threads.
"""

from __future__ import annotations

import socket
import warnings

from ..._dask_internals import import_distributed


def split_address(address: str) -> tuple[str, str]:
    """``(scheme, location)`` of a dask address (``tls://10.0.0.1:8786``: ``("tls",
    "10.0.0.1:8786")``); an address without a scheme takes distributed's default scheme, from
    its configuration (importing distributed for it: a scheduler's address always has one)."""
    scheme, sep, location = address.rpartition("://")
    if not sep:
        import_distributed()
        from distributed.comm import parse_address

        return parse_address(address)
    return scheme, location


def host_port(location: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` or ``[ipv6]:port``; :class:`ValueError` for a location
    without a port or an IPv6 host without brackets."""
    invalid = f"invalid address {location!r}; maybe: ipv6 needs brackets like [::1]"
    if location.startswith("["):
        host, sep, tail = location[1:].partition("]")
        if not sep:
            raise ValueError(invalid)
        if tail and not tail.startswith(":"):
            raise ValueError(invalid)
        sep, port = tail[:1], tail[1:]
    else:
        host, sep, port = location.rpartition(":")
        if sep and ":" in host:
            raise ValueError(invalid)
    if not sep:
        raise ValueError(f"missing port number in address {location!r}")
    return host, int(port)


def interface_to(host: str, port: int = 80) -> str:
    """The local IP address through which ``host`` is reached: a UDP socket "connected" to it
    sends nothing, and the system picks its route. The host name's address where no route is
    found (with a :class:`RuntimeWarning`), ``127.0.0.1`` where that fails too."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.connect((host, port))
        ip: str = sock.getsockname()[0]
        if ip != "0.0.0.0":
            return ip
    except OSError as exc:
        warnings.warn(
            f"Couldn't detect a suitable IP address for reaching {host!r}, defaulting to "
            f"hostname: {exc}",
            RuntimeWarning,
            stacklevel=2,
        )
    finally:
        sock.close()
    try:
        info = socket.getaddrinfo(
            socket.gethostname(), port, family, socket.SOCK_DGRAM, socket.IPPROTO_UDP
        )
        return str(info[0][4][0])
    except socket.gaierror as exc:
        warnings.warn(
            f"Couldn't detect a suitable IP address ({exc}). Falling back to 127.0.0.1.",
            RuntimeWarning,
            stacklevel=2,
        )
        return "127.0.0.1"
