"""Reading a recipe: YAML, `extends:`, `--set` overrides, validation with errors that name the key.

A recipe is YAML. `extends: base.yaml` (relative to the file) deep-merges a base recipe under it, and
`--set dotted.key=value` overrides (the value parsed as YAML) apply last. Every error names the file
and the dotted key.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from transformers.utils import is_liger_kernel_available

from llm_rl.algorithms.registry import ALGORITHMS, known_names
from llm_rl.errors import RecipeError, did_you_mean
from llm_rl.generation.backends import check_backend, check_backend_settings
from llm_rl.generation.vllm_settings import check_vllm_host, check_vllm_recipe
from llm_rl.run_folder import stage_folder
from llm_rl.schema import SHARED_TRL_FIELDS, DataSection, Recipe


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
    check_cross_fields(recipe, where, as_source)
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


def describe_validation_error(err: ValidationError, schema: type[BaseModel] | None = None) -> str:
    """One sentence for the first error: the dotted key, what is wrong, and a suggestion from `schema`."""
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    dotted = format_location(loc)
    if first["type"] == "extra_forbidden":
        suggestion = suggest_key(schema or Recipe, loc)
        hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
        return f"{dotted}: unknown key{hint}"
    given = first.get("input")
    if first["type"].endswith("_type") or first["type"] in {"literal_error", "model_type"}:
        return f"{dotted}: {first['msg'].lower()}, got {given!r}"
    return f"{dotted}: {first['msg'].lower()}"


def format_location(loc: list[str]) -> str:
    """['rewards', '0', 'weight'] -> 'rewards[0].weight'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text


# Names users bring from other tools, for keys that difflib would not find.
KEY_SYNONYMS = {
    "rank": "r",
    "lora_r": "r",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "lr": "learning_rate",
    "model_name_or_path": "policy",
    "batch_size": "per_device_batch_size",
    "per_device_train_batch_size": "per_device_batch_size",
    "max_completion_length": "max_new_tokens",
    "save_steps": "every",
}


def suggest_key(model: type[BaseModel], loc: list[str], extra: list[str] | None = None) -> str | None:
    """The closest valid key to an unknown one, found by walking the schema to its section (`extra`:
    more keys the section takes)."""
    for part in loc[:-1]:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        inner = getattr(annotation, "__args__", (annotation,))
        sections = [t for t in inner if isinstance(t, type) and issubclass(t, BaseModel)]
        if not sections:
            return None
        model = sections[0]
    synonym = KEY_SYNONYMS.get(loc[-1])
    if synonym in model.model_fields:
        return synonym
    matches = difflib.get_close_matches(loc[-1], [*model.model_fields, *(extra or [])], n=1, cutoff=0.6)
    return matches[0] if matches else None


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


def check_cross_fields(recipe: Recipe, where: str, as_source: bool = False) -> None:
    """Settings that are valid alone but conflict together, each with the reason (for a migration's
    source, all but its algorithm's batch arithmetic)."""
    training = recipe.training
    if training.max_steps is not None and training.total_samples is not None:
        raise RecipeError(
            "training.max_steps and training.total_samples both set: give one budget, "
            "in updates or in samples",
            where=where,
        )
    generation = recipe.generation
    if generation.min_new_tokens is not None and generation.min_new_tokens > generation.max_new_tokens:
        raise RecipeError(
            f"generation.min_new_tokens ({generation.min_new_tokens}) is above "
            f"generation.max_new_tokens ({generation.max_new_tokens})",
            where=where,
        )
    with naming(where):
        check_backend_settings(generation.backend, generation.min_new_tokens)
    every = recipe.evaluation.every
    if every is not None and every % training.logging_steps:
        raise RecipeError(
            f"evaluation.every ({every}) must be a multiple of training.logging_steps "
            f"({training.logging_steps}): eval metrics join the logged row of their update",
            where=where,
        )
    if recipe.early_stopping.enabled and recipe.early_stopping.metric.startswith("eval/") and every is None:
        raise RecipeError(
            f"early_stopping.metric {recipe.early_stopping.metric!r} is an eval metric, but "
            "evaluation.every is not set, so it is never measured",
            where=where,
        )
    check_data(recipe.data, where)
    resume = recipe.checkpointing.resume
    if resume not in ("auto", "never") and not Path(resume).exists():
        raise RecipeError(
            f"checkpointing.resume: {resume!r} is neither 'auto', 'never' nor an existing checkpoint",
            where=where,
        )
    if not as_source:
        with naming(where):
            check_vllm_recipe(recipe)
            ALGORITHMS[recipe.algorithm].check_recipe(recipe)
    check_schedules(recipe, where)
    if recipe.stages and not as_source:
        stage_recipes(recipe, recipe.output_dir, where)
    names = [r.metric_name for r in recipe.rewards]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise RecipeError(
            f"rewards: {sorted(duplicates)[0]!r} appears twice; give one of them an alias",
            where=where,
        )


