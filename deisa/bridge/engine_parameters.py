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

Runs on the simulation's thread that opens the deisa ADIOS2 engine (its ``Open``, from C++).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .options import BridgeOptionError, BridgeOptions
from .scheduler_file import SchedulerFileError, resolve_scheduler_file

__all__ = ["EngineParameterError", "EngineParameters", "parse"]

logger = logging.getLogger("deisa.adios2")

ADIOS2_KEYS = ("PluginName", "PluginLibrary", "verbose")
"""ADIOS2's own parameters of a plugin engine (its plugin manager reads ``verbose``): read by
ADIOS2, ignored here."""

OWN_KEYS = ("SchedulerFile", "Variables", "Every", "MemorySelections")
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
    """

    scheduler_file: str
    variables: tuple[str, ...] | None
    every: int
    options: BridgeOptions
    memory_selections: str = "guard"

    def publishes(self, variable: str) -> bool:
        """Whether ``variable`` is published."""
        return self.variables is None or variable in self.variables

    def publishes_step(self, step: int) -> bool:
        """Whether step ``step`` is published."""
        return step % self.every == 0


def parse(
    parameters: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> EngineParameters:
    """Read the engine's parameters (ADIOS2's ``IO::Parameters()``).

    Parameters
    ----------
    parameters
        The parameters of the ``io``, ADIOS2's own (``PluginName``, ``PluginLibrary``,
        ``verbose``) included.
    environ
        Where to look up the scheduler file's variables; ``os.environ`` by default.

    Raises
    ------
    EngineParameterError
        One line naming the parameter as written and what is wrong: an unknown key (with the
        valid ones), a bad value, or no scheduler file at all.

    Examples
    --------
    >>> parse({"PluginName": "deisa", "SchedulerFile": "s.json", "BufferNb": "2"}).options.buffer_nb
    2
    """
    environ = os.environ if environ is None else environ
    options = {_normal(name): name for name in BridgeOptions.names()}
    own = {_normal(name): name for name in OWN_KEYS}
    ignored = {_normal(name) for name in ADIOS2_KEYS}
    given_options: dict[str, str] = {}
    written: dict[str, str] = {}  # option name -> the key as written, for messages
    values: dict[str, str] = {}
    for key, value in parameters.items():
        normal = _normal(key)
        if normal in ignored:
            continue
        if normal in options:
            given_options[options[normal]] = value
            written[options[normal]] = key
        elif normal in own:
            values[own[normal]] = value
        else:
            valid = sorted([*OWN_KEYS, *(_camel(name) for name in BridgeOptions.names())])
            raise EngineParameterError(
                f"{SOURCE}: unknown parameter `{key}'; valid parameters are {valid} "
                "(case and underscores do not matter)"
            )
    return EngineParameters(
        _scheduler_file(values.get("SchedulerFile", ""), environ),
        _variables(values.get("Variables")),
        _every(values.get("Every", "1")),
        _options(given_options, written),
        _memory_selections(values.get("MemorySelections", "guard")),
    )


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


def _scheduler_file(given: str, environ: Mapping[str, str]) -> str:
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
