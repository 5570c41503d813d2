"""RLOO: TRL's `RLOOTrainer` built from a recipe (REINFORCE Leave-One-Out, Ahmadian et al. 2024).

Like GRPO it samples a group of completions per prompt and needs no critic; each completion's
baseline is the mean reward of the other completions of its prompt, and the KL to the reference model
is a penalty on the reward (`rloo.beta`, TRL's default 0.05) rather than a loss term. The recipe's
`rloo:` section takes `RLOOConfig` fields by name. What RLOO shares with GRPO is in
`llm_rl.algorithms.trl_groups`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trl import RLOOConfig

from llm_rl.algorithms import trl_groups
from llm_rl.algorithms.base import Components, Series
from llm_rl.errors import RecipeError
from llm_rl.schema import Recipe
from llm_rl.training.args import SampleCounter, sample_counter

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback

NAME = "rloo"
METRIC_NAMES = trl_groups.METRIC_NAMES
SCHEDULABLE = trl_groups.schedulable(NAME)
KL_COEFFICIENT = "rloo.beta"
# TRL's RLOOConfig default group size is 2; groups of 2 leave a one-sample baseline, so a recipe
# converted from an algorithm without groups gets up to 8, as for GRPO.
DEFAULT_GROUP_SIZE = 2
MIGRATED_GROUP_SIZE = 8
COUNTERPARTS = trl_groups.counterparts(
    RLOOConfig, "RLOO's beta subtracts the sequence's KL to the reference from its reward"
)
SHARED_OVERRIDES = trl_groups.shared_overrides(RLOOConfig)


def section_fields() -> frozenset[str]:
    return trl_groups.config_fields(RLOOConfig)


def check_section(section: dict[str, Any], recipe: Recipe) -> None:
    trl_groups.check_fields(NAME, section, RLOOConfig)
    if recipe.advantages.normalize != "auto" and "normalize_advantages" in section:
        raise RecipeError(
            "advantages.normalize and rloo.normalize_advantages both set: they are the same setting; keep one"
        )


def check_recipe(recipe: Recipe) -> None:
    if recipe.advantages.normalize == "group":
        raise RecipeError(
            "advantages.normalize: 'group' divides by each group's reward spread, which RLOO does not do: "
            "use 'batch' (RLOO's normalize_advantages) or 'none'"
        )
    trl_groups.check_generation(recipe, NAME)
    trl_groups.check_batches(recipe, NAME, DEFAULT_GROUP_SIZE)
    trl_groups.check_schedules(recipe, NAME)
    trl_groups.check_importance_sampling(recipe, NAME, RLOOConfig)


def samples_per_step(recipe: Recipe) -> int:
    return trl_groups.samples_per_step(recipe, NAME)


def count_samples(recipe: Recipe) -> SampleCounter:
    """The sample counter for the metrics and checkpoint names: updates so far x samples per update."""
    return sample_counter(samples_per_step(recipe))


def trainer_config(recipe: Recipe) -> RLOOConfig:
    """The `RLOOConfig` for a recipe; `advantages.normalize: batch` is RLOO's `normalize_advantages`."""
    normalize = recipe.advantages.normalize
    advantage_fields = {} if normalize == "auto" else {"normalize_advantages": normalize == "batch"}
    return trl_groups.trainer_config(recipe, NAME, RLOOConfig, advantage_fields)


def prepare(components: Components) -> None:
    """Checks beyond the recipe's that need the loaded model, made before the run folder is touched."""
    trl_groups.check_router_aux_loss(components.recipe, NAME, components.policy)


def build_trainer(components: Components, callbacks: list[TrainerCallback]) -> Trainer:
    """A ready-to-train `RLOOTrainer` over the recipe's prompts and reward functions."""
    from trl import RLOOTrainer

    config = trainer_config(components.recipe)
    return trl_groups.build_trainer(components, callbacks, RLOOTrainer, config)


def apply_setting(trainer: Trainer, key: str, value: float) -> None:
    trl_groups.apply_setting(trainer, NAME, key, value)


def finish_from_checkpoint(trainer: Trainer, checkpoint: Path) -> None:
    trl_groups.finish_from_checkpoint(trainer, checkpoint)


def hand_over(stage: Recipe, previous_final: Path, overrides: dict[str, Any]) -> None:
    """An RLOO stage takes nothing from the previous stage beyond its policy."""


def critic_path(recipe: Recipe, policy_path: str) -> str | None:
    return None


def needs_reference(recipe: Recipe) -> bool:
    """RLOO loads a reference model when beta is above 0 (TRL's default is 0.05)."""
    return recipe.section(NAME).get("beta", COUNTERPARTS["kl_coefficient"].default) > 0


def generation_batch(recipe: Recipe) -> int:
    return trl_groups.generation_batch(recipe, NAME)


def flat_reward_hint(series: Series) -> tuple[str, str] | None:
    return trl_groups.zero_spread_hint(series, NAME)


def variant(recipe: dict[str, Any]) -> str | None:
    return None


def missing_counterparts(recipe: dict[str, Any]) -> dict[str, str]:
    """Settings of GRPO and PPO that RLOO has no counterpart for."""
    no_critic = "RLOO has no critic: the other completions of the prompt give the baseline"
    return {
        "scale_rewards": "RLOO does not divide by the group's spread; nearest: rloo.normalize_advantages",
        "loss_type": "RLOO's loss is one clipped ratio per completion",
        "importance_sampling_level": "RLOO's ratio is per sequence already",
        **dict.fromkeys(("value_model", "critic_learning_rate", "critic_warmup_steps"), no_critic),
        **dict.fromkeys(("vf_coef", "cliprange_value"), "RLOO has no value loss"),
        **dict.fromkeys(("gamma", "lam"), "RLOO's advantage is the leave-one-out reward, not GAE"),
        "advantage_estimator": "RLOO's advantage is always the leave-one-out reward (PPO's estimator: leave_one_out)",
        "whiten_rewards": "nearest: rloo.normalize_advantages",
        "num_mini_batches": "nearest: rloo.steps_per_generation",
        "missing_eos_penalty": "nearest: rloo.mask_truncated_completions",
        **trl_groups.missing_importance_sampling(RLOOConfig),
    }


def complete_migration(recipe: dict[str, Any], section: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """A group size that divides the generation batch, when the source had no groups."""
    return trl_groups.migrated_group(recipe, section, NAME, MIGRATED_GROUP_SIZE)
