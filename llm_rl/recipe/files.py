"""Recipe files: YAML read safely (no tags that build objects), and `extends:` chains merged into one
mapping, with errors naming the file."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from llm_rl.errors import RecipeError


class RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading `3e-4` as a number the way YAML 1.2 does (PyYAML reads a string)."""


RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str) -> Any:
    """Parse YAML text with the recipe loader (no tags that build objects: never code)."""
    return yaml.load(text, Loader=RecipeLoader)  # noqa: S506 - a SafeLoader subclass


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """A YAML file that must hold a mapping, with errors naming the file."""
    if not path.is_file():
        raise RecipeError("recipe file not found", where=str(path))
    try:
        data = parse_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise RecipeError(f"not valid YAML: {err}", where=str(path)) from None
    if not isinstance(data, dict):
        raise RecipeError("a recipe must be a mapping of keys", where=str(path))
    return data


def read_recipe_file(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Parse a YAML recipe and resolve its `extends:` chain into one mapping."""
    path = path.resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise RecipeError(f"extends: cycle ({chain})", where=str(path))
    data = read_yaml_mapping(path)
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    if not isinstance(base_name, str):
        raise RecipeError("extends: must be a file path", where=str(path))
    base = read_recipe_file(path.parent / base_name, (*_seen, path))
    return deep_merge(base, data)


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else (lists included) in `top` replaces `base`."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
