"""An environment's ``spec.configuration`` as variables of its agents' instructions.

A placeholder is ``{{name}}`` (spaces inside the braces allowed: ``{{ name }}``), where ``name`` is letters,
digits, ``_``, ``-`` and ``.``. It is replaced by the environment's ``configuration[name]``: a string as it is;
a number, boolean, list or object as its compact JSON text (``42``, ``true``, ``["a","b"]``). A placeholder
with no value (no such key, or ``null``) is left as written. ``\\{{name}}`` is written as ``{{name}}``
without substitution. Any other braces (JSON examples, ``{single}``, ``{{ two words }}``) are text.
Pure functions; the runtime renders each agent once per (content, environment resourceVersion).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

PLACEHOLDER = re.compile(r"(\\?)\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}")


def variables(configuration: Mapping[str, Any] | None) -> dict[str, str]:
    """The text of each configuration value; ``null`` values are not variables."""
    found: dict[str, str] = {}
    for name, value in (configuration or {}).items():
        if value is None:
            continue
        found[str(name)] = value if isinstance(value, str) else orjson.dumps(value).decode()
    return found


def render(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each placeholder that has a value replaced (see the module's rule)."""
    if "{{" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        if match.group(1):
            return match.group(0)[1:]
        value = values.get(match.group(2))
        return match.group(0) if value is None else value

    return PLACEHOLDER.sub(replace, text)
