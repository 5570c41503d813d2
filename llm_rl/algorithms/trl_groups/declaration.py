"""A TRL trainer that samples a group of completions per prompt, declared as data: its config and trainer
class, its group sizes, its advantage key, what its KL weight means and the ideas it has no setting for.

The `Algorithm` protocol's answers follow from the declaration, so GRPO and RLOO are a declaration
each (`llm_rl.algorithms.grpo`, `llm_rl.algorithms.rloo`), and a further TRL group trainer is one more
(docs/architecture.md, "Adding a TRL trainer").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_rl.algorithms.base import Components, Counterpart, Idea, Series, SharedOverride
from llm_rl.algorithms.trl_groups import checks, config, migration, trainer
from llm_rl.errors import RecipeError
from llm_rl.schema import Recipe
from llm_rl.training.args import SampleCounter, sample_counter

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback, TrainingArguments

# What each `advantages.normalize` value does, for the message when a trainer cannot do it.
NORMALIZATION_MEANING = {
    "group": "divides by each group's reward spread",
    "batch": "divides by the batch's reward spread",
    "none": "leaves the advantages unscaled",
}


@dataclass(frozen=True)
class GroupTrainer:
    """One TRL group trainer: what differs between GRPO, RLOO and the next one, and nothing else."""

    # The recipe's `algorithm:` value and the key of its section.
    NAME: str
    # TRL's config dataclass: the section's keys, their defaults (the group size among them).
    config_class: type[TrainingArguments]
    # What its KL weight (`beta`) does, for migrate's rows.
    kl_meaning: str
    # The section key that is the same setting as `advantages.normalize`, and the value it takes for
    # each `advantages.normalize` value the trainer can run (the others are refused).
    advantage_key: str
    advantage_values: Mapping[str, Any]
    # The largest group a recipe converted from an algorithm without groups gets.
    migrated_group_size: int = 8
    # The ideas other algorithms have a setting for and it has none, and why (migrate's warnings);
    # what every TRL group trainer lacks is added (`migration.lacking`).
    lacks: Mapping[Idea, str] = field(default_factory=dict)

    @property
    def trainer_name(self) -> str:
        """The TRL trainer class's name in `trl`, from its config's (TRL names them in pairs:
        GRPOConfig, GRPOTrainer); imported only when a run builds one."""
        return self.config_class.__name__.removesuffix("Config") + "Trainer"

    # --- the protocol's constants (upper-case, as a module's would be), from the declaration ---

    @property
    def METRIC_NAMES(self) -> Mapping[str, str]:
        return config.METRIC_NAMES

    @property
    def SCHEDULABLE(self) -> tuple[str, ...]:
        return config.schedulable(self.NAME)

    @property
    def KL_COEFFICIENT(self) -> str:
        return f"{self.NAME}.beta"

    @property
    def STARTS_ABOVE_ZERO(self) -> Mapping[str, str]:
        return {
            self.KL_COEFFICIENT: f"{self.NAME.upper()} builds its reference model only when beta is above 0 "
            "at the start"
        }

    @property
    def COUNTERPARTS(self) -> Mapping[str, Counterpart]:
        return config.counterparts(self.config_class, self.kl_meaning)

    @property
    def SHARED_OVERRIDES(self) -> Mapping[str, SharedOverride]:
        return migration.shared_overrides(self.config_class)

    @property
    def KEY_IDEAS(self) -> Mapping[str, Idea]:
        return migration.key_ideas(self.section_fields())

    @property
    def default_group_size(self) -> int:
        """TRL's own `num_generations` default for the trainer."""
        return config.field_default(self.config_class, "num_generations")

    # --- the recipe ---

    def section_fields(self) -> frozenset[str]:
        return config.config_fields(self.config_class)

    def check_section(self, section: dict[str, Any], recipe: Recipe) -> None:
        checks.check_fields(self.NAME, section, self.config_class)
        if recipe.advantages.normalize != "auto" and self.advantage_key in section:
            raise RecipeError(
                f"advantages.normalize and {self.NAME}.{self.advantage_key} both set: they are the same "
                "setting; keep one"
            )

    def check_recipe(self, recipe: Recipe) -> None:
        self.check_normalization(recipe.advantages.normalize)
        checks.check_generation(recipe, self.NAME)
        checks.check_batches(recipe, self.NAME, self.default_group_size)
        checks.check_importance_sampling(recipe, self.NAME, self.config_class)

    def check_normalization(self, normalize: str) -> None:
        """`advantages.normalize` is one the trainer can run."""
        if normalize == "auto" or normalize in self.advantage_values:
            return
        choices = " or ".join(repr(value) for value in self.advantage_values)
        raise RecipeError(
            f"advantages.normalize: {normalize!r} {NORMALIZATION_MEANING[normalize]}, which "
            f"{self.NAME.upper()} does not do: use {choices} ({self.NAME.upper()}'s {self.advantage_key})"
        )

    # --- a run ---

    def samples_per_step(self, recipe: Recipe) -> int:
        return config.samples_per_step(recipe, self.NAME)

    def count_samples(self, recipe: Recipe) -> SampleCounter:
        """The sample counter for the metrics and checkpoint names: updates so far x samples per update."""
        return sample_counter(self.samples_per_step(recipe))

    def trainer_config(self, recipe: Recipe) -> TrainingArguments:
        """The TRL config for a recipe; `advantages.normalize` is the trainer's own advantage key."""
        normalize = recipe.advantages.normalize
        advantage_fields = (
            {} if normalize == "auto" else {self.advantage_key: self.advantage_values[normalize]}
        )
        return config.trainer_config(recipe, self.NAME, self.config_class, advantage_fields)

    def prepare(self, components: Components) -> None:
        """Checks beyond the recipe's that need the loaded model, made before the run folder is touched."""
        checks.check_router_aux_loss(components.recipe, self.NAME, components.policy)

    def build_trainer(self, components: Components, callbacks: list[TrainerCallback]) -> Trainer:
        """A ready-to-train TRL trainer over the recipe's prompts and reward functions."""
        return trainer.build_trainer(
            components, callbacks, trl_class(self.trainer_name), self.trainer_config(components.recipe)
        )

    def apply_setting(self, trainer_: Trainer, key: str, value: float) -> None:
        trainer.apply_setting(trainer_, self.NAME, key, value)

    def finish_from_checkpoint(self, trainer_: Trainer, checkpoint: Path) -> None:
        trainer.finish_from_checkpoint(trainer_, checkpoint)

    def hand_over(self, stage: Recipe, previous_final: Path, overrides: dict[str, Any]) -> None:
        """A group trainer's stage takes nothing from the previous stage beyond its policy."""

    # --- `llm-rl plan` ---

    def critic_path(self, recipe: Recipe, policy_path: str) -> str | None:
        return None

    def needs_reference(self, recipe: Recipe) -> bool:
        """A reference model is loaded when beta is above 0 (TRL's default: GRPO 0, RLOO 0.05)."""
        return recipe.section(self.NAME).get("beta", self.COUNTERPARTS["kl_coefficient"].default) > 0

    def generation_batch(self, recipe: Recipe) -> int:
        return config.generation_batch(recipe, self.NAME)

    # --- `llm-rl doctor`, `compare` and `migrate` ---

    def flat_reward_hint(self, series: Series) -> tuple[str, str] | None:
        return migration.zero_spread_hint(series, self.NAME)

    def variant(self, recipe: dict[str, Any]) -> str | None:
        return None

    def lacking(self, recipe: dict[str, Any]) -> Mapping[Idea, str]:
        return migration.lacking(self.NAME, self.config_class, self.lacks)

    def complete_migration(
        self, recipe: dict[str, Any], section: dict[str, Any]
    ) -> list[tuple[str, Any, str]]:
        """A group size that divides the generation batch, when the source had no groups."""
        return migration.migrated_group(recipe, section, self.NAME, self.migrated_group_size)


@functools.cache
def trl_class(name: str) -> type[Trainer]:
    """A TRL trainer class by name, imported when first asked for."""
    import trl

    return getattr(trl, name)