def check_data(data: DataSection, where: str) -> None:
    """One way of naming the train data and one of naming the held-out prompts."""
    if data.sources is not None:
        if not data.sources:
            raise RecipeError("data.sources: give at least one dataset, or use data.source", where=where)
        both = sorted({"source", "split", "config"} & data.model_fields_set)
        if both:
            raise RecipeError(
                f"data.sources and data.{both[0]} both set: a mixture names each dataset's source, split "
                "and config in its own entry",
                where=where,
            )
        weighted = [entry.weight is not None for entry in data.sources]
        if any(weighted) and not all(weighted):
            unweighted = weighted.index(False)
            raise RecipeError(
                f"data.sources[{unweighted}].weight: set a weight on every source or on none",
                where=where,
            )
        if data.eval_split is not None:
            raise RecipeError(
                "data.eval_split names a split of data.source; for a mixture hold prompts out with "
                "data.eval_size",
                where=where,
            )
    if data.eval_split is not None and data.eval_size is not None:
        raise RecipeError(
            "data.eval_split and data.eval_size both set: take held-out prompts from a split or from "
            "the train set, not both",
            where=where,
        )
    if isinstance(data.eval_size, float) and data.eval_size >= 1:
        raise RecipeError(
            f"data.eval_size: {data.eval_size} is neither a fraction below 1 nor a whole number of rows",
            where=where,
        )


def check_schedules(recipe: Recipe, where: str) -> None:
    """Each schedule names a setting some algorithm's trainer reads every update, set in one place only."""
    every_key = {key for algorithm in ALGORITHMS.values() for key in algorithm.SCHEDULABLE}
    for key in recipe.schedules:
        if key not in every_key:
            hint = did_you_mean(key, sorted(every_key))
            per_algorithm = "; ".join(
                f"{name.upper()}: {', '.join(algorithm.SCHEDULABLE)}"
                for name, algorithm in ALGORITHMS.items()
            )
            raise RecipeError(
                f"schedules.{key}: not a setting that can follow a schedule{hint}; {per_algorithm}",
                where=where,
            )
        section, _, field = key.partition(".")
        if field in recipe.section(section):
            raise RecipeError(
                f"schedules.{key}: {key} is also set as a value; give it one or the other", where=where
            )


# Keys a stage may not override: a stage continues the run's policy in the run's folder.
STAGE_FIXED_KEYS = {
    "run": "stages share the run's name, folder and seed",
    "model": "a stage continues the previous stage's policy; model settings are the recipe's",
    "stages": "stages do not nest",
    "extends": "extends belongs at the top of a recipe file",
}
STAGE_FIXED_DOTTED = {
    "training.max_steps": "give the stage's budget as its own max_steps or total_samples",
    "training.total_samples": "give the stage's budget as its own max_steps or total_samples",
    "checkpointing.resume": "a staged run resumes stage by stage by itself",
}


def stage_recipes(recipe: Recipe, run_folder: Path, where: str) -> list[Recipe]:
    """Every stage as a whole recipe (the recipe, its overrides, its budget, its folder), each validated."""
    names = [stage.name for stage in recipe.stages]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise RecipeError(f"stages: the name {repeated[0]!r} is used twice", where=where)
    base = {key: value for key, value in recipe.to_dict().items() if key != "stages"}
    recipes = []
    for index, stage in enumerate(recipe.stages):
        label = f"stages[{index}] ({stage.name})"
        if (stage.max_steps is None) == (stage.total_samples is None):
            raise RecipeError(f"{label}: give one budget, max_steps or total_samples", where=where)
        for key, reason in STAGE_FIXED_KEYS.items():
            if key in stage.overrides:
                raise RecipeError(f"{label}.overrides.{key}: cannot change in a stage: {reason}", where=where)
        for dotted, reason in STAGE_FIXED_DOTTED.items():
            section, _, field = dotted.partition(".")
            if field in (stage.overrides.get(section) or {}):
                raise RecipeError(f"{label}.overrides.{dotted}: {reason}", where=where)
        raw = deep_merge(base, stage.overrides)
        raw["training"].update(max_steps=stage.max_steps, total_samples=stage.total_samples)
        raw["run"]["output_dir"] = str(stage_folder(run_folder, index, stage.name))
        raw["checkpointing"]["resume"] = "auto"
        recipes.append(validate_recipe(raw, f"{where}: {label}"))
    return recipes
