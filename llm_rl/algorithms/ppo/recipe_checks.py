"""The recipe checks of PPO: its section's keys, the advantage estimator's needs, vLLM as PPO runs it, and
batch arithmetic that works; and the settings a critic-free estimator does not read (warnings)."""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import TrainingArguments

from llm_rl.algorithms.ppo.settings import (
    CRITIC_KEYS,
    PPO_REFUSED_KEYS,
    SECTION,
    PPOSettings,
    ppo_settings,
    rollout_batch,
    samples_per_step,
)
from llm_rl.errors import RecipeError, did_you_mean
from llm_rl.schema import Recipe
from llm_rl.training.args import deepspeed_config_sections, steps_for_budget

# What PPO's vLLM generation cannot do, and why: for the recipe checks and `llm-rl migrate`.
COLOCATED_ONLY = (
    "PPO runs its vLLM engine inside each training process (colocate); a separate server is for GRPO and RLOO"
)
OWN_LOGPROBS = (
    "PPO trains on the log-probs its own forward pass computes for the sampled tokens, never on the engine's"
)

# Keys a critic-free estimator has no use for beyond the critic's own (`CRITIC_KEYS`): GAE's lambda and
# its reward whitening.
CRITIC_FREE_UNUSED = ("lam", "whiten_rewards")


def section_fields() -> frozenset[str]:
    """The `ppo:` keys: our schema's PPO keys and the fields of `TrainingArguments`, less those refused."""
    arguments = frozenset(f.name for f in dataclasses.fields(TrainingArguments) if f.init)
    return (frozenset(PPOSettings.model_fields) | arguments) - PPO_REFUSED_KEYS.keys()


def check_section(section: dict[str, Any], recipe: Recipe) -> None:
    """`ppo:` keys are PPO keys of ours (`PPOSettings`) or `TrainingArguments` fields, with valid values."""
    fields = section_fields()
    for key in section:
        if key in PPO_REFUSED_KEYS:
            raise RecipeError(f"ppo.{key}: not used by llm_rl's PPO: {PPO_REFUSED_KEYS[key]}")
        if key not in fields:
            # Suggest the PPO keys first: a misspelt PPO key is likelier than a TrainingArguments field.
            hint = did_you_mean(
                key, [*PPOSettings.model_fields, *sorted(fields - PPOSettings.model_fields.keys())]
            )
            raise RecipeError(
                f"ppo.{key}: not a PPO key (TRL's PPOConfig names, llm_rl's own, or TrainingArguments "
                f"fields){hint}"
            )
    ppo_settings(recipe)
    if recipe.advantages.whiten_rewards and "whiten_rewards" in section:
        raise RecipeError(
            "advantages.whiten_rewards and ppo.whiten_rewards both set: they are the same setting; keep one"
        )


def check_recipe(recipe: Recipe) -> None:
    """The recipe as PPO runs it: an estimator with what it needs, and batch arithmetic that works."""
    check_vllm(recipe)
    if not recipe.stages:
        # A staged recipe's own budget is no stage's; each stage is checked as a recipe of its own.
        settings = ppo_settings(recipe)
        check_estimator(recipe, settings)
        check_settings(recipe, settings)


def check_estimator(recipe: Recipe, settings: PPOSettings) -> None:
    """The advantage estimator's needs: groups that fit the batch and a normalisation it has."""
    estimator = settings.advantage_estimator
    normalize, own = recipe.advantages.normalize, settings.estimator.auto_normalization
    if normalize not in ("auto", "none", own):
        raise RecipeError(
            f"advantages.normalize: {normalize!r} does not apply to ppo.advantage_estimator {estimator!r}, "
            f"which normalises by {own} (auto) or not at all (none)"
            + (
                "; for GRPO's group normalisation set ppo.advantage_estimator: group"
                if normalize == "group"
                else ""
            )
        )
    group_size, local_batch = settings.group_size, rollout_batch(recipe)
    if settings.estimator.needs_groups and group_size < 2:
        raise RecipeError(
            f"ppo.num_generations: the {estimator} estimator's baseline is the other completions of the same "
            f"prompt, so it needs at least 2 per prompt (got {group_size})"
        )
    if local_batch % group_size:
        raise RecipeError(
            f"ppo.num_generations ({group_size}) must divide PPO's rollout batch of {local_batch} completions per "
            "process (training.per_device_batch_size x gradient_accumulation_steps): each process samples "
            "whole groups"
        )


