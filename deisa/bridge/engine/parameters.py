"""The parameters of the deisa ADIOS2 engine, read once, in Python.

An ADIOS2 code chooses its engine in its XML (or YAML) configuration; the deisa engine's
parameters sit beside ``PluginName`` and ``PluginLibrary``, as strings::

    <engine type="plugin">
      <parameter key="PluginName" value="deisa"/>
      <parameter key="PluginLibrary" value="deisa_adios2_engine"/>
      <parameter key="BufferNb" value="4"/>
      <parameter key="Variables" value="U, V"/>
    </engine>

The engine (``plugin/adios2/``) hands every parameter to :func:`parse` at ``Open`` and stops
there with its message if it raises. A key is read as ADIOS2 reads its own: case does not
matter, nor do underscores (``BufferNb``, ``buffer_nb`` and ``BUFFERNB`` are one key). Every
:class:`~deisa.bridge.options.BridgeOptions` field is a parameter, read from its text by the
field's own constraint (one declaration of the options, for the Bridge's keyword arguments, the
PDI YAML, the command line and these parameters); the engine adds its own four:

``SchedulerFile``
    The Dask scheduler file; ``$DEISA_SCHEDULER_FILE`` without it. ``deisa-run``'s scheduler
    file (``$DEISA_SCHEDULER_FILE_OVERRIDE``) wins over it, as for the PDI plugin.
``Variables``
    The variables published, by name, separated by commas or spaces; all by default. The
    others are accepted and not published.
``Every``
    Publish every N-th step only (step indices 0, N, 2N...: the analytics sees the ADIOS2
    step index as the time index); 1 by default.
``MemorySelections``
    ``guard`` (the default): the engine opens only where the memory selection guard
    (``libdeisa_adios2_guard.so``, which ``deisa-run`` preloads) tells it the memory selections
    the code sets, which ADIOS2's plugin interface hides from an engine; ``none``: the code sets
    no memory selection, and the engine opens without the guard (a selection set anyway would
    then go unseen: the guard, where loaded, is still obeyed).

A code swaps one line of its configuration and keeps the rest: the parameters of ADIOS2's own
engines (:data:`ADIOS2_ENGINE_KEYS`: BP3, BP4, BP5, SST, SSC, Inline, DataMan, HDF5) and those
openPMD-api adds to every engine it opens (:data:`OPENPMD_KEYS`) are accepted and ignored, and
:meth:`EngineParameters.notices` lists them in one line at ``Open``, with the io's
``<transport>`` sections. A key close to one of the deisa engine's own (``BuferNb``) is still
an error that suggests it; any other unknown key is one warning line. A key that is both a
deisa parameter and one of ADIOS2's (``Timeout``, DataMan's) is the deisa engine's.

Runs on the simulation's thread that opens the deisa ADIOS2 engine (its ``Open``, from C++).

Imports the Bridge's options and its scheduler file only.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..options import BridgeOptionError, BridgeOptions
from ..scheduler_file import SchedulerFileError, resolve_scheduler_file

__all__ = ["EngineParameterError", "EngineParameters", "parse"]

logger = logging.getLogger("deisa.adios2")

ADIOS2_KEYS = ("PluginName", "PluginLibrary", "verbose")
"""ADIOS2's own parameters of a plugin engine (its plugin manager reads ``verbose``): read by
ADIOS2, ignored here."""

ADIOS2_ENGINE_KEYS: dict[str, tuple[str, ...]] = {
    "BP3/BP4": (  # toolkit/format/bp/BPBase.cpp Init, engine/bp4/BP4Writer.cpp, BP4Reader.cpp
        "Profile", "ProfileUnits", "OpenTimeoutSecs", "BeginStepPollingFrequencySecs",
        "BufferGrowthFactor", "InitialBufferSize", "MaxBufferSize", "Threads", "AsyncOpen",
        "StatsLevel", "StatsBlockSize", "CollectiveMetadata", "FlushStepsCount", "SubStreams",
        "NumAggregators", "AggregatorRatio", "NodeLocal", "node-local", "BurstBufferPath",
        "BurstBufferDrain", "BurstBufferVerbose", "StreamReader", "Verbose",
    ),
    "BP5": (  # engine/bp5/BP5Engine.h BP5_FOREACH_PARAMETER_TYPE_4ARGS, core/IO.cpp
        "OpenTimeoutSecs", "BeginStepPollingFrequencySecs", "StreamReader", "BurstBufferDrain",
        "BurstBufferPath", "NodeLocal", "verbose", "NumAggregators", "AggregatorRatio",
        "NumSubFiles", "StripeSize", "DirectIO", "DirectIOAlignOffset", "DirectIOAlignBuffer",
        "AggregationType", "EnableWriterRerouting", "ReroutingThresholdFactor", "AsyncOpen",
        "AsyncWrite", "GrowthFactor", "InitialBufferSize", "MinDeferredSize",
        "BufferChunkSize", "MaxShmSize", "BufferVType", "AppendAfterSteps", "SelectSteps",
        "ReaderShortCircuitReads", "StatsLevel", "Threads", "MetadataThreads",
        "UseOneTimeAttributes", "UseSelectiveMetadataAggregation", "OneLevelGatherRanksLimit",
        "FlattenSteps", "IgnoreFlattenSteps", "RemoteDataPath", "RemoteHost", "UUID",
        "TarInfo", "MaxOpenFilesAtOnce", "DataFileTransport", "S3Endpoint", "S3Bucket",
        "S3AccessKeyID", "S3SecretKey", "S3SessionToken", "S3ObjectMode",
        "S3DirectUploadThreshold",
    ),
    "SST": (  # toolkit/sst/sst_data.h SST_FOREACH_PARAMETER_TYPE_4ARGS (+ BP3's, MarshalMethod BP)
        "MarshalMethod", "verbose", "RegistrationMethod", "StepDistributionMode",
        "DataTransport", "WANDataTransport", "OpenTimeoutSecs", "RendezvousReaderCount",
        "QueueLimit", "ReserveQueueLimit", "QueueFullPolicy", "IsRowMajor",
        "FirstTimestepPrecious", "ControlTransport", "NetworkInterface", "ControlInterface",
        "DataInterface", "CPCommPattern", "CompressionMethod", "AlwaysProvideLatestTimestep",
        "SpeculativePreloadMode", "SpecAutoNodeThreshold", "ReaderShortCircuitReads",
        "StatsLevel", "UseOneTimeAttributes", "RemoteGroup", "ControlModule",
    ),
    "SSC": ("EngineMode", "Verbose", "Threading", "OpenTimeoutSecs"),  # engine/ssc/Ssc*.cpp
    "Inline": ("verbose",),  # engine/inline/InlineWriter.cpp InitParameters
    "DataMan": (  # engine/dataman/DataManWriter.cpp, DataManReader.cpp
        "IPAddress", "Port", "Timeout", "Verbose", "RendezvousReaderCount", "Threading",
        "TransportMode", "Monitor", "CombiningSteps", "FloatAccuracy", "MaxStepBufferSize",
    ),
    "HDF5": ("H5CollectiveMPIO", "H5ChunkDim", "H5ChunkVars", "IdleH5Writer"),  # HDF5Common.cpp
}  # fmt: skip
"""The parameters ADIOS2 2.12.1's own engines read (the source files named), by engine: a
code that swaps its engine for deisa keeps them, and the deisa engine ignores them."""

OPENPMD_KEYS = ("AsyncWrite", "CollectiveMetadata", "Profile", "StatsLevel")
"""The parameters openPMD-api (0.17) adds to every ADIOS2 engine it opens, whatever its
configuration says: ignored."""

OWN_KEYS = ("SchedulerFile", "Variables", "Every", "MemorySelections", "OpenTimeout")
"""The engine's parameters that are not Bridge options."""

