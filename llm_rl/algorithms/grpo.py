"""GRPO: TRL's `GRPOTrainer` built from a recipe.

The shared sections map onto `GRPOConfig` through `llm_rl.training.args.shared_training_args`; the
recipe's `grpo:` section is passed through by TRL field name (checked against the dataclass). What
GRPO shares with RLOO is in `llm_rl.algorithms.trl_groups`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trl import GRPOConfig

from llm_rl.algorithms import trl_groups
from llm_rl.algorithms.base import Components, Series
from llm_rl.errors import RecipeError
from llm_rl.schema import Recipe
from llm_rl.training.args import SampleCounter, sample_counter

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback

NAME = "grpo"
METRIC_NAMES = trl_groups.METRIC_NAMES
SCHEDULABLE = trl_groups.schedulable(NAME)
KL_COEFFICIENT = "grpo.beta"
# TRL's GRPOConfig default group size.
DEFAULT_GROUP_SIZE = 8
COUNTERPARTS = trl_groups.counterparts(GRPOConfig, "GRPO's beta weighs a KL loss term")
SHARED_OVERRIDES = trl_groups.shared_overrides(GRPOConfig)


def section_fields() -> frozenset[str]:
    return trl_groups.config_fields(GRPOConfig)


def check_section(section: dict[str, Any], recipe: Recipe) -> None:
    trl_groups.check_fields(NAME, section, GRPOConfig)
    if recipe.advantages.normalize != "auto" and "scale_rewards" in section:
        raise RecipeError(
            "advantages.normalize and grpo.scale_rewards both set: they are the same setting; keep one"
        )


def check_recipe(recipe: Recipe) -> None:
    trl_groups.check_generation(recipe, NAME)
    trl_groups.check_batches(recipe, NAME, DEFAULT_GROUP_SIZE)
    trl_groups.check_schedules(recipe, NAME)
    trl_groups.check_importance_sampling(recipe, NAME, GRPOConfig)


def samples_per_step(recipe: Recipe) -> int:
    return trl_groups.samples_per_step(recipe, NAME)


def count_samples(recipe: Recipe) -> SampleCounter:
    """The sample counter for the metrics and checkpoint names: updates so far x samples per update."""
    return sample_counter(samples_per_step(recipe))


def trainer_config(recipe: Recipe) -> GRPOConfig:
    """The `GRPOConfig` for a recipe; `advantages.normalize` is GRPO's `scale_rewards` (group, batch, none)."""
    normalize = recipe.advantages.normalize
    advantage_fields = {} if normalize == "auto" else {"scale_rewards": normalize}
    return trl_groups.trainer_config(recipe, NAME, GRPOConfig, advantage_fields)


def prepare(components: Components) -> None:
    """Checks beyond the recipe's that need the loaded model, made before the run folder is touched."""
    trl_groups.check_router_aux_loss(components.recipe, NAME, components.policy)


def build_trainer(components: Components, callbacks: list[TrainerCallback]) -> Trainer:
    """A ready-to-train `GRPOTrainer` over the recipe's prompts and reward functions."""
    from trl import GRPOTrainer

    config = trainer_config(components.recipe)
    return trl_groups.build_trainer(components, callbacks, GRPOTrainer, config)


def apply_setting(trainer: Trainer, key: str, value: float) -> None:
    trl_groups.apply_setting(trainer, NAME, key, value)


def finish_from_checkpoint(trainer: Trainer, checkpoint: Path) -> None:
    trl_groups.finish_from_checkpoint(trainer, checkpoint)


def hand_over(stage: Recipe, previous_final: Path, overrides: dict[str, Any]) -> None:
    """A GRPO stage takes nothing from the previous stage beyond its policy."""


def critic_path(recipe: Recipe, policy_path: str) -> str | None:
    return None


def needs_reference(recipe: Recipe) -> bool:
    """GRPO loads a reference model when beta is above 0 (TRL's default is 0)."""
    return recipe.section(NAME).get("beta", COUNTERPARTS["kl_coefficient"].default) > 0


def generation_batch(recipe: Recipe) -> int:
    return trl_groups.generation_batch(recipe, NAME)


def flat_reward_hint(series: Series) -> tuple[str, str] | None:
    return trl_groups.zero_spread_hint(series, NAME)


def variant(recipe: dict[str, Any]) -> str | None:
    return None


def missing_counterparts(recipe: dict[str, Any]) -> dict[str, str]:
    """PPO's settings that GRPO has no counterpart for."""
    return {
        "value_model": "GRPO has no critic",
        "critic_learning_rate": "GRPO has no critic",
        "critic_warmup_steps": "GRPO has no critic",
        "vf_coef": "GRPO has no value loss",
        "cliprange_value": "GRPO has no value loss",
        "gamma": "GRPO's advantage is the group-normalised reward, not GAE",
        "lam": "GRPO's advantage is the group-normalised reward, not GAE",
        "advantage_estimator": "GRPO's advantage is always the group-standardised reward (PPO's estimator: group)",
        "whiten_rewards": "nearest: grpo.scale_rewards",
        "num_mini_batches": "nearest: grpo.steps_per_generation",
        "missing_eos_penalty": "nearest: grpo.mask_truncated_completions",
        "none_reward": "GRPO leaves samples out of a reward that returns None",
    }


def complete_migration(recipe: dict[str, Any], section: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """A group size that divides the generation batch, when the source had no groups."""
    return trl_groups.migrated_group(recipe, section, NAME, DEFAULT_GROUP_SIZE)
