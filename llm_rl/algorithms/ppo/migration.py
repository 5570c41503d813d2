"""PPO's answers to `llm-rl migrate` (the ideas its own keys set and those it has no setting for, the
critic or the groups a migrated recipe starts with) and to `llm-rl compare` (what sets a run apart: a critic-free estimator)."""

from __future__ import annotations

import copy
import math
from typing import Any

from llm_rl.algorithms.base import Idea
from llm_rl.algorithms.ppo.estimators import Estimator, find_estimator
from llm_rl.algorithms.ppo.recipe_checks import OWN_LOGPROBS
from llm_rl.algorithms.ppo.settings import GROUP_DEFAULT, PPO_REFUSED_KEYS, SECTION, PPOSettings
from llm_rl.algorithms.trl_groups.migration import migrated_group
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


# PPO's own keys that set an idea other algorithms set another way or not at all.
KEY_IDEAS = {
    **dict.fromkeys(("value_model", "critic_learning_rate", "critic_warmup_steps"), Idea.CRITIC),
    **dict.fromkeys(("vf_coef", "cliprange_value"), Idea.VALUE_LOSS),
    **dict.fromkeys(("gamma", "lam"), Idea.GAE),
    "advantage_estimator": Idea.ESTIMATOR,
    "whiten_rewards": Idea.ADVANTAGE_SCALING,
    "num_mini_batches": Idea.MINI_BATCHES,
    "missing_eos_penalty": Idea.TRUNCATED_COMPLETIONS,
    "none_reward": Idea.UNSCORED_COMPLETIONS,
    "num_generations": Idea.GROUPS,
}


def lacking(recipe: dict[str, Any]) -> dict[Idea, str]:
    """The ideas PPO has no setting for, and why. Under a group estimator (`ppo.advantage_estimator`) it
    has groups (`ppo.num_generations`)."""
    groups = {} if chosen_estimator(recipe).needs_groups else {Idea.GROUPS: batch_semantics(recipe)}
    return {
        **groups,
        Idea.HELD_OUT_GROUPS: "PPO's held-out reward samples one completion per prompt",
        Idea.LOSS_AGGREGATION: "PPO's loss is the clipped surrogate averaged over tokens",
        Idea.ASYMMETRIC_CLIP: "PPO's clip is symmetric (ppo.cliprange)",
        Idea.TWO_SIDED_CLIP: "no two-sided clipping in PPO",
        Idea.GENERATION_BATCH: "PPO generates each update's batch",
        Idea.SEQUENCE_RATIO: "no sequence-level ratio in PPO",
        Idea.ENTROPY_MASK: "no entropy masking in PPO",
        Idea.REFERENCE_SYNC: "PPO's reference model stays fixed",
        Idea.ROUTER_LOSS: "PPO adds no Mixture-of-Experts load-balancing loss",
        Idea.ENGINE_CORRECTION: OWN_LOGPROBS,
        Idea.ENGINE_MODEL: "PPO's vLLM engine lets vLLM choose the model's implementation (auto)",
        Idea.STRUCTURED_OUTPUTS: "PPO samples without structured outputs",
        Idea.HUB_PUSH: f"llm_rl's PPO does not use it: {PPO_REFUSED_KEYS['push_to_hub']}",
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
