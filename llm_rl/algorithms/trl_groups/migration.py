"""What `llm-rl doctor` and `llm-rl migrate` ask of a TRL group trainer beyond its declaration: the
groups' spread hint, and the settings a migrated recipe gains or cannot keep."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llm_rl.algorithms.base import Idea, SharedOverride
from llm_rl.algorithms.trl_groups.checks import has_importance_sampling, no_importance_sampling
from llm_rl.errors import RecipeError
from llm_rl.generation.vllm_settings import IMPORTANCE_SAMPLING_FIELDS

if TYPE_CHECKING:
    from llm_rl.algorithms.base import Series

# The ideas TRL group trainers' own keys set; a trainer has those of its config's fields.
GROUP_KEY_IDEAS = {
    "num_generations": Idea.GROUPS,
    "num_generations_eval": Idea.HELD_OUT_GROUPS,
    "loss_type": Idea.LOSS_AGGREGATION,
    "scale_rewards": Idea.ADVANTAGE_SCALING,
    "normalize_advantages": Idea.ADVANTAGE_SCALING,
    "epsilon_high": Idea.ASYMMETRIC_CLIP,
    "delta": Idea.TWO_SIDED_CLIP,
    "mask_truncated_completions": Idea.TRUNCATED_COMPLETIONS,
    "steps_per_generation": Idea.MINI_BATCHES,
    "generation_batch_size": Idea.GENERATION_BATCH,
    "importance_sampling_level": Idea.SEQUENCE_RATIO,
    "top_entropy_quantile": Idea.ENTROPY_MASK,
    "sync_ref_model": Idea.REFERENCE_SYNC,
    "router_aux_loss_coef": Idea.ROUTER_LOSS,
    **dict.fromkeys(IMPORTANCE_SAMPLING_FIELDS, Idea.ENGINE_CORRECTION),
    "vllm_model_impl": Idea.ENGINE_MODEL,
    "vllm_structured_outputs_regex": Idea.STRUCTURED_OUTPUTS,
    "push_to_hub": Idea.HUB_PUSH,
}


def key_ideas(fields: frozenset[str]) -> dict[str, Idea]:
    """The ideas of the group trainer keys among a config's fields."""
    return {key: idea for key, idea in GROUP_KEY_IDEAS.items() if key in fields}


def lacking(name: str, config_class: type, declared: Mapping[Idea, str]) -> dict[Idea, str]:
    """What a TRL group trainer has no setting for: what every one lacks, the engine correction where its
    config has none, and what its declaration adds."""
    common = {
        Idea.UNSCORED_COMPLETIONS: (
            f"{name.upper()} leaves a completion that no reward function scored out of its group's baseline"
        )
    }
    if not has_importance_sampling(config_class):
        common[Idea.ENGINE_CORRECTION] = no_importance_sampling(config_class)
    return {**common, **declared}


def zero_spread_hint(series: Series, name: str) -> tuple[str, str] | None:
    """Most groups gave all their completions one reward: they carry no advantage."""
    zero = series("reward/frac_zero_std")
    if not zero:
        return None
    share = sum(v for _, v in zero) / len(zero)
    if share <= 0.5:
        return None
    return (
        f"{share:.0%} of groups had one reward for all their completions (reward/frac_zero_std)",
        f"those groups carry no advantage: raise {name}.num_generations or generation.temperature, or add a "
        "denser reward (partial credit, a format term)",
    )


def shared_overrides(config_class: type) -> dict[str, SharedOverride]:
    """The shared settings a migrated recipe cannot keep for a TRL group trainer: the importance-sampling
    switch, where its config has no such correction."""
    if has_importance_sampling(config_class):
        return {}
    return {"generation.vllm.importance_sampling": SharedOverride(None, no_importance_sampling(config_class))}


def migrated_group(
    recipe: dict[str, Any], section: dict[str, Any], name: str, largest: int
) -> list[tuple[str, Any, str]]:
    """A group size for a recipe that comes from an algorithm without groups: the largest up to
    `largest` that divides an update's batch."""
    if "num_generations" in section:
        return []
    training = recipe.get("training") or {}
    batch = training.get("per_device_batch_size", 8) * training.get("gradient_accumulation_steps", 1)
    group = max((g for g in range(2, largest + 1) if batch % g == 0), default=None)
    if group is None:
        raise RecipeError(
            f"training.per_device_batch_size x gradient_accumulation_steps is {batch}: {name.upper()} needs it "
            "to hold whole groups of at least 2 completions",
        )
    section["num_generations"] = group
    return [("num_generations", group, f"{batch // group} prompts x {group} completions per update")]
