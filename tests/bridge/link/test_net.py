"""deisa.bridge.link.net: dask addresses read as distributed reads them, without it."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
from distributed.comm import parse_address, parse_host_port
from distributed.utils import get_ip

from deisa.bridge.link.net import host_port, interface_to, split_address


def _outcome(call: Callable[[str], object], arg: str) -> object:
    """What ``call(arg)`` returns, or the ValueError it raises."""
    try:
        return call(arg)
    except ValueError as exc:
        return f"ValueError: {exc}"


@pytest.mark.parametrize(
    "address",
    [
        "tcp://127.0.0.1:8786",
        "tls://10.1.2.3:8786",
        "tls://node-12.cluster:40000",
        "tcp://[::1]:8786",
        "tls://[fe80::1%eth0]:8786",
        "ucx://10.1.2.3:13337",
        "a://b://c:1",
        "127.0.0.1:8786",  # no scheme: distributed's default, from its configuration
        # not addresses: the same ValueError
        "tcp://::1:8786",
        "tcp://[::1]",
        "tcp://[::1",
        "tcp://[::1]8786",
        "tcp://[::1]:",
        "tcp://host",
        "tcp://host:port",
        "tcp://",
    ],
)
def test_addresses_read_as_distributed_reads_them(address: str) -> None:
    scheme, location = split_address(address)
    assert (scheme, location) == parse_address(address)
    assert _outcome(host_port, location) == _outcome(parse_host_port, location)


@pytest.mark.parametrize("host", ["127.0.0.1", "10.255.255.1", "::1", "192.0.2.1"])
def test_interface_to_a_host_is_distributeds_get_ip(host: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no route: both warn, then fall back
        assert interface_to(host) == get_ip(host)
