"""PPO's answers to `llm-rl migrate` (what it has no counterpart for, the critic or the groups a migrated
recipe starts with) and to `llm-rl compare` (what sets a run apart: a critic-free estimator)."""

from __future__ import annotations

import copy
import math
from typing import Any

from llm_rl.algorithms.ppo.estimators import Estimator, find_estimator
from llm_rl.algorithms.ppo.recipe_checks import OWN_LOGPROBS
from llm_rl.algorithms.ppo.settings import GROUP_DEFAULT, PPO_REFUSED_KEYS, SECTION, PPOSettings
from llm_rl.algorithms.trl_groups.migration import migrated_group
from llm_rl.generation.vllm_settings import IMPORTANCE_SAMPLING_FIELDS
from llm_rl.schema import Recipe
from llm_rl.training.args import steps_for_budget


def variant(recipe: dict[str, Any]) -> str | None:
    """The advantage estimator, when it is not GAE with a critic."""
    estimator = chosen_estimator(recipe)
    return None if estimator.needs_critic else f"{estimator.name} advantages, no critic"


# The critic learns this many times faster than the policy (verl's and our arithmetic recipe's ratio).
CRITIC_LR_FACTOR = 10.0


# Critic warm-up in migrated PPO recipes: this share of the run's updates, at most CRITIC_WARMUP_MAX.
CRITIC_WARMUP_SHARE = 0.05


CRITIC_WARMUP_MAX = 50


def chosen_estimator(recipe: dict[str, Any]) -> Estimator:
    """The estimator a (migrated) recipe's `ppo:` section names, GAE by default."""
    section = recipe.get(SECTION) or {}
    return find_estimator(str(section.get("advantage_estimator", PPOSettings().advantage_estimator)))


def missing_counterparts(recipe: dict[str, Any]) -> dict[str, str]:
    """The group algorithms' settings that PPO has no counterpart for, and the nearest thing where
    there is one. Under a group estimator (`ppo.advantage_estimator`), `num_generations` is PPO's too."""
    groups = {} if chosen_estimator(recipe).needs_groups else {"num_generations": batch_semantics(recipe)}
    return {
        **groups,
        "num_generations_eval": "PPO's held-out reward samples one completion per prompt",
        "loss_type": "PPO's loss is the clipped surrogate averaged over tokens",
        "scale_rewards": "PPO normalises advantages itself; ppo.whiten_rewards is the nearest knob",
        "epsilon_high": "PPO's clip is symmetric (ppo.cliprange)",
        "mask_truncated_completions": "nearest: ppo.missing_eos_penalty",
        "steps_per_generation": "PPO generates each update's batch; ppo.num_mini_batches splits it",
        "generation_batch_size": "PPO generates each update's batch",
        "importance_sampling_level": "no sequence-level ratio in PPO",
        "top_entropy_quantile": "no entropy masking in PPO",
        "delta": "no two-sided clipping in PPO",
        "sync_ref_model": "PPO's reference model stays fixed",
        "router_aux_loss_coef": "PPO adds no Mixture-of-Experts load-balancing loss",
        **dict.fromkeys(IMPORTANCE_SAMPLING_FIELDS, OWN_LOGPROBS),
        "vllm_model_impl": "PPO's vLLM engine lets vLLM choose the model's implementation (auto)",
        "vllm_structured_outputs_regex": "PPO samples without structured outputs",
        **{key: f"llm_rl's PPO does not use it: {why}" for key, why in PPO_REFUSED_KEYS.items()},
    }


def batch_semantics(recipe: dict[str, Any]) -> str:
    """What an update's batch holds under a group algorithm and under PPO."""
    training = recipe.get("training") or {}
    batch = training.get("per_device_batch_size", 8) * training.get("gradient_accumulation_steps", 1)
    source = recipe.get(recipe.get("algorithm", "grpo")) or {}
    group = source.get("num_generations", 8)
    if batch % group == 0:
        was = f"{batch // group} prompts x {group} completions"
    else:  # the groups span devices (open-r1's 16 x 4 per device with groups of 14 on 7 GPUs)
        was = f"groups of {group} completions spread over the devices"
    return (
        f"PPO samples one completion per prompt (its critic, not a group, gives the baseline): an update's "
        f"{batch} samples per device are now {batch} prompts, not {was}"
    )


def complete_migration(recipe: dict[str, Any], section: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """The critic a migrated PPO recipe starts with: where from, how fast it learns, its warm-up; under
    a critic-free estimator, no critic, and groups where the estimator needs them."""
    estimator = chosen_estimator({SECTION: section})
    if not estimator.needs_critic:
        if not estimator.needs_groups:
            return []
        return migrated_group(recipe, section, SECTION, GROUP_DEFAULT)
    rewards = recipe.get("rewards") or []
    has_reward_model = any(isinstance(r, dict) and r.get("name") == "reward_model" for r in rewards)
    shared = Recipe.model_validate(
        {k: copy.deepcopy(v) for k, v in recipe.items() if k in Recipe.model_fields}
    )
    section["value_model"] = "reward_model" if has_reward_model else "policy"
    # Rounded to the digits a person writes: 1e-6 x 10 is 9.999999999999999e-06 in binary floats.
    section["critic_learning_rate"] = float(f"{shared.training.learning_rate * CRITIC_LR_FACTOR:.6g}")
    per_update = shared.training.per_device_batch_size * shared.training.gradient_accumulation_steps
    updates = steps_for_budget(shared, per_update)
    section["critic_warmup_steps"] = min(CRITIC_WARMUP_MAX, math.floor(updates * CRITIC_WARMUP_SHARE))
    return [
        (
            "value_model",
            section["value_model"],
            "the critic starts from the reward model"
            if has_reward_model
            else "the policy's weights, a new head",
        ),
        ("critic_learning_rate", section["critic_learning_rate"], "10 x training.learning_rate"),
        (
            "critic_warmup_steps",
            section["critic_warmup_steps"],
            f"5% of the run's {updates} updates, at most 50",
        ),
    ]