OVERRIDE = "DEISA_SCHEDULER_FILE_OVERRIDE"
"""deisa-run's scheduler file, which wins over ``SchedulerFile``."""

SOURCE = "deisa ADIOS2 engine"

MEMORY_SELECTIONS = ("guard", "none")
"""The values of ``MemorySelections``: the guard is needed, or the code sets no selection."""


class EngineParameterError(ValueError):
    """A parameter of the engine is unknown or has a bad value; the message names it."""


def _normal(key: str) -> str:
    """A key as ADIOS2 compares its own: case and underscores do not matter."""
    return key.replace("_", "").lower()


@dataclass(frozen=True)
class EngineParameters:
    """The engine's parameters, checked.

    Attributes
    ----------
    scheduler_file
        The Dask scheduler file.
    variables
        The variables to publish, ``None`` for all.
    every
        Publish the steps whose index is a multiple of it.
    options
        The Bridge's options.
    memory_selections
        ``"guard"``: the engine needs the memory selection guard; ``"none"``: the code sets no
        memory selection.
    ignored
        The parameters of ADIOS2's engines and openPMD-api's given, as written: ignored.
    unknown
        The keys that are nobody's parameters, as written: ignored with a warning.
    transports
        The io's ``<transport>`` sections, in words: ignored.
    open_timeout
        Seconds ``Open`` waits for every rank of ``MPI_COMM_WORLD``, without the guard.
    """

    scheduler_file: str
    variables: tuple[str, ...] | None
    every: int
    options: BridgeOptions
    memory_selections: str = "guard"
    ignored: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    transports: tuple[str, ...] = ()
    open_timeout: float = 60.0

    def notices(self) -> list[str]:
        """The lines the engine logs as warnings at ``Open`` (on one rank): the parameters of
        ADIOS2's engines and openPMD-api's, and the transports, that the deisa engine ignores
        (settings the code gave that have no effect); the keys no engine knows."""
        lines = []
        if self.ignored or self.transports:
            parts = [f"parameters {', '.join(self.ignored)}"] if self.ignored else []
            parts += [f"transport {transport}" for transport in self.transports]
            lines.append(
                f"{SOURCE}: ignored, as meant for ADIOS2's own engines or openPMD-api: "
                + "; ".join(parts)
            )
        if self.unknown:
            lines.append(
                f"{SOURCE}: ignored unknown parameters {', '.join(self.unknown)} (neither "
                f"the deisa engine's, {_valid()}, nor one of ADIOS2's engines')"
            )
        return lines

    def publishes(self, variable: str) -> bool:
        """Whether ``variable`` is published."""
        return self.variables is None or variable in self.variables

    def publishes_step(self, step: int) -> bool:
        """Whether step ``step`` is published."""
        return step % self.every == 0


