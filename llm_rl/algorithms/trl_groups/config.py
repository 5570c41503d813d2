"""A TRL group trainer's config from a recipe: the shared sections under TRL's field names, its own
section passed through by field name, and the batch arithmetic that follows from them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from llm_rl.algorithms.base import Counterpart
from llm_rl.errors import RecipeError
from llm_rl.generation.backends import resolve_backend
from llm_rl.schema import Recipe
from llm_rl.training.args import shared_training_args, world_size
from llm_rl.training.schedules import start_values

if TYPE_CHECKING:
    from transformers import TrainingArguments

METRIC_NAMES = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "reward/group_std": "reward/group_std",
    "group_size": "group_size",
    "frac_reward_zero_std": "reward/frac_zero_std",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "loss": "loss/policy",
    "learning_rate": "learning_rate",
    "completions/mean_length": "completion_length/mean",
    "completions/clipped_ratio": "completion_length/clipped_ratio",
    "entropy": "entropy",
    "clip_ratio/region_mean": "policy/clipfrac",
}


def schedulable(name: str) -> tuple[str, ...]:
    """The settings a group trainer reads every update: its KL weight, its clip range, the temperature."""
    return (f"{name}.beta", f"{name}.epsilon", "generation.temperature")


def config_fields(config_class: type) -> frozenset[str]:
    """The fields a TRL config dataclass takes."""
    return frozenset(f.name for f in dataclasses.fields(config_class) if f.init)


def field_default(config_class: type, name: str) -> Any:
    """A TRL config field's default, as the trainer reads it when a recipe leaves the field out."""
    field = next(f for f in dataclasses.fields(config_class) if f.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def counterparts(config_class: type, kl_meaning: str) -> dict[str, Counterpart]:
    """The KL weight, clip range and epochs of a TRL group trainer under their TRL names and defaults,
    for `llm-rl migrate`."""
    return {
        "kl_coefficient": Counterpart("beta", field_default(config_class, "beta"), kl_meaning),
        "clip_range": Counterpart(
            "epsilon", field_default(config_class, "epsilon"), "the ratio clip of the policy loss"
        ),
        "epochs": Counterpart(
            "num_iterations",
            field_default(config_class, "num_iterations"),
            "passes over each batch of generations",
        ),
    }


def samples_per_step(recipe: Recipe, name: str) -> int:
    """New prompt-completion pairs per optimizer update, over all processes.

    Each update trains on `per_device_batch_size x gradient_accumulation_steps` completions per process;
    with `num_iterations` > 1 each generated completion is trained on that many times.
    """
    training = recipe.training
    per_update = training.per_device_batch_size * training.gradient_accumulation_steps * world_size()
    return max(1, per_update // recipe.section(name).get("num_iterations", 1))


def trainer_config(
    recipe: Recipe, name: str, config_class: type, advantage_fields: dict[str, Any]
) -> TrainingArguments:
    """The TRL config for a recipe: shared sections first, then the advantage settings, then the
    recipe's own section, then the scheduled settings at their start."""
    generation = recipe.generation
    schedules = schedulable(name)
    fields: dict[str, Any] = shared_training_args(recipe, samples_per_step(recipe, name))
    fields.update(
        max_completion_length=generation.max_new_tokens,
        temperature=generation.temperature,
        top_p=generation.top_p,
        # Unset is TRL's 0 (no top-k): None would let transformers fill in the model's own (50 by default).
        top_k=generation.top_k or 0,
        reward_weights=[entry.weight for entry in recipe.rewards],
        trust_remote_code=recipe.model.trust_remote_code,
        **generation_fields(recipe, config_class),
    )
    fields.update(advantage_fields)
    fields.update(recipe.section(name))
    fields.update(start_values(recipe, schedules))
    if generation.min_new_tokens is not None:
        fields["generation_kwargs"] = {
            "min_new_tokens": generation.min_new_tokens,
            **(fields.get("generation_kwargs") or {}),
        }
    try:
        return config_class(**fields)
    except (ValueError, TypeError) as err:
        raise RecipeError(f"{name}: TRL's {config_class.__name__} rejects these settings: {err}") from None


def generation_fields(recipe: Recipe, config_class: type) -> dict[str, Any]:
    """TRL's fields for `generation.backend` and `generation.batch_size`.

    `static` is TRL's `cache_implementation`; TRL builds its `GenerationConfig` with compilation off, so
    `build_trainer` turns transformers' compiled generation on afterwards (`compiled_generation`).
    `paged` is TRL's `use_transformers_continuous_batching`. `vllm` is TRL's vLLM settings (`vllm_fields`).
    """
    generation = recipe.generation
    fields: dict[str, Any] = {}
    backend = resolve_backend(generation.backend)
    if backend == "static":
        fields["cache_implementation"] = "static"
    elif backend == "paged":
        fields["use_transformers_continuous_batching"] = True
    elif backend == "vllm":
        fields.update(vllm_fields(recipe, config_class))
    if generation.batch_size is not None:
        fields["generation_batch_size"] = generation.batch_size * world_size()
    return fields


def vllm_fields(recipe: Recipe, config_class: type) -> dict[str, Any]:
    """`generation.vllm` under TRL's names.

    In server mode TRL's own vLLM generation runs (`use_vllm`). A colocated engine is llm_rl's: the trainer
    is built without one, and `build_trainer` attaches it (`attach_colocated_vllm`).
    """
    section = recipe.generation.vllm
    fields: dict[str, Any] = {
        "use_vllm": section.mode == "server",
        "vllm_mode": section.mode,
        "vllm_gpu_memory_utilization": section.gpu_memory_utilization,
        "vllm_tensor_parallel_size": section.tensor_parallel_size,
        "vllm_enable_sleep_mode": section.sleep_mode,
        "vllm_max_model_length": section.max_model_length,
        "vllm_server_base_url": section.server_base_url,
        "vllm_server_host": section.server_host,
        "vllm_server_port": section.server_port,
        "vllm_server_timeout": section.server_timeout,
        "vllm_group_port": section.group_port,
    }
    if section.importance_sampling is not None:
        fields["vllm_importance_sampling_correction"] = section.importance_sampling
    known = config_fields(config_class)
    return {key: value for key, value in fields.items() if key in known}


def generation_batch(recipe: Recipe, name: str) -> int:
    """Sequences generated at once on one GPU: `generation.batch_size`, or a micro-batch for each step of a
    generation."""
    training = recipe.training
    if recipe.generation.batch_size is not None:
        return recipe.generation.batch_size
    return training.per_device_batch_size * (
        recipe.section(name).get("steps_per_generation") or training.gradient_accumulation_steps
    )
