"""The deisa ADIOS2 engine's parameters (deisa.bridge.engine_parameters): read as ADIOS2 reads
its own keys, every Bridge option by its own constraint, each error one line naming the key."""

from __future__ import annotations

import pytest

from deisa.bridge.engine_parameters import EngineParameterError, parse
from deisa.bridge.options import BridgeOptions

PLUGIN = {"PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine", "verbose": "5"}


def test_every_bridge_option_is_a_parameter_in_any_case_and_spelling() -> None:
    given = {"BufferNb": "3", "mode": "sync", "TRANSPORT": "tcp", "connect_timeout": "2.5",
             "Placement": "locality", "Timeout": "none"}  # fmt: skip
    options = parse({**PLUGIN, "SchedulerFile": "s.json", **given}, {}).options
    expected = {"buffer_nb": 3, "mode": "sync", "transport": "tcp", "connect_timeout": 2.5,
                "placement": "locality", "timeout": None}  # fmt: skip
    assert {name: getattr(options, name) for name in expected} == expected
    assert options == BridgeOptions.from_mapping(expected)


def test_defaults_are_the_bridges_and_every_variable_and_step_is_published() -> None:
    parameters = parse({**PLUGIN, "SchedulerFile": "s.json"}, {})
    assert parameters.options == BridgeOptions()
    assert parameters.variables is None and parameters.every == 1
    assert parameters.publishes("anything") and parameters.publishes_step(7)
    assert parameters.memory_selections == "guard"  # the engine needs the guard


def test_memory_selections_none_in_any_case() -> None:
    """A code that sets no memory selection may say so: the engine then opens without the
    memory selection guard."""
    for text in ("none", " None ", "NONE"):
        parsed = parse({"SchedulerFile": "s", "memory_selections": text}, {})
        assert parsed.memory_selections == "none"
    guarded = parse({"SchedulerFile": "s", "MemorySelections": "Guard"}, {})
    assert guarded.memory_selections == "guard"


def test_variables_and_every_choose_what_is_published() -> None:
    parameters = parse({"SchedulerFile": "s", "Variables": "U, V W", "Every": "3"}, {})
    assert parameters.variables == ("U", "V", "W")
    assert parameters.publishes("V") and not parameters.publishes("step")
    assert [s for s in range(7) if parameters.publishes_step(s)] == [0, 3, 6]


def test_scheduler_file_from_the_environment_and_deisa_runs_override() -> None:
    env = {"DEISA_SCHEDULER_FILE": "/env.json"}
    assert parse({}, env).scheduler_file == "/env.json"
    assert parse({"SchedulerFile": "mine.json"}, env).scheduler_file == "mine.json"
    override = {**env, "DEISA_SCHEDULER_FILE_OVERRIDE": "/run.json"}
    assert parse({"SchedulerFile": "mine.json"}, override).scheduler_file == "/run.json"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"Schedulerfile": "s", "Foo": "1"}, "unknown parameter `Foo'; valid parameters are"),
        ({"SchedulerFile": "s", "BufferNb": "0"},
         "parameter `BufferNb': buffer_nb=0 must be a positive integer or None"),
        ({"SchedulerFile": "s", "Timeout": "soon"},
         "parameter `Timeout': timeout='soon' is not a number"),
        ({"SchedulerFile": "s", "Mode": "fast"},
         "parameter `Mode': mode='fast' is not a publication mode"),
        ({"SchedulerFile": "s", "Every": "0"}, "parameter `Every'='0' must be a positive integer"),
        ({"SchedulerFile": "s", "Variables": " , "}, "parameter `Variables' names no variable"),
        ({"SchedulerFile": "s", "MemorySelections": "off"},
         "parameter `MemorySelections'='off' must be one of guard, none"),
        ({}, "no scheduler file: give the parameter SchedulerFile or set DEISA_SCHEDULER_FILE"),
    ],
)  # fmt: skip
def test_bad_parameters_are_one_line_naming_them(given: dict[str, str], message: str) -> None:
    with pytest.raises(EngineParameterError) as error:
        parse(given, {})
    text = str(error.value)
    assert text.startswith(f"deisa ADIOS2 engine: {message}"), text
    assert "\n" not in text