def parse(
    parameters: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
    transports: Sequence[str] = (),
) -> EngineParameters:
    """Read the engine's parameters (ADIOS2's ``IO::Parameters()``).

    Parameters
    ----------
    parameters
        The parameters of the ``io``, ADIOS2's own (``PluginName``, ``PluginLibrary``,
        ``verbose``) included.
    environ
        Where to look up the scheduler file's variables; ``os.environ`` by default.
    transports
        The io's transports in words (``"File (Library, ProfileUnits)"``), where the engine
        knows them: listed as ignored.

    Raises
    ------
    EngineParameterError
        One line naming the parameter as written and what is wrong: a key close to one of the
        engine's own (with the one meant), a bad value, or no scheduler file at all.

    Examples
    --------
    >>> parse({"PluginName": "deisa", "SchedulerFile": "s.json", "BufferNb": "2"}).options.buffer_nb
    2
    >>> parse({"SchedulerFile": "s.json", "Threads": "1"}).ignored
    ('Threads',)
    """
    environ = os.environ if environ is None else environ
    options = {_normal(name): name for name in BridgeOptions.names()}
    own = {_normal(name): name for name in OWN_KEYS}
    silent = {_normal(name) for name in ADIOS2_KEYS}
    given_options: dict[str, str] = {}
    written: dict[str, str] = {}  # option name -> the key as written, for messages
    values: dict[str, str] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    for key, value in parameters.items():
        normal = _normal(key)
        if normal in silent:
            continue
        if normal in options:
            given_options[options[normal]] = value
            written[options[normal]] = key
        elif normal in own:
            values[own[normal]] = value
        elif normal in _FOREIGN:
            ignored.append(key)
        else:
            meant = _meant(normal)
            if meant is not None:
                raise EngineParameterError(
                    f"{SOURCE}: unknown parameter `{key}': did you mean `{meant}'? (valid "
                    f"parameters are {_valid()}; case and underscores do not matter)"
                )
            unknown.append(key)
    return EngineParameters(
        _engine_scheduler_file(values.get("SchedulerFile", ""), environ),
        _variables(values.get("Variables")),
        _every(values.get("Every", "1")),
        _options(given_options, written),
        _memory_selections(values.get("MemorySelections", "guard")),
        tuple(ignored),
        tuple(unknown),
        tuple(transports),
        _open_timeout(values.get("OpenTimeout", "60")),
    )