def check_vllm(recipe: Recipe) -> None:
    """PPO's vLLM engines run inside the training processes, and PPO trains on its own log-probs."""
    if recipe.generation.backend != "vllm":
        return
    section = recipe.generation.vllm
    if section.mode != "colocate":
        raise RecipeError(f"generation.vllm.mode: {COLOCATED_ONLY}")
    if section.importance_sampling is not None:
        raise RecipeError(f"generation.vllm.importance_sampling: {OWN_LOGPROBS}; remove the key")


def unused_settings(recipe: Recipe, settings: PPOSettings) -> list[str]:
    """The recipe's settings the estimator does not read, each with why: a critic-free estimator's
    critic keys (a recipe keeps them when it switches estimator, as it keeps an inactive algorithm's
    section), and `gamma` where the estimator does not discount. Warnings, not errors."""
    if settings.needs_critic:
        return []
    estimator = settings.advantage_estimator
    section, scheduled = recipe.section(SECTION), recipe.schedules
    given = [f"{SECTION}.{key}" for key in (*CRITIC_KEYS, *CRITIC_FREE_UNUSED)]
    given = [key for key in given if key.split(".")[1] in section or key in scheduled]
    lines = []
    if given:
        lines.append(
            f"{', '.join(given)}: not used, as ppo.advantage_estimator {estimator!r} trains no critic "
            "(these set the critic, GAE's lambda or its reward whitening)"
        )
    discounted = settings.gamma != 1.0 or f"{SECTION}.gamma" in scheduled
    if settings.estimator.needs_groups and discounted:
        lines.append(
            f"{SECTION}.gamma: not used, as ppo.advantage_estimator {estimator!r} gives each completion one "
            "undiscounted advantage, from its score against its group's (reinforce_pp discounts)"
        )
    if recipe.advantages.whiten_rewards:
        lines.append(f"advantages.whiten_rewards: not used, as it whitens GAE's rewards ({estimator})")
    return lines


def check_settings(recipe: Recipe, settings: PPOSettings) -> None:
    """Batch arithmetic and settings that conflict, explained before anything loads."""
    training = recipe.training
    local_batch = rollout_batch(recipe)
    mini_batches = settings.num_mini_batches
    if training.gradient_accumulation_steps % mini_batches:
        raise RecipeError(
            f"ppo.num_mini_batches ({mini_batches}) must divide training.gradient_accumulation_steps "
            f"({training.gradient_accumulation_steps}): each PPO epoch splits the rollout batch of "
            f"{local_batch} prompts per process (training.per_device_batch_size x gradient_accumulation_steps) "
            f"into {mini_batches} mini-batches of whole micro-batches of training.per_device_batch_size"
        )
    batch_size = recipe.generation.batch_size
    if batch_size is not None and batch_size > local_batch:
        raise RecipeError(
            f"generation.batch_size ({batch_size}) is above PPO's rollout batch of {local_batch} prompts per "
            "process (training.per_device_batch_size x gradient_accumulation_steps): PPO generates one update's "
            "prompts at a time; raise gradient_accumulation_steps to generate more at once"
        )
    mini_batch = local_batch // mini_batches
    if (settings.whiten_rewards or recipe.advantages.whiten_rewards) and mini_batch < 8:
        raise RecipeError(
            f"ppo.whiten_rewards needs at least 8 samples per mini-batch and process (here {mini_batch}): "
            "whitening over fewer is noise"
        )
    if recipe.section(SECTION).get("stop_token") is not None and settings.stop_token_id is not None:
        raise RecipeError("ppo.stop_token and ppo.stop_token_id both set: give one")
    steps = steps_for_budget(recipe, samples_per_step(recipe))
    if settings.warmup_updates >= steps:
        raise RecipeError(
            f"ppo.critic_warmup_steps ({settings.critic_warmup_steps}) is not below the run's {steps} updates: "
            "the policy would never train"
        )


def check_deepspeed_optimizer() -> None:
    """PPO builds its own optimizer and scheduler; one from the DeepSpeed config would replace them."""
    sections = deepspeed_config_sections("optimizer", "scheduler")
    if sections:
        raise RecipeError(
            f"the DeepSpeed config sets {' and '.join(sections)}, which would replace PPO's own: one optimizer "
            "with the policy and the critic in groups of their own (ppo.critic_learning_rate, "
            "ppo.critic_warmup_steps) and the recipe's schedule; remove them and set training.* instead"
        )
