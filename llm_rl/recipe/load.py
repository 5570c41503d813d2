"""Reading a recipe: YAML, `extends:`, `--set` overrides, validation with errors that name the key.

A recipe is YAML. `extends: base.yaml` (relative to the file) deep-merges a base recipe under it, and
`--set dotted.key=value` overrides (the value parsed as YAML) apply last. Every error names the file
and the dotted key.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from transformers.utils import is_liger_kernel_available

from llm_rl.algorithms.registry import ALGORITHMS, known_names
from llm_rl.errors import RecipeError
from llm_rl.generation.backends import check_backend, check_backend_settings
from llm_rl.generation.vllm_settings import check_vllm_host, check_vllm_recipe
from llm_rl.recipe.files import parse_yaml, read_recipe_file
from llm_rl.recipe.schedules import check_schedules
from llm_rl.recipe.schema_errors import describe_validation_error, suggest_key
from llm_rl.recipe.stages import expand_stages
from llm_rl.schema import SHARED_TRL_FIELDS, Recipe


def load_recipe(
    path: str | Path | None, overrides: list[str] | None = None, on_this_host: bool = True
) -> Recipe:
    """Read a recipe file (None: the embedded default), apply `--set` overrides and validate it; with
    `on_this_host`, also that this host can run it (`llm-rl plan` plans for other hosts)."""
    where = str(path) if path is not None else "<default recipe>"
    raw = read_recipe_file(Path(path)) if path is not None else {}
    for override in overrides or []:
        apply_override(raw, override, where)
    recipe = validate_recipe(raw, where)
    if on_this_host:
        check_host(recipe, where)
    return recipe


def load_run_recipe(path: Path) -> Recipe:
    """A run folder's recipe.yaml, for the tools that read the run: validated as written, not checked
    against this host (a run trained on vLLM is served or sampled where vLLM is absent)."""
    return validate_recipe(read_recipe_file(path), str(path), as_source=True)


def check_host(recipe: Recipe, where: str) -> None:
    """What the recipe needs of this host: its generation backend and the packages it switches on.

    Checked when a recipe is loaded to run or validate, not in `llm-rl migrate`: a converted file may run
    elsewhere.
    """
    check_packages_installed(recipe.algorithm, recipe.section(recipe.algorithm), where)
    with naming(where):
        if check_backend(recipe.generation.backend) == "vllm":
            check_vllm_host(recipe)


# The two ways to give a run's length; a recipe gives one.
BUDGET_KEYS = {"max_steps", "total_samples"}


def apply_override(raw: dict[str, Any], override: str, where: str) -> None:
    """Apply one `dotted.key=value` override in place; the value is parsed as YAML."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise RecipeError(f"--set {override!r}: expected dotted.key=value", where=where)
    try:
        value = parse_yaml(text)
    except yaml.YAMLError as err:
        raise RecipeError(f"--set {key}: value is not valid YAML: {err}", where=where) from None
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise RecipeError(f"--set {key}: {part!r} is not a section", where=where)
        node = child
    node[parts[-1]] = value
    if parts[0] == "training" and len(parts) == 2 and parts[1] in BUDGET_KEYS and value is not None:
        # A budget given on the command line replaces the recipe's, in whichever unit it was given.
        for other in BUDGET_KEYS - {parts[1]}:
            node.pop(other, None)


def validate_recipe(raw: dict[str, Any], where: str, as_source: bool = False) -> Recipe:
    """Build the typed recipe, turning the first schema error into a message naming the key.

    `as_source`: a recipe `llm-rl migrate` converts, which ran elsewhere: its keys and values are
    checked, not how its algorithm would batch it on this machine's processes."""
    check_top_level(raw, where)
    check_finite(raw, where)
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as err:
        raise RecipeError(describe_validation_error(err), where=where) from None
    check_algorithm_sections(recipe, where)
    check_beyond_schema(recipe, where, as_source)
    return recipe


def check_top_level(raw: dict[str, Any], where: str) -> None:
    """The algorithm is one the registry lists, and every other top-level key is a shared section or an
    algorithm's section (a mapping)."""
    algorithm = raw.get("algorithm", Recipe.model_fields["algorithm"].default)
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise RecipeError(f"algorithm: input should be {known_names()}, got {algorithm!r}", where=where)
    for key, value in raw.items():
        if not isinstance(key, str):
            raise RecipeError(f"[{key}]: keys should be strings", where=where)
        if key in ALGORITHMS:
            if not isinstance(value, dict):
                raise RecipeError(f"{key}: input should be a valid dictionary, got {value!r}", where=where)
            for inner in value:
                if not isinstance(inner, str):
                    raise RecipeError(f"{key}[{inner}]: keys should be strings", where=where)
        elif key not in Recipe.model_fields:
            suggestion = suggest_key(Recipe, [key], extra=list(ALGORITHMS))
            hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
            raise RecipeError(f"{key}: unknown key{hint}", where=where)


def check_finite(value: Any, where: str, key: str = "") -> None:
    """No NaN or infinity anywhere in a recipe: a NaN weight makes every reward NaN, and trains on."""
    if isinstance(value, float) and not math.isfinite(value):
        raise RecipeError(f"{key}: {value} is not a finite number", where=where)
    if isinstance(value, dict):
        for name, inner in value.items():
            check_finite(inner, where, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            check_finite(inner, where, f"{key}[{index}]")


def check_algorithm_sections(recipe: Recipe, where: str) -> None:
    """Each algorithm section the recipe has, active or not: no key of a shared section, then the
    algorithm's own checks of its keys."""
    for name, algorithm in ALGORITHMS.items():
        section = recipe.section(name)
        if not section:
            continue
        for key in section:
            if key in SHARED_TRL_FIELDS:
                raise RecipeError(
                    f"{name}.{key}: set by the shared section; use {SHARED_TRL_FIELDS[key]} instead",
                    where=where,
                )
        with naming(where):
            algorithm.check_section(section, recipe)


# Trainer fields that switch on an optional package -> (the package to install, whether it is installed).
OPTIONAL_PACKAGES: dict[str, tuple[str, Callable[[], bool]]] = {
    "use_liger_kernel": ("liger-kernel", is_liger_kernel_available),
}


def check_packages_installed(name: str, section: dict[str, Any], where: str) -> None:
    """A switch the run's trainer would act on at start-up, refused now if its package is missing."""
    for key, (package, installed) in OPTIONAL_PACKAGES.items():
        if section.get(key) and not installed():
            raise RecipeError(
                f"{name}.{key}: {package} is not installed here; install it or set {name}.{key}: false",
                where=where,
            )


@contextlib.contextmanager
def naming(where: str) -> Iterator[None]:
    """Adds the file to a `RecipeError` raised without one."""
    try:
        yield
    except RecipeError as err:
        if err.where is not None:
            raise
        raise RecipeError(str(err), where=where) from None


def check_beyond_schema(recipe: Recipe, where: str, as_source: bool = False) -> None:
    """The rules that need more than the schema: the generation backend's and the algorithm's, the
    schedules', and each stage as a whole recipe (for a migration's source, which ran elsewhere: not its
    algorithm's batch arithmetic on this machine, nor its stages). The rules between the shared sections'
    keys are the schema's own validators (`llm_rl.schema`)."""
    with naming(where):
        check_backend_settings(recipe.generation.backend, recipe.generation.min_new_tokens)
    if not as_source:
        with naming(where):
            check_vllm_recipe(recipe)
            ALGORITHMS[recipe.algorithm].check_recipe(recipe)
    check_schedules(recipe, where)
    if recipe.stages and not as_source:
        expand_stages(recipe, where, validate_recipe)
