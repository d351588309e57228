"""deisa.bridge.options: one owner for the Bridge's options (defaults, checks, messages)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pytest

from deisa import BridgeOptionError, BridgeOptions

DEFAULTS = {
    "placement": "round_robin",
    "buffer_nb": None,
    "timeout": 600.0,
    "connect_timeout": 30.0,
    "min_workers": 1,
    "on_full": "block",
    "mode": "async",
    "max_in_flight": 2,
    "on_worker_loss": "continue",
    "transport": "auto",
    "on_scheduler_loss": "continue",
    "shm_pool_mib": None,
    "shm_pool_scope": "rank",
    "consumers": 1,
}


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(prog="heat", exit_on_error=False)
    BridgeOptions.add_arguments(result)
    return result


def test_options_defaults_are_the_bridge_defaults() -> None:
    assert BridgeOptions().to_mapping() == DEFAULTS
    assert BridgeOptions.names() == tuple(DEFAULTS)


# (options, the option named by the error, regex of the message)
BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"placement": "nearest"}, "placement", r"placement='nearest' is not a placement policy"),
    ({"placement": None}, "placement", r"placement=None is not a placement policy"),
    ({"placement": ["locality"]}, "placement", r"placement=\[.locality.\] is not a placement"),
    ({"buffer_nb": 0}, "buffer_nb", r"buffer_nb=0 must be .* or None \(None means unbounded; 0"),
    ({"buffer_nb": -2}, "buffer_nb", r"buffer_nb=-2 must be a positive integer or None$"),
    ({"buffer_nb": 2.0}, "buffer_nb", r"buffer_nb=2.0 must be a positive integer"),
    ({"buffer_nb": "2"}, "buffer_nb", r"buffer_nb='2' must be a positive integer"),
    ({"buffer_nb": True}, "buffer_nb", r"buffer_nb=True must be a positive integer"),
    ({"on_full": "wait"}, "on_full", r"on_full='wait' is not a flow-control policy"),
    ({"on_full": "drop_oldest"}, "on_full", r"on_full='drop_oldest' needs a buffer_nb"),
    ({"timeout": 0}, "timeout", r"timeout=0 must be a positive number of seconds or None"),
    ({"timeout": float("nan")}, "timeout", r"timeout=nan must be a positive number"),
    ({"timeout": "60"}, "timeout", r"timeout='60' must be a positive number"),
    ({"connect_timeout": None}, "connect_timeout", r"connect_timeout=None must be a positive"),
    ({"connect_timeout": -1.5}, "connect_timeout", r"connect_timeout=-1.5 must be a positive"),
    ({"min_workers": 0}, "min_workers", r"min_workers=0 must be a positive integer"),
    ({"min_workers": 1.5}, "min_workers", r"min_workers=1.5 must be a positive integer"),
    ({"mode": "background"}, "mode", r"mode='background' is not a publication mode; choose one"),
    ({"mode": None}, "mode", r"mode=None is not a publication mode"),
    ({"max_in_flight": 0}, "max_in_flight", r"max_in_flight=0 must be a positive integer"),
    ({"max_in_flight": None}, "max_in_flight", r"max_in_flight=None must be a positive integer"),
    ({"max_in_flight": 2.0}, "max_in_flight", r"max_in_flight=2.0 must be a positive integer"),
    ({"on_worker_loss": "retry"}, "on_worker_loss", r"on_worker_loss='retry' is not a loss policy"),
    ({"on_scheduler_loss": None}, "on_scheduler_loss", r"on_scheduler_loss=None is not a loss"),
    ({"transport": "udp"}, "transport", r"transport='udp' is not a transport"),
    ({"shm_pool_mib": -1}, "shm_pool_mib", r"shm_pool_mib=-1 must be a positive number of MiB"),
    ({"shm_pool_scope": "job"}, "shm_pool_scope", r"shm_pool_scope='job' is not a pool scope"),
]


@pytest.mark.parametrize(("options", "option", "message"), BAD, ids=[str(b[0]) for b in BAD])
def test_options_bad_value_names_the_option(
    options: dict[str, Any], option: str, message: str
) -> None:
    with pytest.raises(BridgeOptionError, match=message) as info:
        BridgeOptions(**options)
    assert info.value.option == option
    assert isinstance(info.value, ValueError)


def test_options_normalise_numbers() -> None:
    options = BridgeOptions(buffer_nb=np.int32(3), timeout=5, connect_timeout=np.float32(2))
    assert options.buffer_nb == 3 and type(options.buffer_nb) is int
    assert options.timeout == 5.0 and type(options.timeout) is float
    assert type(options.connect_timeout) is float
    assert BridgeOptions(timeout=None, buffer_nb=None).timeout is None
    assert BridgeOptions(timeout=float("inf")).timeout == float("inf")


def test_options_are_frozen_and_replace_checks() -> None:
    options = BridgeOptions(buffer_nb=2)
    with pytest.raises(AttributeError):
        options.buffer_nb = 3  # type: ignore[misc]
    assert options.replace(on_full="drop_oldest").on_full == "drop_oldest"
    with pytest.raises(BridgeOptionError, match="needs a buffer_nb"):
        options.replace(buffer_nb=None, on_full="drop_oldest")


def test_options_mapping_round_trip() -> None:
    options = BridgeOptions.from_mapping(
        {"placement": "locality", "buffer_nb": 4, "on_full": "drop_oldest", "timeout": None}
    )
    assert options.to_mapping() == {
        **DEFAULTS,
        "placement": "locality",
        "buffer_nb": 4,
        "on_full": "drop_oldest",
        "timeout": None,
    }
    assert BridgeOptions.from_mapping(options.to_mapping()) == options
    assert BridgeOptions.from_mapping({}) == BridgeOptions()


def test_options_from_mapping_rejects_unknown_keys_naming_them() -> None:
    with pytest.raises(BridgeOptionError) as info:
        BridgeOptions.from_mapping({"buffer_nb": 2, "bufer_nb": 3, "zz": 1}, source="run.yml")
    assert info.value.option == "bufer_nb"
    assert str(info.value) == (
        "run.yml: unknown Bridge option(s) ['bufer_nb', 'zz']; valid options are "
        "['buffer_nb', 'connect_timeout', 'consumers', 'max_in_flight', 'min_workers', 'mode', "
        "'on_full', "
        "'on_scheduler_loss', 'on_worker_loss', 'placement', 'shm_pool_mib', 'shm_pool_scope', "
        "'timeout', 'transport']"
    )


def test_options_from_mapping_prefixes_the_source() -> None:
    with pytest.raises(BridgeOptionError, match=r"^run.yml: min_workers=0 must be") as info:
        BridgeOptions.from_mapping({"min_workers": 0}, source="run.yml")
    assert info.value.option == "min_workers"


@pytest.mark.parametrize(
    "options",
    [
        BridgeOptions(),
        BridgeOptions(placement="locality", buffer_nb=2, on_full="drop_oldest", min_workers=3),
        BridgeOptions(timeout=None, connect_timeout=0.25),
        BridgeOptions(timeout=float("inf")),
        BridgeOptions(mode="sync", max_in_flight=5),
        BridgeOptions(on_worker_loss="fail", on_scheduler_loss="fail", transport="tcp"),
        BridgeOptions(shm_pool_mib=0, shm_pool_scope="node"),
        BridgeOptions(shm_pool_mib=1024.0, consumers=2),
    ],
    ids=["defaults", "set", "none", "inf", "sync", "fail", "no pool", "pool"],
)
def test_options_argv_round_trip(options: BridgeOptions) -> None:
    argv = options.to_argv()
    assert argv[::2] == [
        "--placement",
        "--buffer-nb",
        "--timeout",
        "--connect-timeout",
        "--min-workers",
        "--on-full",
        "--mode",
        "--max-in-flight",
        "--on-worker-loss",
        "--transport",
        "--on-scheduler-loss",
        "--shm-pool-mib",
        "--shm-pool-scope",
        "--consumers",
    ]
    assert BridgeOptions.from_namespace(parser().parse_args(argv)) == options


def test_options_absent_flags_keep_the_defaults() -> None:
    assert BridgeOptions.from_namespace(parser().parse_args([])) == BridgeOptions()
    args = parser().parse_args(["--buffer-nb", "none", "--timeout", "None", "--min-workers", "2"])
    assert BridgeOptions.from_namespace(args) == BridgeOptions(timeout=None, min_workers=2)


def test_options_from_namespace_names_the_flag() -> None:
    with pytest.raises(BridgeOptionError, match=r"^--buffer-nb=0 must be a positive") as info:
        BridgeOptions.from_namespace(parser().parse_args(["--buffer-nb", "0"]))
    assert info.value.option == "buffer_nb"
    with pytest.raises(BridgeOptionError, match=r"^--on-full='drop_oldest' needs a buffer_nb"):
        BridgeOptions.from_namespace(parser().parse_args(["--on-full", "drop_oldest"]))
    with pytest.raises(BridgeOptionError, match=r"^--max-in-flight=0 must be a positive") as info:
        BridgeOptions.from_namespace(parser().parse_args(["--max-in-flight", "0"]))
    assert info.value.option == "max_in_flight"


def test_options_parser_checks_the_choices() -> None:
    with pytest.raises(argparse.ArgumentError, match="invalid choice: 'nearest'"):
        parser().parse_args(["--placement", "nearest"])
    with pytest.raises(argparse.ArgumentError, match="invalid int value: 'two'"):
        parser().parse_args(["--buffer-nb", "two"])
    with pytest.raises(argparse.ArgumentError, match="invalid choice: 'later'"):
        parser().parse_args(["--mode", "later"])


def test_options_help_shows_the_defaults() -> None:
    text = " ".join(parser().format_help().split())
    for flag in ("--placement", "--buffer-nb", "--timeout", "--connect-timeout", "--on-full"):
        assert flag in text
    assert "(default: none)" in text and "(default: 600.0)" in text
