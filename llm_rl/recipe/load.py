"""Reading a recipe: YAML, `extends:`, `--set` overrides, validation with errors that name the key.

A recipe is YAML. `extends: base.yaml` (relative to the file) deep-merges a base recipe under it, and
`--set dotted.key=value` overrides (the value parsed as YAML) apply last. Every error names the file
and the dotted key.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from llm_rl.algorithms.ppo.settings import PPO_REFUSED_KEYS, PPOSettings, ppo_settings
from llm_rl.errors import RecipeError, did_you_mean
from llm_rl.run_folder import stage_folder
from llm_rl.schema import SHARED_TRL_FIELDS, Recipe, Schedule

# ----------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------


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


def load_recipe(path: str | Path | None, overrides: list[str] | None = None) -> Recipe:
    """Read a recipe file (None: the embedded default), apply `--set` overrides and validate it."""
    where = str(path) if path is not None else "<default recipe>"
    raw = read_recipe_file(Path(path)) if path is not None else {}
    for override in overrides or []:
        apply_override(raw, override, where)
    return validate_recipe(raw, where)


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


def validate_recipe(raw: dict[str, Any], where: str) -> Recipe:
    """Build the typed recipe, turning the first schema error into a message naming the key."""
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as err:
        raise RecipeError(describe_validation_error(err), where=where) from None
    check_trl_sections(recipe, where)
    check_cross_fields(recipe, where)
    return recipe


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


def suggest_key(model: type[BaseModel], loc: list[str]) -> str | None:
    """The closest valid key to an unknown one, found by walking the schema to its section."""
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
    matches = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.6)
    return matches[0] if matches else None


def training_argument_fields() -> frozenset[str]:
    """The fields of transformers' `TrainingArguments` that a config can take."""
    from transformers import TrainingArguments

    return frozenset(f.name for f in dataclasses.fields(TrainingArguments) if f.init)


def section_fields(algorithm: str) -> frozenset[str]:
    """The keys an algorithm's section takes: GRPOConfig's fields for `grpo:`; for `ppo:`, the PPO keys
    of our schema and the fields of `TrainingArguments`, less those refused."""
    if algorithm == "grpo":
        from trl import GRPOConfig

        return frozenset(f.name for f in dataclasses.fields(GRPOConfig) if f.init)
    return (frozenset(PPOSettings.model_fields) | training_argument_fields()) - PPO_REFUSED_KEYS.keys()


def check_trl_sections(recipe: Recipe, where: str) -> None:
    """`grpo:` keys must be fields of TRL's GRPOConfig, `ppo:` keys PPO keys of ours (`PPOSettings`) or
    `TrainingArguments` fields; neither may be a shared-section key."""
    for algorithm in ("grpo", "ppo"):
        section: dict[str, Any] = getattr(recipe, algorithm)
        if not section:
            continue
        fields = section_fields(algorithm)
        for key in section:
            if algorithm == "ppo" and key in PPO_REFUSED_KEYS:
                raise RecipeError(
                    f"ppo.{key}: not used by llm_rl's PPO: {PPO_REFUSED_KEYS[key]}", where=where
                )
            if key in SHARED_TRL_FIELDS:
                raise RecipeError(
                    f"{algorithm}.{key}: set by the shared section; use {SHARED_TRL_FIELDS[key]} instead",
                    where=where,
                )
            if key not in fields:
                if algorithm == "grpo":
                    raise RecipeError(
                        f"grpo.{key}: not a field of TRL's GRPOConfig{did_you_mean(key, sorted(fields))}",
                        where=where,
                    )
                # Suggest the PPO keys first: a misspelt PPO key is likelier than a TrainingArguments field.
                hint = did_you_mean(
                    key, [*PPOSettings.model_fields, *sorted(fields - PPOSettings.model_fields.keys())]
                )
                raise RecipeError(
                    f"ppo.{key}: not a PPO key (TRL's PPOConfig names, llm_rl's own, or TrainingArguments "
                    f"fields){hint}",
                    where=where,
                )
    if recipe.ppo:
        try:
            ppo_settings(recipe)
        except RecipeError as err:
            raise RecipeError(str(err), where=where) from None


