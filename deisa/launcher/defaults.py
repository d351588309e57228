"""The launch defaults: ``deisa/templates/defaults.yml``, its overrides and its comments.

Every option of ``deisa-run`` falls back to a key of this file; the comment after a key is the
help of its option (:func:`default_comments`). ``deisa-run --defaults FILE`` overrides keys
section by section (:func:`load_defaults`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

DEFAULTS_FILE = Path(__file__).resolve().parents[1] / "templates" / "defaults.yml"


class UsageError(ValueError):
    """Options or configuration files that cannot work together; exit status 2."""


def read_yaml(path: Path, option: str) -> Any:
    """The YAML document in ``path``; an unreadable or invalid file is a usage error of
    ``option`` (e.g. ``"--config FILE"``)."""
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{option}: {exc}") from exc


def load_defaults(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The packaged launch defaults, updated section by section with those of ``path``.

    Raises
    ------
    UsageError
        ``path`` is unreadable or has a section or key the packaged file does not.
    """
    defaults: dict[str, dict[str, Any]] = yaml.safe_load(DEFAULTS_FILE.read_text())
    if path is None:
        return defaults
    user = read_yaml(Path(path), f"--defaults {path}") or {}
    if not isinstance(user, dict):
        raise UsageError(f"--defaults {path}: expected sections {sorted(defaults)}")
    for section, values in user.items():
        if section not in defaults or not isinstance(values, dict):
            raise UsageError(
                f"--defaults {path}: unknown section {section!r}; sections are {sorted(defaults)}"
            )
        unknown = sorted(set(values) - set(defaults[section]))
        if unknown:
            raise UsageError(
                f"--defaults {path}: unknown key(s) {unknown} in {section!r}; valid keys are "
                f"{sorted(defaults[section])}"
            )
        defaults[section].update(values)
    return defaults


@cache
def default_comments() -> dict[str, dict[str, str]]:
    """``{section: {key: comment}}`` of the packaged defaults file.

    A key is a line indented by two spaces; its comment is the text after its ``#``, followed
    by the comment-only lines indented deeper under it (continuations).
    """
    comments: dict[str, dict[str, str]] = {}
    section: str | None = None
    key: str | None = None
    for line in DEFAULTS_FILE.read_text().splitlines():
        body, _, comment = line.partition("#")
        indent = len(line) - len(line.lstrip())
        if not body.strip():  # a comment line: continues the key above it if indented deeper
            if section and key and indent > 2:
                comments[section][key] += " " + comment.strip()
            else:
                key = None
        elif indent == 0:
            section, key = body.split(":")[0], None
            comments[section] = {}
        elif indent == 2 and section:
            key = body.split(":")[0].strip()
            comments[section][key] = comment.strip()
        else:
            key = None
    return comments
