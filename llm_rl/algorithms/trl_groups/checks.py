"""The recipe checks every TRL group trainer makes: its section's keys, the generation settings, whole
groups in every generation batch, and the settings only some TRL configs take."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llm_rl.algorithms.trl_groups.config import config_fields, generation_batch
from llm_rl.errors import RecipeError, did_you_mean
from llm_rl.schema import Recipe
from llm_rl.training.args import world_size

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def check_fields(name: str, section: dict[str, Any], config_class: type) -> None:
    """Every key of the section is a field of the TRL config."""
    fields = config_fields(config_class)
    for key in section:
        if key not in fields:
            raise RecipeError(
                f"{name}.{key}: not a field of TRL's {config_class.__name__}{did_you_mean(key, sorted(fields))}"
            )


def group_size(section: dict[str, Any], default: int) -> Any:
    """Completions per prompt (TRL's `num_generations`)."""
    return section.get("num_generations", default)


# The TRL fields `generation.backend` sets, and those `generation.batch_size` sets.
BACKEND_FIELDS = ("cache_implementation", "use_transformers_continuous_batching", "use_transformers_paged")
BATCH_FIELDS = ("generation_batch_size", "steps_per_generation")


def check_generation(recipe: Recipe, name: str) -> None:
    """`generation.backend` and `generation.batch_size` against the section's own TRL keys for the same
    thing, and the rollout batch against the training micro-batch.

    `generation.batch_size` is TRL's `generation_batch_size` per process: completions generated at once,
    which TRL then trains on in `generation.batch_size / training.per_device_batch_size` micro-batches
    (its `steps_per_generation`), so it must hold whole micro-batches.
    """
    section, generation = recipe.section(name), recipe.generation
    if generation.backend != "auto":
        for key in BACKEND_FIELDS:
            if key in section:
                raise RecipeError(f"generation.backend and {name}.{key} both set: keep generation.backend")
    if generation.batch_size is None:
        return
    for key in BATCH_FIELDS:
        if key in section:
            raise RecipeError(f"generation.batch_size and {name}.{key} both set: keep generation.batch_size")
    micro = recipe.training.per_device_batch_size
    if generation.batch_size % micro:
        raise RecipeError(
            f"generation.batch_size ({generation.batch_size}) must be a multiple of training.per_device_batch_size "
            f"({micro}): TRL trains on each generated batch in whole micro-batches"
        )


def check_batches(recipe: Recipe, name: str, default_group: int) -> None:
    """The group needs two completions at least, and the generation batch must hold whole groups."""
    section = recipe.section(name)
    group = group_size(section, default_group)
    if not isinstance(group, int) or group < 2:
        raise RecipeError(
            f"{name}.num_generations: must be an integer of at least 2 (advantages are relative to the group)"
        )
    processes = world_size()
    batch = section.get("generation_batch_size") or generation_batch(recipe, name) * processes
    if batch % group:
        raise RecipeError(
            f"{name}.num_generations: the generation batch of {batch} completions (generation.batch_size, or "
            f"training.per_device_batch_size x steps per generation, x {processes} processes) is not "
            f"a multiple of the group size {group}; each prompt's {group} completions must be generated together"
        )


def check_importance_sampling(recipe: Recipe, name: str, config_class: type) -> None:
    """`generation.vllm.importance_sampling` is a setting of TRL's GRPO alone."""
    if recipe.generation.vllm.importance_sampling is not None and not has_importance_sampling(config_class):
        raise RecipeError(
            f"generation.vllm.importance_sampling: {no_importance_sampling(config_class)}; "
            f"remove the key for {name}"
        )


def has_importance_sampling(config_class: type) -> bool:
    """Whether the TRL config corrects for the engine's sampling probabilities (GRPO's does, RLOO's not)."""
    return "vllm_importance_sampling_correction" in config_fields(config_class)


def no_importance_sampling(config_class: type) -> str:
    """Why a TRL config without the correction takes none of its settings."""
    return (
        f"TRL's {config_class.__name__} has no importance-sampling correction for the engine's sampling "
        "probabilities"
    )


def check_router_aux_loss(recipe: Recipe, name: str, policy: PreTrainedModel) -> None:
    """`router_aux_loss_coef` only weighs a Mixture-of-Experts router loss.

    Since TRL 1.14 the key defaults to the model's own coefficient, and a value set for a model without
    router logits stops the trainer at start-up; until then its default (0.001) was ignored for dense
    models, so recipes written then may carry it.
    """
    coef = recipe.section(name).get("router_aux_loss_coef")
    if coef and not hasattr(policy.config.get_text_config(), "output_router_logits"):
        raise RecipeError(
            f"{name}.router_aux_loss_coef is {coef}, but {type(policy).__name__} is not a Mixture-of-Experts "
            "model with router logits, so there is no load-balancing loss to weigh: remove the key"
        )
