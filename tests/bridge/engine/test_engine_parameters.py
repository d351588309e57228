"""The deisa ADIOS2 engine's parameters (deisa.bridge.engine.parameters): read as ADIOS2 reads
its own keys, every Bridge option by its own constraint, each error one line naming the key;
ADIOS2's own engines' and openPMD-api's parameters ignored and listed in one line, a misspelt
key of the engine's an error that names the key meant, any other unknown key a warning."""

from __future__ import annotations

import pytest

from deisa.bridge.engine.parameters import (
    ADIOS2_ENGINE_KEYS,
    OPENPMD_KEYS,
    EngineParameterError,
    parse,
)
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
    assert parameters.open_timeout == 60.0


def test_memory_selections_none_in_any_case() -> None:
    """A code that sets no memory selection may say so: the engine then opens without the
    memory selection guard."""
    for text in ("none", " None ", "NONE"):
        parsed = parse({"SchedulerFile": "s", "memory_selections": text}, {})
        assert parsed.memory_selections == "none"
    guarded = parse({"SchedulerFile": "s", "MemorySelections": "Guard"}, {})
    assert guarded.memory_selections == "guard"


def test_variables_and_every_choose_what_is_published() -> None:
    parameters = parse({"SchedulerFile": "s", "Variables": "U, V W", "Every": "3",
                        "open_timeout": "2.5"}, {})  # fmt: skip
    assert parameters.open_timeout == 2.5
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
        ({"Schedulerfile": "s", "BuferNb": "1"},
         "unknown parameter `BuferNb': did you mean `BufferNb'? (valid parameters are"),
        ({"Schedulerfile": "s", "Variable": "U"},
         "unknown parameter `Variable': did you mean `Variables'?"),
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
        ({"SchedulerFile": "s", "OpenTimeout": "0"},
         "parameter `OpenTimeout'='0' must be a positive number of seconds"),
        ({"SchedulerFile": "s", "OpenTimeout": "soon"},
         "parameter `OpenTimeout'='soon' must be a positive number of seconds"),
        ({}, "no scheduler file: give the parameter SchedulerFile or set DEISA_SCHEDULER_FILE"),
    ],
)  # fmt: skip
def test_bad_parameters_are_one_line_naming_them(given: dict[str, str], message: str) -> None:
    with pytest.raises(EngineParameterError) as error:
        parse(given, {})
    text = str(error.value)
    assert text.startswith(f"deisa ADIOS2 engine: {message}"), text
    assert "\n" not in text


HEAT_BP5 = {  # ADIOS2's examples/simulations/heatTransfer/heat_bp5.xml, engine swapped
    "PluginName": "deisa", "PluginLibrary": "deisa_adios2_engine",
    "Threads": "1", "ProfileUnits": "Microseconds", "InitialBufferSize": "16Kb",
    "FlushStepsCount": "1",
}  # fmt: skip


def test_a_swapped_bp5_configuration_keeps_its_parameters_listed_in_one_line() -> None:
    parsed = parse({**HEAT_BP5, "SchedulerFile": "s"}, {}, ["File (Library, ProfileUnits)"])
    assert parsed.ignored == ("Threads", "ProfileUnits", "InitialBufferSize", "FlushStepsCount")
    assert parsed.options == BridgeOptions() and parsed.unknown == ()
    assert parsed.notices() == [
        "deisa ADIOS2 engine: ignored, as meant for ADIOS2's own engines or openPMD-api: "
        "parameters Threads, ProfileUnits, InitialBufferSize, FlushStepsCount; "
        "transport File (Library, ProfileUnits)"
    ]


@pytest.mark.parametrize("engine", list(ADIOS2_ENGINE_KEYS))
def test_every_parameter_of_adios2s_engines_is_ignored_in_any_case(engine: str) -> None:
    """Each ADIOS2 engine's parameters, as written and lower-cased: ignored, none a deisa
    option but DataMan's Timeout, which is the deisa engine's (its Bridge's timeout);
    ``verbose``, which ADIOS2's plugin manager reads too, without a word."""
    keys = [key for key in ADIOS2_ENGINE_KEYS[engine] if key.lower() not in ("timeout", "verbose")]
    for given in (keys, [key.lower() for key in keys]):
        parsed = parse({"SchedulerFile": "s", **dict.fromkeys(given, "x")}, {})
        assert parsed.ignored == tuple(given) and parsed.unknown == ()
        assert parsed.options == BridgeOptions()
    timeout = parse({"SchedulerFile": "s", "Timeout": "5"}, {})
    assert timeout.options.timeout == 5.0 and timeout.ignored == ()


def test_openpmds_four_parameters_are_ignored() -> None:
    """openPMD-api adds them to every engine it opens, whatever its configuration says."""
    given = dict.fromkeys(OPENPMD_KEYS, "1")
    parsed = parse({"SchedulerFile": "s", **given}, {})
    assert parsed.ignored == ("AsyncWrite", "CollectiveMetadata", "Profile", "StatsLevel")
    assert "AsyncWrite, CollectiveMetadata, Profile, StatsLevel" in parsed.notices()[0]


def test_an_unknown_key_far_from_the_engines_is_one_warning_line() -> None:
    parsed = parse({"SchedulerFile": "s", "Threads": "2", "Colour": "blue"}, {})
    assert parsed.unknown == ("Colour",) and parsed.ignored == ("Threads",)
    ignored, warning = parsed.notices()
    assert ignored.endswith("parameters Threads") and "\n" not in warning
    assert warning.startswith("deisa ADIOS2 engine: ignored unknown parameters Colour (neither")


def test_nothing_to_say_of_the_engines_own_parameters() -> None:
    assert parse({**PLUGIN, "SchedulerFile": "s", "BufferNb": "2"}, {}).notices() == []