_FOREIGN = frozenset(
    _normal(key) for keys in (*ADIOS2_ENGINE_KEYS.values(), OPENPMD_KEYS) for key in keys
)
"""The keys of ADIOS2's engines and openPMD-api, as compared."""

CLOSE = 0.8
"""How close (difflib's ratio) an unknown key must be to one of the engine's own to be taken
for a misspelling of it (``BuferNb``: 0.93), an error, rather than a key for another engine."""


def _valid() -> list[str]:
    return sorted([*OWN_KEYS, *(_camel(name) for name in BridgeOptions.names())])


def _meant(normal: str) -> str | None:
    """The engine's own key that ``normal`` misspells, if one is close enough."""
    spelled = {_normal(name): name for name in _valid()}
    close = difflib.get_close_matches(normal, list(spelled), n=1, cutoff=CLOSE)
    return spelled[close[0]] if close else None


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _options(texts: Mapping[str, str], written: Mapping[str, str]) -> BridgeOptions:
    values: dict[str, object] = {}
    try:
        for name, text in texts.items():
            try:
                values[name] = BridgeOptions.constraint(name).parse(text.strip())
            except ValueError:  # a count's or a number's text (a choice's is its value)
                raise BridgeOptionError(name, f"{name}={text!r} is not a number") from None
        return BridgeOptions.from_mapping(values)
    except BridgeOptionError as exc:
        key = written.get(exc.option, exc.option)
        raise EngineParameterError(f"{SOURCE}: parameter `{key}': {exc}") from None


def _engine_scheduler_file(given: str, environ: Mapping[str, str]) -> str:
    override = environ.get(OVERRIDE, "")
    if override:
        if given and given != override:
            logger.info("SchedulerFile=%s is overridden by %s=%s", given, OVERRIDE, override)
        return override
    try:
        return resolve_scheduler_file(given.strip() or None, environ)
    except SchedulerFileError:
        raise EngineParameterError(
            f"{SOURCE}: no scheduler file: give the parameter SchedulerFile or set "
            "DEISA_SCHEDULER_FILE (deisa-run sets it)"
        ) from None


def _variables(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(name for name in re.split(r"[,\s]+", text) if name)
    if not names:
        raise EngineParameterError(f"{SOURCE}: parameter `Variables' names no variable")
    return names


def _every(text: str) -> int:
    try:
        every = int(text.strip())
    except ValueError:
        every = 0
    if every < 1:
        raise EngineParameterError(
            f"{SOURCE}: parameter `Every'={text!r} must be a positive integer"
        )
    return every


def _memory_selections(text: str) -> str:
    value = text.strip().lower()
    if value not in MEMORY_SELECTIONS:
        raise EngineParameterError(
            f"{SOURCE}: parameter `MemorySelections'={text!r} must be one of "
            f"{', '.join(MEMORY_SELECTIONS)}"
        )
    return value


def _open_timeout(text: str) -> float:
    try:
        seconds = float(text.strip())
    except ValueError:
        seconds = 0.0
    if not seconds > 0 or seconds == float("inf"):
        raise EngineParameterError(
            f"{SOURCE}: parameter `OpenTimeout'={text!r} must be a positive number of seconds"
        )
    return seconds