def check_cross_fields(recipe: Recipe, where: str) -> None:
    """Settings that are valid alone but conflict together, each with the reason."""
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
    if recipe.early_stopping.enabled and recipe.early_stopping.patience < 1:
        raise RecipeError("early_stopping.patience must be at least 1", where=where)
    every = recipe.evaluation.every
    if every is not None and every % training.logging_steps:
        raise RecipeError(
            f"evaluation.every ({every}) must be a multiple of training.logging_steps "
            f"({training.logging_steps}): eval metrics join the logged row of their update",
            where=where,
        )
    if recipe.early_stopping.metric.startswith("eval/") and every is None:
        raise RecipeError(
            f"early_stopping.metric {recipe.early_stopping.metric!r} is an eval metric, but "
            "evaluation.every is not set, so it is never measured",
            where=where,
        )
    resume = recipe.checkpointing.resume
    if resume not in ("auto", "never") and not Path(resume).exists():
        raise RecipeError(
            f"checkpointing.resume: {resume!r} is neither 'auto', 'never' nor an existing checkpoint",
            where=where,
        )
    if recipe.algorithm == "grpo":
        check_grpo_batches(recipe, where)
    check_advantages(recipe, where)
    check_schedules(recipe, where)
    if recipe.stages:
        stage_recipes(recipe, recipe.output_dir, where)
    names = [r.metric_name for r in recipe.rewards]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise RecipeError(
            f"rewards: {sorted(duplicates)[0]!r} appears twice; give one of them an alias",
            where=where,
        )


def check_grpo_batches(recipe: Recipe, where: str) -> None:
    """GRPO forms groups of num_generations completions; the generation batch must hold whole groups."""
    group = recipe.grpo.get("num_generations", 8)
    if not isinstance(group, int) or group < 2:
        raise RecipeError(
            "grpo.num_generations: must be an integer of at least 2 (advantages are relative to the group)",
            where=where,
        )
    training = recipe.training
    steps_per_generation = recipe.grpo.get("steps_per_generation") or training.gradient_accumulation_steps
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    generation_batch = recipe.grpo.get("generation_batch_size") or (
        training.per_device_batch_size * steps_per_generation * world_size
    )
    if generation_batch % group:
        raise RecipeError(
            f"grpo.num_generations: the generation batch of {generation_batch} completions "
            f"(training.per_device_batch_size x steps per generation x {world_size} processes) is not "
            f"a multiple of the group "
            f"size {group}; each prompt's {group} completions must be generated together",
            where=where,
        )


def check_advantages(recipe: Recipe, where: str) -> None:
    """`advantages:` against the algorithm, and against the TRL keys that say the same thing."""
    advantages = recipe.advantages
    if recipe.algorithm == "ppo" and advantages.normalize == "group":
        raise RecipeError(
            "advantages.normalize: 'group' needs GRPO's groups of completions per prompt; "
            "PPO samples one completion per prompt: use 'batch' or 'none'",
            where=where,
        )
    if advantages.normalize != "auto" and "scale_rewards" in recipe.grpo:
        raise RecipeError(
            "advantages.normalize and grpo.scale_rewards both set: they are the same setting; keep one",
            where=where,
        )
    if advantages.whiten_rewards and "whiten_rewards" in recipe.ppo:
        raise RecipeError(
            "advantages.whiten_rewards and ppo.whiten_rewards both set: they are the same setting; keep one",
            where=where,
        )


# Scalar settings the trainers read at every update, by algorithm: the keys `schedules:` accepts.
SCHEDULABLE = {
    "grpo": ("grpo.beta", "grpo.epsilon", "generation.temperature"),
    "ppo": (
        "ppo.cliprange",
        "ppo.cliprange_value",
        "ppo.kl_coef",
        "ppo.lam",
        "ppo.gamma",
        "ppo.vf_coef",
        "ppo.entropy_coef",
        "generation.temperature",
    ),
}


def active_schedules(recipe: Recipe) -> dict[str, Schedule]:
    """The schedules this recipe's algorithm reads; the other algorithm's keys wait for a swap, like its section."""
    return {key: value for key, value in recipe.schedules.items() if key in SCHEDULABLE[recipe.algorithm]}


def check_schedules(recipe: Recipe, where: str) -> None:
    """Each schedule names a setting a trainer reads every update, set in one place only."""
    every_key = {key for keys in SCHEDULABLE.values() for key in keys}
    for key, schedule in recipe.schedules.items():
        if key not in every_key:
            hint = did_you_mean(key, sorted(every_key))
            raise RecipeError(
                f"schedules.{key}: not a setting that can follow a schedule{hint}; "
                f"GRPO: {', '.join(SCHEDULABLE['grpo'])}; PPO: {', '.join(SCHEDULABLE['ppo'])}",
                where=where,
            )
        section, _, field = key.partition(".")
        if section in ("grpo", "ppo") and field in getattr(recipe, section):
            raise RecipeError(
                f"schedules.{key}: {key} is also set as a value; give it one or the other", where=where
            )
        if key == "grpo.beta" and recipe.algorithm == "grpo" and schedule.value_at(0) <= 0:
            raise RecipeError(
                "schedules.grpo.beta: must start above 0: GRPO builds its reference model only when "
                "beta is above 0 at the start",
                where=where,
            )
        if key == "generation.temperature" and recipe.grpo.get("use_vllm") and recipe.algorithm == "grpo":
            raise RecipeError(
                "schedules.generation.temperature: vLLM reads the temperature once at start-up; "
                "schedule it without grpo.use_vllm or keep it constant",
                where=where,
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
