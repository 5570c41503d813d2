"""The account `llm-rl migrate` gives: one row per source key (where it went, or why it has no
counterpart), and the dotted-key helpers both of its steps (the flat TRL import, the conversion) use."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class KeyFate:
    """One row of the migration table: a source key, its value, where it went and why."""

    source: str
    value: Any
    target: str
    note: str = ""
    warning: bool = False


@dataclass
class Migration:
    """The converted recipe (plain data, ready for YAML) and the fate of every source key."""

    recipe: dict[str, Any]
    rows: list[KeyFate] = field(default_factory=list)

    def keep(self, source: str, value: Any, target: str, note: str = "") -> None:
        self.rows.append(KeyFate(source, value, target, note))

    def warn(self, source: str, value: Any, note: str, target: str = "-") -> None:
        self.rows.append(KeyFate(source, value, target, note, warning=True))

    @property
    def warnings(self) -> list[KeyFate]:
        return [row for row in self.rows if row.warning]

    def table(self) -> str:
        """The rows as an aligned text table; warnings are marked with `!`."""
        cells = [("", "source key", "value", "became", "note")]
        cells += [("!" if r.warning else "", r.source, short(r.value), r.target, r.note) for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(4)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
            for row in cells
        ]
        return "\n".join(line.rstrip() for line in lines)


def short(value: Any, limit: int = 40) -> str:
    """A value as one short line of text (JSON for anything but strings)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def leaves(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) for every non-mapping value; lists are leaves."""
    found = []
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            found += leaves(value, f"{dotted}.")
        else:
            found.append((dotted, value))
    return found


def put(mapping: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted key in a nested mapping, creating sections on the way."""
    *sections, last = dotted.split(".")
    for name in sections:
        mapping = mapping.setdefault(name, {})
    mapping[last] = value


def get(mapping: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """A dotted key of a nested mapping, or `default`."""
    for name in dotted.split("."):
        if not isinstance(mapping, dict) or name not in mapping:
            return default
        mapping = mapping[name]
    return mapping


def remove(mapping: dict[str, Any], dotted: str) -> None:
    """Remove a dotted key from a nested mapping, with the sections it leaves empty."""
    name, _, rest = dotted.partition(".")
    if not rest:
        mapping.pop(name, None)
        return
    inner = mapping.get(name)
    if isinstance(inner, dict):
        remove(inner, rest)
        if not inner:
            del mapping[name]
