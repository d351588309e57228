"""The launch defaults: ``deisa/templates/defaults.yml``, its overrides and its comments.

The packaged file is a dask configuration file: its keys are ``deisa.run.*``, ``deisa.mpi.*``
and ``deisa.slurm.*``. Every option of ``deisa-run`` falls back to one of them; the comment
after a key is the help of its option (:func:`default_comments`). :func:`load_defaults`
overrides them the way dask settings are overridden, each source over the one before:

1. the packaged file;
2. the dask configuration's ``deisa`` section: the YAML files of dask's configuration
   directories (``~/.config/dask/*.yaml``, ``$DASK_CONFIG``...) and the ``DASK_DEISA__...``
   environment variables (``DASK_DEISA__RUN__WORKERS=3``), as dask read them when it was
   imported, and ``dask.config.set``;
3. ``deisa-run --defaults FILE``: its ``deisa`` section, or sections at its top level.

The command line wins over all of them (:mod:`deisa.launcher.settings`). A key none of them
knows is a :class:`UsageError`, as is a value that its option refuses, naming where it came from
(:meth:`Defaults.origin`).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DEFAULTS_FILE = Path(__file__).resolve().parents[1] / "templates" / "defaults.yml"
NAMESPACE = "deisa"
"""The dask configuration's key of the launch defaults (``DASK_DEISA__...``)."""
PACKAGED = "deisa/templates/defaults.yml"
"""How messages name the packaged file."""


class UsageError(ValueError):
    """Options or configuration files that cannot work together; exit status 2."""


def read_yaml(path: Path, option: str) -> Any:
    """The YAML document in ``path``; an unreadable or invalid file is a usage error of
    ``option`` (e.g. ``"--config FILE"``)."""
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{option}: {exc}") from exc


@cache
def _packaged() -> dict[str, dict[str, Any]]:
    sections: dict[str, dict[str, Any]] = yaml.safe_load(DEFAULTS_FILE.read_text())[NAMESPACE]
    return sections


def env_variable(section: str, key: str) -> str:
    """The environment variable that sets ``deisa.<section>.<key>`` (dask's spelling)."""
    return f"DASK_{NAMESPACE}__{section}__{key}".upper()


class Defaults(dict[str, dict[str, Any]]):
    """``{section: {key: value}}``: the launch defaults in force, with where each came from.

    Attributes
    ----------
    origins
        ``{(section, key): where}`` for the keys that an override set (a file, an environment
        variable, the dask configuration); the others are the packaged file's.
    """

    def __init__(self, sections: dict[str, dict[str, Any]]) -> None:
        super().__init__({section: dict(values) for section, values in sections.items()})
        self.origins: dict[tuple[str, str], str] = {}

    def override(self, sections: Any, where: str, what: str) -> None:
        """Set the keys of ``sections`` (``{section: {key: value}}``), recorded as coming from
        ``where``; ``what`` names the source in errors.

        Raises
        ------
        UsageError
            A section or a key the packaged file does not have.
        """
        if not isinstance(sections, dict):
            raise UsageError(f"{what}: expected sections {sorted(self)}")
        for section, values in sections.items():
            if section not in self or not isinstance(values, dict):
                raise UsageError(
                    f"{what}: unknown section {section!r}; sections are {sorted(self)}"
                )
            # dask spells keys with - or _ alike
            values = {str(key).replace("-", "_"): value for key, value in values.items()}
            unknown = sorted(set(values) - set(self[section]))
            if unknown:
                raise UsageError(
                    f"{what}: unknown key(s) {unknown} in {section!r}; valid keys are "
                    f"{sorted(self[section])}"
                )
            self[section].update(values)
            for key in values:
                self.origins[section, key] = where

    def origin(self, section: str, key: str) -> str:
        """Where ``section.key`` came from, for messages: ``"<where>: <section>.<key>"``."""
        return f"{self.origins.get((section, key), PACKAGED)}: {section}.{key}"


def _dask_overrides() -> dict[str, Any]:
    """The ``deisa`` section of the dask configuration (files, environment, ``set``), with only
    the sections the packaged file has: other ``deisa.*`` keys belong to others."""
    import dask.config

    found = dask.config.get(NAMESPACE, default=None) or {}
    if not isinstance(found, dict):
        raise UsageError(f"the dask configuration's {NAMESPACE!r} must be a mapping of sections")
    return {section: found[section] for section in _packaged() if section in found}


def _dask_origin(section: str, key: str) -> str:
    variable = env_variable(section, key)
    if variable in os.environ:
        return variable
    return f"the dask configuration ({NAMESPACE}.{section}.{key})"


def load_defaults(path: str | Path | None = None) -> Defaults:
    """The packaged launch defaults, overridden by the dask configuration, then by ``path``.

    Parameters
    ----------
    path
        ``--defaults FILE``: a YAML file with a ``deisa`` section (a dask configuration file) or
        the sections ``run``, ``mpi``, ``slurm`` at its top level; only the keys it has change.

    Raises
    ------
    UsageError
        A source is unreadable or has a section or key the packaged file does not.
    """
    defaults = Defaults(_packaged())
    config = _dask_overrides()
    for section, values in config.items():
        if isinstance(values, dict):
            for key in values:
                name = str(key).replace("-", "_")
                defaults.override(
                    {section: {key: values[key]}},
                    _dask_origin(section, name),
                    f"the dask configuration ({NAMESPACE}.{section})",
                )
        else:
            defaults.override({section: values}, "", f"the dask configuration ({NAMESPACE})")
    if path is not None:
        user = read_yaml(Path(path), f"--defaults {path}") or {}
        if isinstance(user, dict) and set(user) == {NAMESPACE}:
            user = user[NAMESPACE] or {}
        defaults.override(user, str(path), f"--defaults {path}")
    return defaults


@cache
def default_comments() -> dict[str, dict[str, str]]:
    """``{section: {key: comment}}`` of the packaged defaults file.

    A section is a line indented by two spaces (under ``deisa:``), a key a line indented by
    four; its comment is the text after its ``#``, followed by the comment-only lines indented
    deeper under it (continuations).
    """
    comments: dict[str, dict[str, str]] = {}
    section: str | None = None
    key: str | None = None
    for line in DEFAULTS_FILE.read_text().splitlines():
        body, _, comment = line.partition("#")
        indent = len(line) - len(line.lstrip())
        if not body.strip():  # a comment line: continues the key above it if indented deeper
            if section and key and indent > 4:
                comments[section][key] += " " + comment.strip()
            else:
                key = None
        elif indent == 2:
            section, key = body.split(":")[0].strip(), None
            comments[section] = {}
        elif indent == 4 and section:
            key = body.split(":")[0].strip()
            comments[section][key] = comment.strip()
        else:
            key = None
    return comments
